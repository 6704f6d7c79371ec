// Serving inputs in both CUDA kernels on the host emulation: quantized KV caches (int8, fp8 e4m3/e5m2 codes with
// per-tensor, per-(batch, KV head), per-token and per-block scales) give the bits of the float cache of their
// products, built here by hand from the codes and scales; absorbed MLA reads V from the latent cache k, never from
// Inputs::v. Each case is judged against the reference in both thread orders. Small shapes that cross a key tile.
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "emulated.hpp"

using namespace attncheck;
using attncheck::cuda::KernelVersion;

namespace {

const KernelVersion kKernels[] = {KernelVersion::naive, KernelVersion::flash};
const char* kernel_name(KernelVersion v) { return v == KernelVersion::naive ? "k1" : "k2"; }

Problem kv_problem(DType q, DType codes, KvScales g, DType scale_dtype) {
  Problem p;
  p.dtype = q, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 37, p.Dqk = 64, p.Dv = 32, p.want_lse = true;
  p.kv_scales = g, p.kv_dtype = codes, p.kv_scale_dtype = scale_dtype, p.kv_block = g == KvScales::block ? 16 : 32;
  return p;
}

// The scale of element (b, h, j, d), indexed by hand from the granularity's definition.
double scale_of(const Problem& p, const Tensor& s, int64_t b, int64_t h, int64_t j, int64_t d) {
  const bool whole = p.kv_scales == KvScales::tensor,
             per_token = p.kv_scales == KvScales::token || p.kv_scales == KvScales::block;
  const int64_t g[4] = {whole ? 0 : b, whole ? 0 : h, per_token ? j : 0,
                        p.kv_scales == KvScales::block ? d / p.kv_block : 0};
  return s.get(g);
}

// The float cache (dtype `to`) holding code * scale of every element, q copied: what the kernels must read.
std::pair<Problem, Inputs> float_cache(const Problem& p, const Inputs& in, DType to) {
  Problem f = p;
  f.kv_scales = KvScales::none, f.kv_dtype = DType::i8, f.kv_block = 32, f.kv_scale_dtype = DType::f32, f.dtype = to;
  Inputs x{make_qkv(f, 0), make_qkv(f, 1), make_qkv(f, 2), {}, {}, {}, {}, {}};
  for (int64_t n = 0; n < in.q.numel(); ++n) x.q.set_offset(n, in.q.get_offset(n));
  for (int which : {1, 2}) {
    const Tensor& codes = which == 1 ? in.k : in.v;
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    Tensor& t = which == 1 ? x.k : x.v;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < t.shape[3]; ++d) t.put(b, h, j, d, codes.at(b, h, j, d) * scale_of(p, s, b, h, j, d));
  }
  return {f, x};
}

// Both thread orders (bit for bit the same), the forward run's outputs returned.
Outputs run_both_orders(const Problem& p, const Inputs& in, KernelVersion v) {
  Outputs out = make_outputs(p), reversed = make_outputs(p);
  for (Outputs* o : {&out, &reversed}) {
    o->out.fill(std::nan(""));
    if (o->lse) o->lse->fill(std::nan(""));
  }
  cuda::run_emulated(p, in, out, v, emu::Order::forward);
  cuda::run_emulated(p, in, reversed, v, emu::Order::reversed);
  EXPECT_EQ(out.out.bytes, reversed.out.bytes) << kernel_name(v) << " " << p.name() << ": out depends on thread order";
  return out;
}

void expect_passes(const Problem& p, const Inputs& in, const Outputs& out, const std::string& what) {
  const Verdict v = judge(p, expected_attention(p, in), out);
  EXPECT_TRUE(v.pass) << what << " " << p.name() << ": " << v.worst().describe();
}

// Every code format and granularity, fp32 queries, fp16 scales (every scale * code exact in fp32): the quantized
// cache gives the bits of the fp32 cache of its products, in both kernels, and passes against the reference. A
// kernel that reads one group's scale for another (another batch, head, token or head-dim block) or ignores them
// gives other products, so other bits.
TEST(CudaKvQuant, EqualsTheFloatCacheOfItsProductsBitwise) {
  for (DType c : {DType::i8, DType::e4m3, DType::e5m2})
    for (KvScales g : {KvScales::tensor, KvScales::head, KvScales::token, KvScales::block}) {
      Problem p = kv_problem(DType::f32, c, g, DType::f16);
      p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {37, 20};
      ASSERT_TRUE(cuda::kernel_supports(p).ok) << cuda::kernel_supports(p).reason;
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 21);
      const auto [fp, fin] = float_cache(p, in, DType::f32);
      for (KernelVersion v : kKernels) {
        const Outputs q = run_both_orders(p, in, v), f = run_both_orders(fp, fin, v);
        EXPECT_EQ(q.out.bytes, f.out.bytes) << kernel_name(v) << " " << p.name();
        EXPECT_EQ(q.lse->bytes, f.lse->bytes) << kernel_name(v) << " " << p.name();
        expect_passes(p, in, q, kernel_name(v));
      }
    }
}

// Other query dtypes, scale formats and layouts, decode, and fp64 (where the products are exact in the accumulation
// type, so the fp64 float cache gives the same bits too).
TEST(CudaKvQuant, OtherDtypesLayoutsAndDecodePassAgainstTheReference) {
  struct Case {
    DType q, codes;
    KvScales g;
    DType scale;
    Layout layout;
    int64_t Lq;
  };
  const Case cases[] = {
      {DType::bf16, DType::e4m3, KvScales::head, DType::f32, Layout::BSHD, 5},
      {DType::f16, DType::i8, KvScales::block, DType::f16, Layout::BHSD, 1},
      {DType::bf16, DType::e5m2, KvScales::block, DType::bf16, Layout::BSHD, 1},
      {DType::f64, DType::e4m3, KvScales::token, DType::f32, Layout::BHSD, 5},
  };
  for (const Case& k : cases) {
    Problem p = kv_problem(k.q, k.codes, k.g, k.scale);
    p.layout = k.layout, p.Lq = k.Lq;
    ASSERT_TRUE(cuda::kernel_supports(p).ok) << cuda::kernel_supports(p).reason;
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 22);
    for (KernelVersion v : kKernels) {
      const Outputs q = run_both_orders(p, in, v);
      expect_passes(p, in, q, kernel_name(v));
      if (k.q == DType::f64) {
        const auto [fp, fin] = float_cache(p, in, DType::f64);
        EXPECT_EQ(q.out.bytes, run_both_orders(fp, fin, v).out.bytes) << kernel_name(v) << " " << p.name();
      }
    }
  }
}

TEST(CudaKvQuant, Declared) {
  const ImplPtr impl = find_impl("cuda-emulated");
  ASSERT_TRUE(impl);
  EXPECT_TRUE(impl->capabilities().kv_quant);
  EXPECT_TRUE(impl->supports(kv_problem(DType::f32, DType::e5m2, KvScales::block, DType::bf16)).ok);
}

// Absorbed MLA: v is the first Dv columns of the latent cache k. Inputs::v (the harness's copy of those columns) is
// poisoned here: the kernels read the view, so the outputs keep their bits and pass; the same poisoned inputs read as
// a plain problem give NaN, so the poison would show.
Problem mla_problem(DType t) {
  Problem p;
  p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 1, p.Lq = 7, p.Lk = 45, p.Dqk = 24, p.Dv = 16, p.want_lse = true;
  p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {45, 30};
  p.mla = true, p.scale = 1.0 / std::sqrt(12.0);  // a 4 + 8 head before absorption
  return p;
}

TEST(CudaMla, ReadsValuesFromTheLatentCacheAndPasses) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Problem p = mla_problem(t);
    ASSERT_TRUE(cuda::kernel_supports(p).ok) << cuda::kernel_supports(p).reason;
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 23);
    Inputs poisoned = in;
    poisoned.v.fill(std::nan(""));
    for (KernelVersion v : kKernels) {
      const Outputs out = run_both_orders(p, in, v);
      expect_passes(p, in, out, kernel_name(v));
      EXPECT_EQ(run_both_orders(p, poisoned, v).out.bytes, out.out.bytes) << kernel_name(v) << " read Inputs::v";
      Problem plain = p;
      plain.mla = false;
      const Outputs read_v = run_both_orders(plain, poisoned, v);
      EXPECT_TRUE(std::isnan(read_v.out.get_offset(0))) << kernel_name(v) << ": the poison would not show";
    }
  }
}

// DeepSeek-V3's absorbed decode: 576-column latent heads (512 + 64), V its first 512, scale 1/sqrt(192), one and two
// query tokens (multi-token prediction), 16 query heads: kernel 2's widest tile (8 keys, 18 accumulators per lane).
TEST(CudaMla, DeepSeekDecodeDims) {
  for (int64_t lq : {1, 2}) {
    Problem p;
    p.dtype = DType::bf16, p.B = 2, p.Hq = 16, p.Hkv = 1, p.Lq = lq, p.Lk = 37, p.Dqk = 576, p.Dv = 512;
    p.want_lse = true, p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {37, 21};
    p.mla = true, p.scale = 1.0 / std::sqrt(192.0);
    ASSERT_TRUE(cuda::kernel_supports(p).ok) << cuda::kernel_supports(p).reason;
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 24);
    for (KernelVersion v : kKernels) expect_passes(p, in, run_both_orders(p, in, v), kernel_name(v));
  }
  Problem wide;
  wide.Dqk = wide.Dv = 577;
  EXPECT_NE(cuda::kernel_supports(wide).reason.find("head dim 577 > 576"), std::string::npos)
      << cuda::kernel_supports(wide).reason;
  wide.Dqk = wide.Dv = 264, wide.want_lse = true;
  EXPECT_NE(find_impl("cuda-emulated")->supports_backward(wide).reason.find("head dim 264 > 256"), std::string::npos)
      << find_impl("cuda-emulated")->supports_backward(wide).reason;
}

}  // namespace
