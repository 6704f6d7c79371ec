// The host half of run(), without a GPU: every device tensor of the graph gets data of exactly the declared size,
// inputs in a foreign layout are moved to the graph's, the keep-mask and key lengths are encoded as cuDNN reads
// them, and device results land in Outputs (out bytes as is, fp32 stats as lse).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "driver.hpp"
#include "sdpa_graph.hpp"
#include "variant_pack.hpp"

using namespace attncheck;
using namespace attncheck::cudnn;

namespace {

// Distinct signed values, so a misplaced element cannot go unnoticed.
void fill(Tensor& t, double salt) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set_offset(n, std::sin(0.37 * static_cast<double>(n) + salt) * 4.0);
}

Inputs inputs_for(const Problem& p) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  fill(in.q, 0.1), fill(in.k, 0.2), fill(in.v, 0.3);
  if (p.bias_shape) {
    const auto& s = *p.bias_shape;
    in.bias = Tensor(p.bias_dtype, {s[0], s[1], s[2], s[3]});
    fill(*in.bias, 0.4);
  }
  if (p.dropout_p > 0) in.keep = make_keep_mask(p);
  return in;
}

Problem full_problem() {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 11, p.Dqk = 16, p.Dv = 8;
  p.dtype = DType::f16, p.layout = Layout::BSHD;
  p.causal = true, p.key_lengths = {7, 11}, p.want_lse = true, p.dropout_p = 0.3, p.dropout_seed = 9;
  p.bias_shape = std::array<int64_t, 4>{1, 4, 5, 11};
  return p;
}

class CudnnVariantPack : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(driver_load_error().empty()) << driver_load_error(); }
};

TEST_F(CudnnVariantPack, EveryDeviceTensorIsBoundWithItsDeclaredSize) {
  Problem plain = full_problem();
  plain.causal = false, plain.key_lengths.clear(), plain.want_lse = false, plain.dropout_p = 0;
  plain.bias_shape.reset(), plain.layout = Layout::BHSD;
  for (const Problem& p : {full_problem(), plain}) {
    const SdpaGraph g(p);
    const Inputs in = inputs_for(p);
    const std::vector<HostBinding> bindings = host_bindings(p, in, g);
    std::set<int64_t> bound, outputs;
    for (const HostBinding& b : bindings) {
      bound.insert(b.uid);
      if (b.is_output) {
        outputs.insert(b.uid);
      } else {
        EXPECT_EQ(static_cast<int64_t>(b.upload.size()), b.bytes) << b.name;
      }
    }
    std::set<int64_t> declared;
    for (const auto& t : g.device_tensors()) declared.insert(t.uid);
    EXPECT_EQ(bound, declared) << p.name();
    std::set<int64_t> want_outputs{g.uids().o};
    if (p.want_lse) want_outputs.insert(g.uids().stats);
    EXPECT_EQ(outputs, want_outputs) << p.name();
    // Scalars travel separately, by value: scale always, plus the masks' -inf fills.
    EXPECT_GE(g.scalars().size(), 1u);
  }
}

TEST_F(CudnnVariantPack, InputsAreEncodedAsTheGraphDeclaresThem) {
  const Problem p = full_problem();
  const SdpaGraph g(p);
  Inputs in = inputs_for(p);
  // q arrives in BHSD order although the problem says BSHD: it must be moved, values kept.
  Tensor q_bhsd(p.dtype, in.q.shape, storage_order(Layout::BHSD));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dqk; ++d) q_bhsd.put(b, h, i, d, in.q.at(b, h, i, d));
  const Tensor q_expected = in.q;
  in.q = q_bhsd;
  ASSERT_NE(in.q.strides, q_expected.strides);

  std::set<int64_t> checked;
  for (const HostBinding& b : host_bindings(p, in, g)) {
    checked.insert(b.uid);
    if (b.uid == g.uids().q) {
      EXPECT_EQ(b.upload, q_expected.bytes);
    } else if (b.uid == g.uids().seq_q || b.uid == g.uids().seq_kv) {
      ASSERT_EQ(b.upload.size(), 2 * sizeof(int32_t));
      int32_t len[2];
      std::memcpy(len, b.upload.data(), sizeof(len));
      const bool is_q = b.uid == g.uids().seq_q;
      EXPECT_EQ(len[0], is_q ? 5 : 7);  // every query row valid; key_lengths {7, 11}
      EXPECT_EQ(len[1], is_q ? 5 : 11);
    } else if (b.uid == g.uids().keep) {  // fp16 0/1, same logical order as the u8 mask
      ASSERT_EQ(static_cast<int64_t>(b.upload.size()), in.keep->numel() * 2);
      int64_t kept = 0;
      for (int64_t n = 0; n < in.keep->numel(); ++n) {
        uint16_t bits;
        std::memcpy(&bits, b.upload.data() + 2 * n, 2);
        const double want = in.keep->get_offset(n) != 0 ? 1.0 : 0.0;
        ASSERT_EQ(half_bits_to_float(bits), want) << "keep element " << n;
        kept += want != 0;
      }
      EXPECT_GT(kept, 0);
      EXPECT_LT(kept, in.keep->numel());  // p = 0.3: both kinds present, so the check can fail
    } else if (b.uid == g.uids().bias) {
      EXPECT_EQ(b.upload, in.bias->bytes);
    }
  }
  const SdpaUids& u = g.uids();
  EXPECT_EQ(checked, (std::set<int64_t>{u.q, u.k, u.v, u.o, u.stats, u.bias, u.seq_q, u.seq_kv, u.keep}));
}

TEST_F(CudnnVariantPack, ResultsLandInTheOutputs) {
  const Problem p = full_problem();
  const SdpaGraph g(p);
  Outputs out = make_outputs(p);
  out.lse->fill(std::nan(""));
  std::vector<uint8_t> stats(static_cast<size_t>(out.lse->numel()) * sizeof(float));
  for (int64_t i = 0; i < out.lse->numel(); ++i) {
    const float v = -1.5f + 0.25f * static_cast<float>(i);
    std::memcpy(stats.data() + i * sizeof(float), &v, sizeof(float));
  }
  store_output(p, g, g.uids().stats, stats, out);
  for (int64_t i = 0; i < out.lse->numel(); ++i) EXPECT_EQ(out.lse->get_offset(i), -1.5 + 0.25 * i);

  std::vector<uint8_t> o(out.out.bytes.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<uint8_t>(i * 7 + 1);
  store_output(p, g, g.uids().o, o, out);
  EXPECT_EQ(out.out.bytes, o);

  EXPECT_THROW(store_output(p, g, g.uids().stats, std::vector<uint8_t>(4), out), std::logic_error);
  EXPECT_THROW(store_output(p, g, g.uids().q, o, out), std::logic_error);
}

TEST_F(CudnnVariantPack, MissingInputIsAnErrorNotAGarbageBuffer) {
  const Problem p = full_problem();
  const SdpaGraph g(p);
  Inputs in = inputs_for(p);
  in.bias.reset();
  EXPECT_THROW(host_bindings(p, in, g), std::logic_error);
}

}  // namespace
