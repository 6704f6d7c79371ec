// Host bindings for the SDPA graph's variant pack (see variant_pack.hpp).
#include "variant_pack.hpp"

#include <cstring>
#include <stdexcept>

namespace attncheck::cudnn {
namespace {

// The tensor with the given strides (dense, logical order kept); a copy with moved elements when they differ.
Tensor with_strides(const Tensor& t, const std::vector<int64_t>& strides) {
  if (t.strides == strides) return t;
  Tensor c = t;
  c.strides = strides;
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    c.set(idx.data(), t.get(idx.data()));
    for (int64_t d = t.rank() - 1; d >= 0 && ++idx[d] == t.shape[d]; --d) idx[d] = 0;
  }
  return c;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace

std::vector<HostBinding> host_bindings(const Problem& p, const Inputs& in, const SdpaGraph& g,
                                       const BackwardData* bwd) {
  const SdpaUids& u = g.uids();
  const SdpaStrides st = SdpaStrides::from_layout(p);
  std::vector<HostBinding> out;
  for (const SdpaGraph::DeviceTensor& t : g.device_tensors()) {
    HostBinding b{t.uid, t.name, t.bytes, false, false, {}};
    auto take = [&](const Tensor& x) { b.upload = x.bytes; };
    if (t.uid == u.q) {
      take(with_strides(in.q, st.q));
    } else if (t.uid == u.k) {
      take(with_strides(in.k, st.k));
    } else if (t.uid == u.v) {
      take(with_strides(in.v, st.v));
    } else if (t.uid == u.bias) {
      if (!in.bias) throw std::logic_error("cudnn: the graph has a bias but the inputs have none");
      take(with_strides(*in.bias, contiguous_strides(in.bias->shape)));
    } else if (t.uid == u.keep) {  // 0/1 in the I/O dtype, [B, Hq, Lq, Lk] contiguous
      if (!in.keep) throw std::logic_error("cudnn: the graph has a dropout mask but the inputs have no keep-mask");
      Tensor keep(p.dtype, in.keep->shape);
      std::vector<int64_t> idx(4, 0);
      for (int64_t n = 0; n < keep.numel(); ++n) {
        keep.set(idx.data(), in.keep->get(idx.data()) != 0 ? 1.0 : 0.0);
        for (int64_t d = 3; d >= 0 && ++idx[d] == keep.shape[d]; --d) idx[d] = 0;
      }
      take(keep);
    } else if (t.uid == u.seq_q || t.uid == u.seq_kv) {  // every query row is valid; keys per batch
      std::vector<int32_t> len(static_cast<size_t>(p.B));
      for (int64_t i = 0; i < p.B; ++i)
        len[static_cast<size_t>(i)] = static_cast<int32_t>(t.uid == u.seq_q ? p.Lq : p.key_length(i));
      b.upload.resize(len.size() * sizeof(int32_t));
      std::memcpy(b.upload.data(), len.data(), b.upload.size());
    } else if (bwd && t.uid == u.o) {
      take(with_strides(bwd->fwd.out, st.o));
    } else if (bwd && t.uid == u.d_o) {
      take(with_strides(bwd->dout, st.o));
    } else if (bwd && t.uid == u.stats) {  // the forward's lse as fp32 [B, Hq, Lq, 1]
      if (!bwd->fwd.lse) throw std::logic_error("cudnn: the backward graph needs the forward's lse");
      std::vector<float> lse(static_cast<size_t>(bwd->fwd.lse->numel()));
      for (size_t i = 0; i < lse.size(); ++i)
        lse[i] = static_cast<float>(bwd->fwd.lse->get_offset(static_cast<int64_t>(i)));
      b.upload.resize(lse.size() * sizeof(float));
      std::memcpy(b.upload.data(), lse.data(), b.upload.size());
    } else if (bwd && (t.uid == u.softmax_sum || t.uid == u.dq_accum)) {
      b.is_work = true;
    } else if (t.uid == u.o || t.uid == u.stats ||
               (bwd && (t.uid == u.dq || t.uid == u.dk || t.uid == u.dv || t.uid == u.dbias))) {
      b.is_output = true;
    } else {
      throw std::logic_error("cudnn: no data for graph tensor '" + t.name + "' (uid " + std::to_string(t.uid) + ")");
    }
    if (!b.is_output && !b.is_work && static_cast<int64_t>(b.upload.size()) != b.bytes)
      throw std::logic_error("cudnn: '" + t.name + "' has " + std::to_string(b.upload.size()) +
                             " bytes, the graph declares " + std::to_string(b.bytes));
    out.push_back(std::move(b));
  }
  return out;
}

void store_output(const Problem& p, const SdpaGraph& g, int64_t uid, const std::vector<uint8_t>& bytes, Outputs& out) {
  const SdpaUids& u = g.uids();
  if (uid == u.o) {
    if (out.out.strides != SdpaStrides::from_layout(p).o || bytes.size() != out.out.bytes.size())
      throw std::logic_error("cudnn: device output does not match the output tensor's layout or size");
    out.out.bytes = bytes;
  } else if (uid == u.stats && out.lse) {  // fp32 [B, Hq, Lq, 1] packed: lse's [B, Hq, Lq] order
    if (bytes.size() != static_cast<size_t>(out.lse->numel()) * sizeof(float))
      throw std::logic_error("cudnn: stats hold " + std::to_string(bytes.size()) + " bytes, lse needs " +
                             std::to_string(out.lse->numel() * 4));
    for (int64_t i = 0; i < out.lse->numel(); ++i) {
      float v;
      std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof(float));
      out.lse->set_offset(i, v);
    }
  } else {
    throw std::logic_error("cudnn: uid " + std::to_string(uid) + " is not an output of the graph");
  }
}

void store_gradient(const Problem& p, const SdpaGraph& g, int64_t uid, const std::vector<uint8_t>& bytes,
                    Gradients& grads) {
  const SdpaUids& u = g.uids();
  const SdpaStrides st = SdpaStrides::from_layout(p);
  auto put = [&](Tensor& t, const std::vector<int64_t>& strides, const char* name) {
    if (t.strides != strides || bytes.size() != t.bytes.size())
      throw std::logic_error(std::string("cudnn: device ") + name + " does not match the gradient's layout or size");
    t.bytes = bytes;
  };
  if (uid == u.dq) {
    put(grads.dq, st.q, "dQ");
  } else if (uid == u.dk) {
    put(grads.dk, st.k, "dK");
  } else if (uid == u.dv) {
    put(grads.dv, st.v, "dV");
  } else if (uid == u.dbias && grads.dbias) {  // [1, Hq, Lq, Lk] packed, the bias dtype
    put(*grads.dbias, contiguous_strides(grads.dbias->shape), "dBias");
  } else {
    throw std::logic_error("cudnn: uid " + std::to_string(uid) + " is not a gradient of the graph");
  }
}

}  // namespace attncheck::cudnn
