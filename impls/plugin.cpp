// The host side of the C plugin ABI: dlopen a user's library, check its ABI version and vtable, and wrap it as an
// attncheck::Impl. Problems are handed over as attncheck_problem descriptors pointing straight at the harness's
// tensors (no copies), so the plugin sees exactly the bytes and strides a built-in implementation sees.
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/features.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/plugin.h"
#include "attncheck/plugin_loader.hpp"
#include "plugin_abi.hpp"

namespace attncheck {
namespace {

// A message buffer handed to the plugin; always NUL-terminated afterwards, whatever the plugin wrote.
struct MessageBuffer {
  char text[1024] = {};
  std::string str() {
    text[sizeof text - 1] = '\0';
    return text;
  }
};

std::string file_error(const std::string& path, const std::string& what) { return "plugin " + path + ": " + what; }

int32_t abi_dtype(DType t) {
  switch (t) {
    case DType::f64: return ATTNCHECK_DTYPE_F64;
    case DType::f32: return ATTNCHECK_DTYPE_F32;
    case DType::f16: return ATTNCHECK_DTYPE_F16;
    case DType::bf16: return ATTNCHECK_DTYPE_BF16;
    case DType::u8: return ATTNCHECK_DTYPE_U8;
    case DType::e4m3: return ATTNCHECK_DTYPE_E4M3;
    case DType::e5m2: return ATTNCHECK_DTYPE_E5M2;
    case DType::i8: return ATTNCHECK_DTYPE_I8;  // KV-cache codes only (tag 14)
    case DType::q4_0:
    case DType::q4_1: break;  // never offered to a plugin (feature kv-q4 has no extension tag)
  }
  return -1;
}

// Strides of a mask/bias tensor as seen through broadcasting to [B,Hq,Lq,Lk]: a size-1 dim gets stride 0.
void broadcast_strides(const Tensor& t, int64_t shape[4], int64_t strides[4]) {
  for (int d = 0; d < 4; ++d) {
    shape[d] = t.shape[static_cast<size_t>(d)];
    strides[d] = shape[d] == 1 ? 0 : t.strides[static_cast<size_t>(d)];
  }
}

template <size_t N>
void copy_strides(const Tensor& t, int64_t (&s)[N]) {
  for (size_t d = 0; d < N; ++d) s[d] = t.strides[d];
}

}  // namespace

void describe(const Problem& p, Described& out) {
  attncheck_problem& d = out.d;
  std::vector<int64_t>& diag = out.diag;
  std::memset(&d, 0, sizeof d);
  d.B = p.B;
  d.Hq = p.Hq;
  d.Hkv = p.Hkv;
  d.Lq = p.Lq;
  d.Lk = p.Lk;
  d.Dqk = p.Dqk;
  d.Dv = p.Dv;
  d.dtype = abi_dtype(p.dtype);
  d.layout = p.layout == Layout::BHSD ? ATTNCHECK_LAYOUT_BHSD : ATTNCHECK_LAYOUT_BSHD;
  d.stat_dtype = abi_dtype(p.stat_dtype());
  d.scale = p.effective_scale();
  d.causal = p.causal;
  d.alignment = static_cast<int32_t>(p.alignment);  // enum orders match: see the static_asserts below
  diag.resize(static_cast<size_t>(p.B));
  for (int64_t b = 0; b < p.B; ++b) diag[static_cast<size_t>(b)] = p.diagonal_offset(b);
  d.diagonal_offset = diag.data();
  d.causal_offsets = p.causal_offsets.empty() ? nullptr : p.causal_offsets.data();
  d.causal_offset = p.causal_offset;
  d.key_lengths = p.key_lengths.empty() ? nullptr : p.key_lengths.data();
  d.window_left = p.window_left;
  d.window_right = p.window_right;
  d.softcap = p.softcap;
  if (p.mask_shape)
    for (int i = 0; i < 4; ++i) d.mask_shape[i] = (*p.mask_shape)[static_cast<size_t>(i)];
  d.bias_dtype = abi_dtype(p.bias_dtype);
  if (p.bias_shape)
    for (int i = 0; i < 4; ++i) d.bias_shape[i] = (*p.bias_shape)[static_cast<size_t>(i)];
  d.fill = p.fill == MaskFill::neg_inf ? ATTNCHECK_FILL_NEG_INF : ATTNCHECK_FILL_FINITE;
  d.fill_value = p.fill_value;
  d.fully_masked = static_cast<int32_t>(p.fully_masked);
  d.dropout_p = p.dropout_p;
  d.dropout_seed = p.dropout_seed;
  // v2 fields (a v1 plugin never reads past weights_strides).
  d.struct_size = sizeof d;
  d.abi_version = ATTNCHECK_PLUGIN_ABI_VERSION;
  out.name = p.name();
  out.case_name = {{ATTNCHECK_EXT_CASE_NAME, sizeof out.case_name, nullptr}, out.name.c_str()};
  d.next = &out.case_name.header;
  // Extension features, each chained only when the problem uses it (a plugin is offered it only if declared).
  const attncheck_extension** tail = &out.case_name.header.next;
  if (!p.sinks.empty()) {
    out.sinks = {{ATTNCHECK_EXT_SINKS, sizeof out.sinks, nullptr}, p.sinks.data()};
    *tail = &out.sinks.header;
    tail = &out.sinks.header.next;
  }
  if (p.scores_out != ScoresOut::none) {
    out.scores = {{ATTNCHECK_EXT_SCORES, sizeof out.scores, nullptr}, static_cast<int32_t>(p.scores_out), nullptr, {}};
    *tail = &out.scores.header;
    tail = &out.scores.header.next;
  }
  if (p.past_len > 0) {
    out.kv_append = {};
    out.kv_append.header = {ATTNCHECK_EXT_KV_APPEND, sizeof out.kv_append, nullptr};
    out.kv_append.past_len = p.past_len;
    *tail = &out.kv_append.header;
    tail = &out.kv_append.header.next;
  }
  if (!p.cu_seqlens_q.empty()) {
    out.varlen = {{ATTNCHECK_EXT_VARLEN, sizeof out.varlen, nullptr},
                  p.sequences(),
                  p.cu_seqlens_q.data(),
                  p.cu_seqlens_k.data()};
    *tail = &out.varlen.header;
    tail = &out.varlen.header.next;
  }
  if (p.page_size > 0) {
    out.paged_kv = {{ATTNCHECK_EXT_PAGED_KV, sizeof out.paged_kv, nullptr},
                    p.page_size,
                    p.num_pages,
                    p.pages_per_seq(),
                    p.block_table.data()};
    *tail = &out.paged_kv.header;
    tail = &out.paged_kv.header.next;
  }
  if (is_fp8(p.dtype)) {
    out.fp8 = {
        {ATTNCHECK_EXT_FP8, sizeof out.fp8, nullptr}, p.descale_q, p.descale_k, p.descale_v, abi_dtype(p.out_dtype())};
    *tail = &out.fp8.header;
    tail = &out.fp8.header.next;
  }
  if (p.max_logit != MaxLogitOut::none) {
    out.max_logit = {
        {ATTNCHECK_EXT_MAX_LOGIT, sizeof out.max_logit, nullptr}, static_cast<int32_t>(p.max_logit), nullptr, {}};
    *tail = &out.max_logit.header;
    tail = &out.max_logit.header.next;
  }
  if (p.mla) {
    out.mla = {{ATTNCHECK_EXT_MLA, sizeof out.mla, nullptr}, p.Dqk};
    *tail = &out.mla.header;
    tail = &out.mla.header.next;
  }
  if (p.kv_quantized()) {
    const int32_t granularity = p.kv_scales == KvScales::tensor  ? ATTNCHECK_KV_TENSOR
                                : p.kv_scales == KvScales::head  ? ATTNCHECK_KV_HEAD
                                : p.kv_scales == KvScales::token ? ATTNCHECK_KV_TOKEN
                                                                 : ATTNCHECK_KV_BLOCK;
    out.kv_quant = {{ATTNCHECK_EXT_KV_QUANT, sizeof out.kv_quant, nullptr},
                    abi_dtype(p.kv_dtype),
                    granularity,
                    p.kv_scales == KvScales::block ? p.kv_block : std::max(p.Dqk, p.Dv),
                    abi_dtype(p.kv_scale_dtype),
                    nullptr,
                    nullptr,
                    {},
                    {}};
    *tail = &out.kv_quant.header;
    tail = &out.kv_quant.header.next;
  }
  if (const attncheck_extension* mods = describe_modifications(p, out.mods)) {
    *tail = mods;
    tail = &out.mods.ext.header.next;
  }
  // Set only by a schedule check, and only with knobs the plugin declared.
  if (const Schedule& s = current_schedule(); !s.is_default()) {
    out.schedule = {
        {ATTNCHECK_EXT_SCHEDULE, sizeof out.schedule, nullptr}, s.threads, s.num_splits, s.reversed ? 1 : 0};
    *tail = &out.schedule.header;
    tail = &out.schedule.header.next;
  }
}

namespace {
// Appends e at the end of out's chain. The chain's structs are members of `out` (describe()), so they may be
// written through.
void chain_last(Described& out, const attncheck_extension* e) {
  if (!out.d.next) {
    out.d.next = e;
    return;
  }
  auto* last = const_cast<attncheck_extension*>(out.d.next);
  while (last->next) last = const_cast<attncheck_extension*>(last->next);
  last->next = e;
}
}  // namespace

attncheck_ext_backward& chain_backward(Described& out) {
  std::memset(&out.backward, 0, sizeof out.backward);
  out.backward.header = {ATTNCHECK_EXT_BACKWARD, sizeof out.backward, nullptr};
  chain_last(out, &out.backward.header);
  return out.backward;
}

void set_mla_and_scales(Described& desc, const Problem& p, const void* k_scale,
                        const std::vector<int64_t>& k_scale_strides, const void* v_scale,
                        const std::vector<int64_t>& v_scale_strides) {
  attncheck_problem& d = desc.d;
  if (p.mla) {  // the kernel reads the one latent cache: v is k's first Dv columns, at k's strides
    d.v = d.k;
    for (int i = 0; i < 4; ++i) d.v_strides[i] = d.k_strides[i];
  }
  if (!p.kv_quantized()) return;
  const std::vector<int64_t> ks = kv_scale_shape(p, 1), vs = kv_scale_shape(p, 2);
  desc.kv_quant.k_scale = k_scale, desc.kv_quant.v_scale = v_scale;
  for (size_t i = 0; i < 4; ++i) {  // a dim a scale is shared over has extent 1: stride 0
    desc.kv_quant.k_scale_strides[i] = ks[i] == 1 ? 0 : k_scale_strides[i];
    desc.kv_quant.v_scale_strides[i] = vs[i] == 1 ? 0 : v_scale_strides[i];
  }
}

void chain_block_mask(Described& out, const BlockMask& m) {
  out.block_mask = {{ATTNCHECK_EXT_BLOCK_MASK, sizeof out.block_mask, nullptr},
                    m.q_block,
                    m.kv_block,
                    m.B,
                    m.H,
                    m.q_blocks,
                    m.slots,
                    m.kv_num_blocks.data(),
                    m.kv_indices.data(),
                    m.full_kv_num_blocks.data(),
                    m.full_kv_indices.data()};
  chain_last(out, &out.block_mask.header);
}

void describe_merge(const MergeProblem& p, attncheck_merge_problem& m) {
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  m.name = p.name.c_str();
  m.N = p.N, m.B = p.B, m.H = p.H, m.L = p.L, m.D = p.D;
  m.dtype = abi_dtype(p.dtype);
  m.form = p.conv.form == StateForm::normalised ? ATTNCHECK_STATE_NORMALISED : ATTNCHECK_STATE_UNNORMALISED;
  m.lse_base = p.conv.base == LseBase::e ? ATTNCHECK_LSE_BASE_E : ATTNCHECK_LSE_BASE_2;
  m.empty_lse = p.conv.empty_lse == EmptyLse::neg_inf   ? ATTNCHECK_EMPTY_NEG_INF
                : p.conv.empty_lse == EmptyLse::pos_inf ? ATTNCHECK_EMPTY_POS_INF
                                                        : ATTNCHECK_EMPTY_FINITE;
  m.sentinel = p.conv.sentinel;
  m.empty_out = p.conv.empty_out == EmptyOut::zero ? ATTNCHECK_EMPTY_OUT_ZERO : ATTNCHECK_EMPTY_OUT_UNDEFINED;
  m.stat_layout = p.conv.layout == StatLayout::bhl ? ATTNCHECK_STAT_BHL : ATTNCHECK_STAT_BLH;
}

Support plugin_supports_merge(const OpenedPlugin& o, const MergeProblem& p) {
  if (!o.merge) return Support::no("merge not supported (the plugin does not list \"merge\" in its features)");
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Support::no(std::string("merge of ") + to_string(p.dtype) + " states not supported through the plugin ABI");
  if (p.conv.out_dtype)  // attncheck_merge_problem has no field for it: a plugin would write fp8 bytes it never chose
    return Support::no(std::string("an ") + to_string(*p.conv.out_dtype) +
                       " merged output with a scale is not in the plugin ABI (a worker gets it in the conventions)");
  if (!o.vt->supports_merge) return Support::yes();
  attncheck_merge_problem m;
  describe_merge(p, m);
  MessageBuffer why;
  if (o.vt->supports_merge(&m, why.text, sizeof why.text) == 1) return Support::yes();
  const std::string reason = why.str();
  return Support::no(reason.empty() ? "plugin declined the merge (no reason given)" : reason);
}

std::string call_merge(const OpenedPlugin& o, const attncheck_merge_problem& m) {
  MessageBuffer err;
  const int32_t status = o.vt->merge(&m, err.text, sizeof err.text);
  if (status == ATTNCHECK_STATUS_OK) return "";
  const std::string msg = err.str();
  return "merge returned status " + std::to_string(status) + ": " + (msg.empty() ? "(no message)" : msg);
}

void describe_module(const ModuleProblem& p, DescribedModule& out) {
  describe(p.attn, out.attn);
  attncheck_module_problem& m = out.m;
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  out.name = p.name();
  m.name = out.name.c_str();
  m.attn = &out.attn.d;
  m.d_in = p.d_in, m.d_in2 = p.d_in2, m.d_out = p.d_out;
  m.packing = p.packing == Packing::separate ? ATTNCHECK_PACKING_SEPARATE
              : p.packing == Packing::packed ? ATTNCHECK_PACKING_PACKED
                                             : ATTNCHECK_PACKING_INTERLEAVED;
  m.qkv_bias = p.qkv_bias, m.out_bias = p.out_bias, m.average_weights = p.average_weights;
}

Support plugin_supports_module(const OpenedPlugin& o, const ModuleProblem& p) {
  if (!o.module) return Support::no("module not supported (the plugin does not list \"module\" in its features)");
  if (!o.vt->supports_module) return Support::yes();
  DescribedModule dm;
  describe_module(p, dm);
  MessageBuffer why;
  if (o.vt->supports_module(&dm.m, why.text, sizeof why.text) == 1) return Support::yes();
  const std::string reason = why.str();
  return Support::no(reason.empty() ? "plugin declined the module (no reason given)" : reason);
}

std::string call_module(const OpenedPlugin& o, const attncheck_module_problem& m) {
  MessageBuffer err;
  const int32_t status = o.vt->run_module(&m, err.text, sizeof err.text);
  if (status == ATTNCHECK_STATUS_OK) return "";
  const std::string msg = err.str();
  return "run_module returned status " + std::to_string(status) + ": " + (msg.empty() ? "(no message)" : msg);
}

namespace {

// The module entry of an in-process plugin: the module's tensors handed over in place, as run() does.
class PluginModule final : public ModuleImpl {
 public:
  PluginModule(std::shared_ptr<const Impl> owner, const OpenedPlugin& o) : owner_(std::move(owner)), o_(o) {}
  std::string name() const override { return owner_->name(); }
  Support supports(const ModuleProblem& m) const override { return plugin_supports_module(o_, m); }
  Support supports_backward(const ModuleProblem&) const override {
    return Support::no("module backward not supported through the plugin ABI (run_module is forward only)");
  }
  void run(const ModuleProblem& p, const ModuleInputs& in, ModuleOutputs& out) const override {
    DescribedModule dm;
    describe_module(p, dm);
    attncheck_problem& d = dm.attn.d;
    if (in.mask) d.mask = in.mask->data<uint8_t>(), broadcast_strides(*in.mask, d.mask_shape, d.mask_strides);
    if (in.bias) d.bias = in.bias->bytes.data(), broadcast_strides(*in.bias, d.bias_shape, d.bias_strides);
    if (in.keep) d.keep = in.keep->data<uint8_t>(), copy_strides(*in.keep, d.keep_strides);
    attncheck_module_problem& m = dm.m;
    const auto set = [](const std::optional<Tensor>& t, const void*& ptr, auto& strides) {
      if (t) ptr = t->bytes.data(), copy_strides(*t, strides);
    };
    m.x = in.x.bytes.data(), copy_strides(in.x, m.x_strides);
    set(in.x2, m.x2, m.x2_strides);
    set(in.wq, m.wq, m.wq_strides), set(in.wk, m.wk, m.wk_strides), set(in.wv, m.wv, m.wv_strides);
    set(in.wqkv, m.wqkv, m.wqkv_strides);
    m.wo = in.wo.bytes.data(), copy_strides(in.wo, m.wo_strides);
    set(in.bq, m.bq, m.bq_strides), set(in.bk, m.bk, m.bk_strides), set(in.bv, m.bv, m.bv_strides);
    set(in.bqkv, m.bqkv, m.bqkv_strides), set(in.bo, m.bo, m.bo_strides);
    m.y = out.y.bytes.data(), copy_strides(out.y, m.y_strides);
    if (out.weights) m.weights = out.weights->bytes.data(), copy_strides(*out.weights, m.weights_strides);
    if (const std::string err = call_module(o_, m); !err.empty())
      throw std::runtime_error("plugin " + name() + " (" + o_.path + "): " + err);
  }

 private:
  std::shared_ptr<const Impl> owner_;  // keeps the implementation (and so the library) alive
  OpenedPlugin o_;
};

static_assert(static_cast<int>(Alignment::top_left) == ATTNCHECK_ALIGN_TOP_LEFT &&
              static_cast<int>(Alignment::bottom_right) == ATTNCHECK_ALIGN_BOTTOM_RIGHT &&
              static_cast<int>(Alignment::explicit_) == ATTNCHECK_ALIGN_EXPLICIT);
static_assert(ext_tag::sinks == ATTNCHECK_EXT_SINKS && ext_tag::scores == ATTNCHECK_EXT_SCORES &&
                  ext_tag::kv_append == ATTNCHECK_EXT_KV_APPEND && ext_tag::backward == ATTNCHECK_EXT_BACKWARD &&
                  ext_tag::varlen == ATTNCHECK_EXT_VARLEN && ext_tag::paged_kv == ATTNCHECK_EXT_PAGED_KV &&
                  ext_tag::fp8 == ATTNCHECK_EXT_FP8 && ext_tag::max_logit == ATTNCHECK_EXT_MAX_LOGIT &&
                  ext_tag::modifications == ATTNCHECK_EXT_MODIFICATIONS && ext_tag::mla == ATTNCHECK_EXT_MLA &&
                  ext_tag::kv_quant == ATTNCHECK_EXT_KV_QUANT,
              "the feature table's extension tags are plugin.h's");
static_assert(static_cast<int>(ScoresOut::scaled) == 1 && static_cast<int>(ScoresOut::masked) == 3);
static_assert(static_cast<int>(MaxLogitOut::rows) == 1 && static_cast<int>(MaxLogitOut::heads) == 2);
static_assert(static_cast<int>(FullyMasked::nan) == ATTNCHECK_FULLY_MASKED_NAN &&
              static_cast<int>(FullyMasked::zero) == ATTNCHECK_FULLY_MASKED_ZERO &&
              static_cast<int>(FullyMasked::uniform) == ATTNCHECK_FULLY_MASKED_UNIFORM);

// attncheck_capabilities -> Capabilities; unknown bits mean the plugin was built against something else.
Capabilities convert(const attncheck_capabilities& c, const std::string& path) {
  auto check_bits = [&](const char* field, uint32_t bits, int n_values) {
    if (bits >> n_values)
      throw PluginError(file_error(path, std::string("capabilities.") + field + " = " + std::to_string(bits) +
                                             " has bits beyond the " + std::to_string(n_values) + " known values"));
  };
  check_bits("dtypes", c.dtypes, 4);  // u8 is never a q/k/v dtype
  check_bits("layouts", c.layouts, 2);
  check_bits("alignments", c.alignments, 3);
  check_bits("fully_masked", c.fully_masked, 3);
  Capabilities r;
  r.dtypes.clear();
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (c.dtypes & (1u << abi_dtype(t))) r.dtypes.insert(t);
  r.layouts.clear();
  if (c.layouts & (1u << ATTNCHECK_LAYOUT_BHSD)) r.layouts.insert(Layout::BHSD);
  if (c.layouts & (1u << ATTNCHECK_LAYOUT_BSHD)) r.layouts.insert(Layout::BSHD);
  r.alignments.clear();
  for (Alignment a : {Alignment::top_left, Alignment::bottom_right, Alignment::explicit_})
    if (c.alignments & (1u << static_cast<int>(a))) r.alignments.insert(a);
  r.fully_masked.clear();
  for (FullyMasked f : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform})
    if (c.fully_masked & (1u << static_cast<int>(f))) r.fully_masked.insert(f);
  r.gqa = c.gqa;
  r.cross = c.cross;
  r.dqk_ne_dv = c.dqk_ne_dv;
  r.causal = c.causal;
  r.per_batch_offsets = c.per_batch_offsets;
  r.key_padding = c.key_padding;
  r.bool_mask = c.bool_mask;
  r.bias = c.bias;
  r.window = c.window;
  r.logit.clear();  // ABI 1 carries one logit-stage entry: a plugin is never offered another
  if (c.softcap) r.logit.insert("softcap");
  r.dropout = c.dropout;
  r.finite_fill = c.finite_fill;
  r.weights_out = c.weights_out;
  r.lse_out = c.lse_out;
  if (c.max_head_dim < 0 || c.head_dim_multiple < 1)
    throw PluginError(file_error(path, "capabilities: max_head_dim must be >= 0 and head_dim_multiple >= 1, got " +
                                           std::to_string(c.max_head_dim) + " and " +
                                           std::to_string(c.head_dim_multiple)));
  r.max_head_dim = c.max_head_dim;
  r.head_dim_multiple = c.head_dim_multiple;
  r.notes = c.notes ? c.notes : "";
  if (!r.notes.empty()) r.notes += "; ";
  r.notes += "plugin " + path;
  return r;
}

class PluginImpl final : public Impl, public ModuleProvider, public std::enable_shared_from_this<PluginImpl> {
 public:
  explicit PluginImpl(OpenedPlugin o)
      : path_(o.path),
        vt_(o.vt),
        caps_(o.caps),
        decl_(o.declarations),
        features_(o.features),
        name_(vt_->name),
        description_(vt_->description ? vt_->description : ""),
        opened_(std::move(o)) {}

  std::string name() const override { return name_; }
  std::string description() const override { return description_ + " [plugin " + path_ + "]"; }
  Capabilities capabilities() const override { return caps_; }
  Declarations declarations() const override { return decl_; }

  Support available() const override {
    if (!vt_->available) return Support::yes();
    MessageBuffer why;
    if (vt_->available(why.text, sizeof why.text) == 1) return Support::yes();
    return Support::no(why.str());
  }

  Support supports(const Problem& p) const override {
    if (Support s = check_capabilities(caps_, p); !s.ok) return s;
    if (Support s = declared_extensions(p, features_, "plugin"); !s.ok) return s;
    if (!vt_->supports) return Support::yes();
    Described desc;
    describe(p, desc);
    MessageBuffer why;
    if (vt_->supports(&desc.d, why.text, sizeof why.text) == 1) return Support::yes();
    std::string reason = why.str();
    return Support::no(reason.empty() ? "plugin declined the case (no reason given)" : reason);
  }

  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Described desc;
    describe(p, desc);
    if (const BlockMask* m = current_block_mask(); m && lists(kBlockMaskFeature)) chain_block_mask(desc, *m);
    attncheck_problem& d = desc.d;
    set_inputs(d, in);
    if (in.k_scale && in.v_scale)
      set_mla_and_scales(desc, p, in.k_scale->bytes.data(), in.k_scale->strides, in.v_scale->bytes.data(),
                         in.v_scale->strides);
    else
      set_mla_and_scales(desc, p, nullptr, {}, nullptr, {});
    d.out = out.out.bytes.data();
    copy_strides(out.out, d.out_strides);
    if (out.lse) {
      d.lse = out.lse->bytes.data();
      copy_strides(*out.lse, d.lse_strides);
    }
    if (out.weights) {
      d.weights = out.weights->bytes.data();
      copy_strides(*out.weights, d.weights_strides);
    }
    if (out.scores) {
      desc.scores.scores = out.scores->bytes.data();
      copy_strides(*out.scores, desc.scores.strides);
    }
    if (out.max_logit) {
      desc.max_logit.max_logit = out.max_logit->bytes.data();  // rank 3 (rows) or 1 (heads)
      for (size_t d = 0; d < out.max_logit->strides.size(); ++d) desc.max_logit.strides[d] = out.max_logit->strides[d];
    }
    if (p.past_len > 0) {
      attncheck_ext_kv_append& a = desc.kv_append;
      a.past_k = in.past_k->bytes.data();
      copy_strides(*in.past_k, a.past_k_strides);
      a.past_v = in.past_v->bytes.data();
      copy_strides(*in.past_v, a.past_v_strides);
      a.present_k = out.present_k->bytes.data();
      copy_strides(*out.present_k, a.present_k_strides);
      a.present_v = out.present_v->bytes.data();
      copy_strides(*out.present_v, a.present_v_strides);
    }
    call_run(d, "run");
  }

  // Backward through the extension chain (plugin.h tag 5), offered only to a plugin that lists "backward".
  Support supports_backward(const Problem& p) const override {
    if (std::find(features_.begin(), features_.end(), kBackwardFeature) == features_.end())
      return Support::no("backward pass not supported (the plugin does not list \"backward\" in its features)");
    if (p.past_len > 0)
      return Support::no("backward of a KV-cache append (past_len > 0) not supported through the ABI");
    if (p.mla)  // the ABI's dk and dv are two buffers; nothing says they are one latent cache's gradient
      return Support::no("backward of absorbed MLA not supported through the ABI");
    if (Support s = check_capabilities(caps_, p); !s.ok) return s;
    if (Support s = declared_extensions(p, features_, "plugin"); !s.ok) return s;
    if (!vt_->supports) return Support::yes();
    Described desc;
    describe(p, desc);
    chain_backward(desc);
    MessageBuffer why;
    if (vt_->supports(&desc.d, why.text, sizeof why.text) == 1) return Support::yes();
    std::string reason = why.str();
    return Support::no(reason.empty() ? "plugin declined the backward of the case (no reason given)" : reason);
  }

  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    Described desc;
    describe(p, desc);
    set_inputs(desc.d, in);
    attncheck_ext_backward& b = chain_backward(desc);
    b.out = fwd.out.bytes.data(), copy_strides(fwd.out, b.out_strides);
    if (fwd.lse) b.lse = fwd.lse->bytes.data(), copy_strides(*fwd.lse, b.lse_strides);
    b.dout = dout.bytes.data(), copy_strides(dout, b.dout_strides);
    b.dq = g.dq.bytes.data(), copy_strides(g.dq, b.dq_strides);
    b.dk = g.dk.bytes.data(), copy_strides(g.dk, b.dk_strides);
    b.dv = g.dv.bytes.data(), copy_strides(g.dv, b.dv_strides);
    if (g.dbias) {  // indexed by (b, h, i, j) like the bias: stride 0 along broadcast dims, so the plugin sums there
      int64_t shape[4];
      b.dbias = g.dbias->bytes.data();
      broadcast_strides(*g.dbias, shape, b.dbias_strides);
    }
    call_run(desc.d, "run (backward)");
  }

  // Modules through the vtable's run_module, for a plugin that lists "module".
  ModuleImplPtr module_entry() const override {
    if (!opened_.module) return nullptr;
    return std::make_shared<PluginModule>(shared_from_this(), opened_);
  }

  // Merges through the vtable's merge, for a plugin that lists "merge".
  Support supports_merge(const MergeProblem& p) const override { return plugin_supports_merge(opened_, p); }
  void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const override {
    attncheck_merge_problem m;
    describe_merge(p, m);
    m.o_in = in.o.bytes.data(), copy_strides(in.o, m.o_in_strides);
    m.o_out = out.o.bytes.data(), copy_strides(out.o, m.o_out_strides);
    const auto stat = [](const std::optional<Tensor>& t, auto*& ptr, auto& strides) {
      if (!t) return;
      ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(const_cast<unsigned char*>(t->bytes.data()));
      copy_strides(*t, strides);
    };
    stat(in.lse, m.lse_in, m.lse_in_strides), stat(in.max, m.max_in, m.max_in_strides);
    stat(in.sum, m.sum_in, m.sum_in_strides);
    stat(out.lse, m.lse_out, m.lse_out_strides), stat(out.max, m.max_out, m.max_out_strides);
    stat(out.sum, m.sum_out, m.sum_out_strides);
    if (const std::string err = call_merge(opened_, m); !err.empty())
      throw std::runtime_error("plugin " + name_ + " (" + path_ + "): " + err);
  }

 private:
  static void set_inputs(attncheck_problem& d, const Inputs& in) {
    d.q = in.q.bytes.data();
    copy_strides(in.q, d.q_strides);
    d.k = in.k.bytes.data();
    copy_strides(in.k, d.k_strides);
    d.v = in.v.bytes.data();
    copy_strides(in.v, d.v_strides);
    if (in.mask) {
      d.mask = in.mask->data<uint8_t>();
      broadcast_strides(*in.mask, d.mask_shape, d.mask_strides);
    }
    if (in.bias) {
      d.bias = in.bias->bytes.data();
      broadcast_strides(*in.bias, d.bias_shape, d.bias_strides);
    }
    if (in.keep) {
      d.keep = in.keep->data<uint8_t>();
      copy_strides(*in.keep, d.keep_strides);
    }
  }

  void call_run(const attncheck_problem& d, const char* what) const {
    MessageBuffer err;
    const int32_t status = vt_->run(&d, err.text, sizeof err.text);
    if (status != ATTNCHECK_STATUS_OK) {
      std::string msg = err.str();
      throw std::runtime_error("plugin " + name_ + " (" + path_ + "): " + what + " returned status " +
                               std::to_string(status) + ": " + (msg.empty() ? "(no message)" : msg));
    }
  }

  bool lists(const char* feature) const {
    return std::find(features_.begin(), features_.end(), feature) != features_.end();
  }

  std::string path_;
  const attncheck_plugin* vt_;
  Capabilities caps_;
  Declarations decl_;
  std::vector<std::string> features_;
  std::string name_, description_;
  OpenedPlugin opened_;
};

// The v2 declarations() of a plugin, over the defaults its capabilities imply.
Declarations read_declarations(const attncheck_plugin* vt, const Capabilities& caps, const std::string& path) {
  Declarations decl = default_declarations(caps);
  if (!vt->declarations) return decl;
  attncheck_declarations d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.fully_masked_policy = -1;
  MessageBuffer err;
  if (vt->declarations(&d, err.text, sizeof err.text) != ATTNCHECK_STATUS_OK)
    throw PluginError(file_error(path, "declarations() failed: " + err.str()));
  if (d.fully_masked_policy < -1 || d.fully_masked_policy > ATTNCHECK_FULLY_MASKED_UNIFORM)
    throw PluginError(file_error(path, "declarations.fully_masked_policy = " + std::to_string(d.fully_masked_policy) +
                                           " (expected -1 or an attncheck_fully_masked value)"));
  if (d.fully_masked_policy >= 0) decl.fully_masked_policy = static_cast<FullyMasked>(d.fully_masked_policy);
  decl.deterministic = d.deterministic == 1;
  decl.batch_invariant = d.batch_invariant == 1;  // 0 from a plugin built before the field (zero-filled)
  if (d.masked_inputs < 0 || d.masked_inputs > 1)
    throw PluginError(file_error(path, "declarations.masked_inputs = " + std::to_string(d.masked_inputs) +
                                           " (expected 0 = isolated or 1 = finite-required)"));
  decl.masked_inputs = static_cast<MaskedInputs>(d.masked_inputs);
  // Schedule knobs and layout invariance (appended with tag 9: 0 from a plugin built before them).
  if ((d.schedule_knobs & ~kAllKnobs) || (d.schedule_bitwise & ~d.schedule_knobs))
    throw PluginError(file_error(path, "declarations.schedule_knobs = " + std::to_string(d.schedule_knobs) +
                                           ", schedule_bitwise = " + std::to_string(d.schedule_bitwise) +
                                           " (expected bits of 1 threads, 2 num_splits, 4 block order; bitwise a "
                                           "subset of knobs)"));
  decl.schedule_knobs = d.schedule_knobs, decl.schedule_bitwise = d.schedule_bitwise;
  decl.layout_invariant = d.layout_invariant == 1;
  if (d.outputs >> 3)
    throw PluginError(file_error(path, "declarations.outputs = " + std::to_string(d.outputs) + " has unknown bits"));
  if (d.outputs) {
    decl.outputs.clear();
    const char* names[] = {"out", "lse", "weights"};
    for (int b = 0; b < 3; ++b)
      if (d.outputs & (1u << b)) decl.outputs.push_back(names[b]);
  }
  // The contracts: contract[] for f64..bf16, contract_fp8[] for e4m3 and e5m2 (appended with tag 8: NULL from a
  // plugin built before it, as the host zero-fills the struct).
  const std::pair<DType, const char*> contracts[] = {{DType::f64, d.contract[ATTNCHECK_DTYPE_F64]},
                                                     {DType::f32, d.contract[ATTNCHECK_DTYPE_F32]},
                                                     {DType::f16, d.contract[ATTNCHECK_DTYPE_F16]},
                                                     {DType::bf16, d.contract[ATTNCHECK_DTYPE_BF16]},
                                                     {DType::e4m3, d.contract_fp8[0]},
                                                     {DType::e5m2, d.contract_fp8[1]}};
  for (const auto& [t, c] : contracts) {
    if (!c) continue;
    try {
      PrecisionContract pc = contract_from_string(c, t);
      validate_contract(pc, t);
      decl.contracts[t] = pc;
    } catch (const std::exception& e) {
      throw PluginError(file_error(path, std::string("declarations.") + (is_fp8(t) ? "contract_fp8[" : "contract[") +
                                             to_string(t) + "] = '" + c + "': " + e.what()));
    }
  }
  return decl;
}

}  // namespace

OpenedPlugin open_plugin(const std::string& path) {
  // RTLD_NOW: an unresolved symbol in the plugin is reported here, with its name, not in the middle of a run.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    throw PluginError(file_error(path, std::string("cannot load: ") + (e ? e : "dlopen failed")));
  }
  dlerror();
  void* sym = dlsym(handle, ATTNCHECK_PLUGIN_ENTRY_SYMBOL);
  if (!sym) {
    // Copy dlerror()'s text before dlclose: glibc frees that buffer on the next dl* call.
    const char* e = dlerror();
    const std::string why = e ? e : "dlsym returned NULL";
    dlclose(handle);
    throw PluginError(file_error(path, std::string("no entry point '") + ATTNCHECK_PLUGIN_ENTRY_SYMBOL +
                                           "' (is it exported with extern \"C\" and default visibility?): " + why));
  }
  attncheck_plugin_entry_fn entry;
  static_assert(sizeof entry == sizeof sym);
  std::memcpy(&entry, &sym, sizeof entry);  // object pointer -> function pointer, as POSIX dlsym requires
  const attncheck_plugin* vt = entry();
  // The library stays loaded from here on (see plugin_loader.hpp), also on the error paths below: a plugin's
  // static destructors running at dlclose could touch state we never set up.
  if (!vt) throw PluginError(file_error(path, std::string(ATTNCHECK_PLUGIN_ENTRY_SYMBOL) + "() returned NULL"));
  if (vt->abi_version < 1 || vt->abi_version > ATTNCHECK_PLUGIN_ABI_VERSION)
    throw PluginError(file_error(
        path, "ABI version mismatch: the plugin was built for attncheck plugin ABI " + std::to_string(vt->abi_version) +
                  ", this attncheck supports ABI 1 up to ABI " + std::to_string(ATTNCHECK_PLUGIN_ABI_VERSION) +
                  " (rebuild the plugin against this attncheck/plugin.h)"));
  // v2 fields exist only in a v2 vtable; a v1 plugin's vtable ends at `run`.
  const bool v2 = vt->abi_version >= 2;
  if (v2 && vt->struct_size < offsetof(attncheck_plugin, declarations) + sizeof vt->declarations)
    throw PluginError(file_error(path, "vtable field 'struct_size' = " + std::to_string(vt->struct_size) +
                                           " is smaller than the ABI 2 vtable (" +
                                           std::to_string(sizeof(attncheck_plugin)) + " bytes)"));
  if (!vt->name || !*vt->name) throw PluginError(file_error(path, "vtable field 'name' is NULL or empty"));
  if (!vt->capabilities) throw PluginError(file_error(path, "vtable field 'capabilities' is NULL"));
  if (!vt->run) throw PluginError(file_error(path, "vtable field 'run' is NULL"));
  attncheck_capabilities c;
  std::memset(&c, 0, sizeof c);
  MessageBuffer err;
  if (vt->capabilities(&c, err.text, sizeof err.text) != ATTNCHECK_STATUS_OK)
    throw PluginError(file_error(path, "capabilities() failed: " + err.str()));
  OpenedPlugin o{path, vt, convert(c, path), {}, {}};
  o.declarations = v2 ? read_declarations(vt, o.caps, path) : default_declarations(o.caps);
  if (v2 && vt->features)
    for (const char* const* f = vt->features; *f; ++f) o.features.emplace_back(*f);
  declare_extension_features(o.caps, o.features);  // a v1 plugin declares none: never offered a newer feature
  o.declarations.backward = std::find(o.features.begin(), o.features.end(), kBackwardFeature) != o.features.end();
  if (std::find(o.features.begin(), o.features.end(), kMergeFeature) != o.features.end()) {
    if (vt->struct_size < offsetof(attncheck_plugin, merge) + sizeof vt->merge)
      throw PluginError(file_error(
          path, "lists the feature \"merge\" but its vtable (struct_size = " + std::to_string(vt->struct_size) +
                    ") ends before the field 'merge' (" +
                    std::to_string(offsetof(attncheck_plugin, merge) + sizeof vt->merge) + " bytes needed)"));
    if (!vt->merge) throw PluginError(file_error(path, "lists the feature \"merge\" but vtable field 'merge' is NULL"));
    o.merge = true;
  }
  if (std::find(o.features.begin(), o.features.end(), kModuleFeature) != o.features.end()) {
    const size_t needed = offsetof(attncheck_plugin, run_module) + sizeof vt->run_module;
    if (vt->struct_size < needed)
      throw PluginError(file_error(
          path, "lists the feature \"module\" but its vtable (struct_size = " + std::to_string(vt->struct_size) +
                    ") ends before the field 'run_module' (" + std::to_string(needed) + " bytes needed)"));
    if (!vt->run_module)
      throw PluginError(file_error(path, "lists the feature \"module\" but vtable field 'run_module' is NULL"));
    o.module = true;
  }
  return o;
}

ImplPtr load_plugin(const std::string& path) { return std::make_shared<PluginImpl>(open_plugin(path)); }

}  // namespace attncheck
