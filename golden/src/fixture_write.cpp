// Writing fixtures (golden/SCHEMA.md): attributes for every Problem field, provenance and tolerance on the root
// group, /inputs exactly as an implementation receives them, /expected in double. Built in memory, written with
// write_file_durably.
#include <cstdio>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"
#include "fixture_attrs.hpp"
#include "fixture_block_mask.hpp"
#include "fixture_grad.hpp"
#include "fixture_layout.hpp"
#include "h5.hpp"

#ifndef ATTNCHECK_VERSION
#define ATTNCHECK_VERSION "unknown"
#endif

namespace attncheck {

using fixture_detail::stored_dims;
using fixture_detail::to_layout;
using fixture_detail::write_problem_attrs;

const char* attncheck_version() { return ATTNCHECK_VERSION; }

std::string fixture_file_name(const std::string& case_name) {
  std::string s = case_name;
  for (char& c : s)
    if (c == '/' || c == ' ' || c == '\\' || c == ':') c = '_';
  return s + ".h5";
}

Fixture make_fixture(std::string name, const Problem& p, Inputs in, Provenance prov, ToleranceModel tol) {
  Fixture f;
  f.name = std::move(name);
  f.problem = p;
  f.expected = expected_attention(p, in);
  f.inputs = std::move(in);
  f.provenance = std::move(prov);
  f.tolerance = tol;
  return f;
}

namespace {

// A q/k/v tensor laid out densely in the layout's storage order (the way make_qkv allocates it).
Tensor canonical(const Tensor& t, Layout l) {
  Tensor c(t.dtype, t.shape, storage_order(l));
  if (c.strides == t.strides) return t;
  const std::vector<double> v = t.to_double();
  int64_t idx[4] = {0, 0, 0, 0};
  for (size_t n = 0; n < v.size(); ++n) {
    c.set(idx, v[n]);
    for (int d = 3; d >= 0; --d) {
      if (++idx[d] < c.shape[static_cast<size_t>(d)]) break;
      idx[d] = 0;
    }
  }
  return c;
}

std::string fixture_bytes(const std::string& path, const Fixture& f) {
  const Problem& p = f.problem;
  const Inputs& in = f.inputs;
  const ExpectedAttention& r = f.expected;
  h5::MemoryFile mem(path);
  const hid_t file = mem.id();
  h5::Id root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);

  // Provenance first: a reader checks schema_version before anything else.
  h5::write_attr(root, "schema_version", f.provenance.schema_version);
  h5::write_attr(root, "name", f.name);
  h5::write_attr(root, "problem_name", p.short_name());
  fixture_detail::write_provenance(root, f.provenance);
  write_problem_attrs(root, p);
  h5::write_attr(root, "tolerance_model", std::string("attncheck derived forward-error bound (docs/tolerance.md)"));
  h5::write_attr(root, "tolerance_lambda", f.tolerance.lambda);
  h5::write_attr(root, "tolerance_rel_floor", f.tolerance.rel_floor);
  if (f.tolerance.exact_out) h5::write_attr(root, "exact_out", int64_t{1});  // absent: judged by the bound
  fixture_detail::write_gradients_attr(root, f);

  const char* qdims = p.layout == Layout::BHSD ? "B,Hq,Lq,Dqk" : "B,Lq,Hq,Dqk";
  const bool paged = p.page_size > 0;                     // k, v are the page pools
  const bool q4 = p.kv_quantized() && is_q4(p.kv_dtype);  // bytes of two 4-bit codes
  const char* kdims = paged ? (p.layout == Layout::BHSD ? "page,Hkv,page_size,Dqk" : "page,page_size,Hkv,Dqk")
                      : q4  ? (p.layout == Layout::BHSD ? "B,Hkv,Lk,Dqk/2" : "B,Lk,Hkv,Dqk/2")
                            : (p.layout == Layout::BHSD ? "B,Hkv,Lk,Dqk" : "B,Lk,Hkv,Dqk");
  const char* vdims = paged ? (p.layout == Layout::BHSD ? "page,Hkv,page_size,Dv" : "page,page_size,Hkv,Dv")
                      : q4  ? (p.layout == Layout::BHSD ? "B,Hkv,Lk,Dv/2" : "B,Lk,Hkv,Dv/2")
                            : (p.layout == Layout::BHSD ? "B,Hkv,Lk,Dv" : "B,Lk,Hkv,Dv");
  const char* odims = p.layout == Layout::BHSD ? "B,Hq,Lq,Dv" : "B,Lq,Hq,Dv";
  {
    h5::Id g = h5::create_group(file, "inputs");
    h5::write_tensor(g, "q", canonical(in.q, p.layout), stored_dims(in.q.shape, p.layout), qdims);
    h5::write_tensor(g, "k", canonical(in.k, p.layout), stored_dims(in.k.shape, p.layout), kdims);
    if (!p.mla)  // absorbed MLA: v is k's first Dv columns (mla.hpp), stored once as k
      h5::write_tensor(g, "v", canonical(in.v, p.layout), stored_dims(in.v.shape, p.layout), vdims);
    if (in.mask)
      h5::write_tensor(g, "mask", canonical(*in.mask, Layout::BHSD), in.mask->shape, "B,Hq,Lq,Lk (broadcast)");
    if (in.bias)
      h5::write_tensor(g, "bias", canonical(*in.bias, Layout::BHSD), in.bias->shape, "B,Hq,Lq,Lk (broadcast)");
    if (in.keep) h5::write_tensor(g, "keep", canonical(*in.keep, Layout::BHSD), in.keep->shape, "B,Hq,Lq,Lk");
    if (in.past_k) {  // KV-cache append: k and v above hold the new tokens only
      h5::write_tensor(g, "past_key", canonical(*in.past_k, p.layout), stored_dims(in.past_k->shape, p.layout), kdims);
      h5::write_tensor(g, "past_value", canonical(*in.past_v, p.layout), stored_dims(in.past_v->shape, p.layout),
                       vdims);
    }
    if (in.k_scale) {  // quantized KV cache: k and v above hold the codes
      write_tensor(g, "k_scale", canonical(*in.k_scale, Layout::BHSD), in.k_scale->shape,
                   "B|1,Hkv|1,Lk|1,Dqk/kv_block|1");
      write_tensor(g, "v_scale", canonical(*in.v_scale, Layout::BHSD), in.v_scale->shape,
                   "B|1,Hkv|1,Lk|1,Dv/kv_block|1");
    }
    if (in.k_min) {  // q4_1: the blocks' m
      write_tensor(g, "k_min", canonical(*in.k_min, Layout::BHSD), in.k_min->shape, "B,Hkv,Lk,Dqk/32");
      write_tensor(g, "v_min", canonical(*in.v_min, Layout::BHSD), in.v_min->shape, "B,Hkv,Lk,Dv/32");
    }
    fixture_detail::write_problem_datasets(g, p);
    fixture_detail::write_gradient_inputs(g, f);
  }
  {
    h5::Id g = h5::create_group(file, "expected");
    const std::vector<int64_t> out_dims = stored_dims({p.B, p.Hq, p.Lq, p.Dv}, p.layout);
    h5::write_doubles(g, "out", to_layout(r.out, p.B, p.Hq, p.Lq, p.Dv, p.layout), out_dims, odims);
    h5::write_doubles(g, "lse", r.lse, {p.B, p.Hq, p.Lq}, "B,Hq,Lq");
    if (p.want_weights) h5::write_doubles(g, "weights", r.weights, {p.B, p.Hq, p.Lq, p.Lk}, "B,Hq,Lq,Lk");
    if (p.scores_out != ScoresOut::none)
      h5::write_doubles(g, "scores", r.scores, {p.B, p.Hq, p.Lq, p.Lk}, "B,Hq,Lq,Lk");
    // Rows in either form: a heads candidate is judged against their maximum over b and i.
    if (p.max_logit != MaxLogitOut::none) h5::write_doubles(g, "max_logit", r.max_logit, {p.B, p.Hq, p.Lq}, "B,Hq,Lq");
    if (p.past_len > 0) {
      h5::write_doubles(g, "present_key", to_layout(r.present_k, p.B, p.Hkv, p.Lk, p.Dqk, p.layout),
                        stored_dims({p.B, p.Hkv, p.Lk, p.Dqk}, p.layout), kdims);
      h5::write_doubles(g, "present_value", to_layout(r.present_v, p.B, p.Hkv, p.Lk, p.Dv, p.layout),
                        stored_dims({p.B, p.Hkv, p.Lk, p.Dv}, p.layout), vdims);
    }
    h5::write_doubles(g, "score_mag", r.score_mag, {p.B, p.Hq, p.Lq}, "B,Hq,Lq");
    h5::write_doubles(g, "out_abs", to_layout(r.out_abs, p.B, p.Hq, p.Lq, p.Dv, p.layout), out_dims, odims);
    fixture_detail::write_gradient_expected(g, f);
    fixture_detail::write_block_mask(root, g, f);
  }
  root.reset();
  return mem.close();
}

}  // namespace

std::string fixture_image(const std::string& path, const Fixture& f) {
  validate(f.problem, f.inputs);
  const Problem& p = f.problem;
  const size_t rows = static_cast<size_t>(p.B * p.Hq * p.Lq);
  if (f.expected.out.size() != rows * static_cast<size_t>(p.Dv) || f.expected.lse.size() != rows ||
      f.expected.score_mag.size() != rows || f.expected.out_abs.size() != f.expected.out.size() ||
      (p.want_weights && f.expected.weights.size() != rows * static_cast<size_t>(p.Lk)) ||
      (p.scores_out != ScoresOut::none && f.expected.scores.size() != rows * static_cast<size_t>(p.Lk)) ||
      (p.max_logit != MaxLogitOut::none && f.expected.max_logit.size() != rows) ||
      (p.past_len > 0 && f.expected.present_k.size() != static_cast<size_t>(p.B * p.Hkv * p.Lk * p.Dqk)))
    throw std::invalid_argument(path + ": expected: sizes do not match the problem " + p.name() +
                                " (use make_fixture to compute them)");
  h5::QuietErrors quiet;
  return fixture_bytes(path, f);
}

void write_fixture(const std::string& path, const Fixture& f) { write_file_durably(path, fixture_image(path, f)); }

void write_candidate(const std::string& path, const Problem& p, const Outputs& out) {
  std::string bytes;
  {
    h5::QuietErrors quiet;
    h5::MemoryFile mem(path);
    h5::Id g = h5::create_group(mem.id(), "actual");
    h5::write_tensor(g, "out", canonical(out.out, p.layout), stored_dims(out.out.shape, p.layout),
                     p.layout == Layout::BHSD ? "B,Hq,Lq,Dv" : "B,Lq,Hq,Dv");
    if (out.lse) h5::write_tensor(g, "lse", *out.lse, out.lse->shape, "B,Hq,Lq");
    if (out.max_logit)
      h5::write_tensor(g, "max_logit", *out.max_logit, out.max_logit->shape,
                       p.max_logit == MaxLogitOut::heads ? "Hq" : "B,Hq,Lq");
    if (out.weights)
      h5::write_tensor(g, "weights", canonical(*out.weights, Layout::BHSD), out.weights->shape, "B,Hq,Lq,Lk");
    if (out.scores)
      h5::write_tensor(g, "scores", canonical(*out.scores, Layout::BHSD), out.scores->shape, "B,Hq,Lq,Lk");
    if (out.present_k) {
      h5::write_tensor(g, "present_key", canonical(*out.present_k, p.layout),
                       stored_dims(out.present_k->shape, p.layout),
                       p.layout == Layout::BHSD ? "B,Hkv,Lk,Dqk" : "B,Lk,Hkv,Dqk");
      h5::write_tensor(g, "present_value", canonical(*out.present_v, p.layout),
                       stored_dims(out.present_v->shape, p.layout),
                       p.layout == Layout::BHSD ? "B,Hkv,Lk,Dv" : "B,Lk,Hkv,Dv");
    }
    g = h5::Id();
    bytes = mem.close();
  }
  write_file_durably(path, bytes);
}

}  // namespace attncheck
