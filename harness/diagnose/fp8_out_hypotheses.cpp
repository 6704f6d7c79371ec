// Hypotheses about an fp8 output (fp8_out.hpp; cuDNN sdpa_fp8's O with scale_o and amax_o): the codes stored with
// scale_o ignored (the codes of O) or applied as a descale (the codes of O / scale_o), and amax_o in scale_o units
// (max |O * scale_o|) or taken of the stored codes (max |code| / scale_o). Each predicts the candidate's out or
// amax_o from the reference's O by the store the bug does.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attncheck/fp8_out.hpp"
#include "hypotheses.hpp"

namespace attncheck::diagnose {

void fp8_out_hypotheses(Scorer& sc) {
  const Subject& s = sc.s;
  const Problem& p = s.p();
  if (!p.fp8_out) return;
  // out: the codes of O * f, read back as code / scale_o. The candidate is held to the predicted codes: one step
  // of the format at the code (2 u_8 relative, the smallest subnormal near 0) plus O's own bound, both read back
  // through 1 / scale_o; the reference's tolerance (O's bound plus a step at O's codes) would let a store of
  // O / scale_o pass for one of O, both being near 0 there.
  const double tiny = p.o_dtype == DType::e4m3 ? 0x1p-9 : 0x1p-16, u8 = unit_roundoff(p.o_dtype);
  auto stored = [&](const char* tag, const char* what, double f) {
    Problem q = p;
    q.scale_o = f;
    std::vector<double> pred(s.ref.out.size()), tol(pred.size());
    for (size_t n = 0; n < pred.size(); ++n) {
      const double code = fp8_out_code(q, s.ref.out[n]);
      pred[n] = fp8_out_value(p, code);
      tol[n] = (std::max(2 * u8 * std::abs(code), tiny) + f * s.tol_out[n]) / p.scale_o;
    }
    sc.add(tag, what, pred, nullptr, nullptr, &tol);
  };
  if (s.n_bad_out > 0) {
    stored("fp8-out-scale-ignored", "fp8 output: scale_o ignored (the codes of O)", 1.0);
    stored("fp8-out-scale-inverted", "fp8 output: scale_o applied as a descale (the codes of O / scale_o)",
           1.0 / p.scale_o);
  }
  if (s.n_bad_amax == 0) return;
  const double amax = s.amax_expected[0], all = static_cast<double>(s.n_bad_out + s.n_bad_lse + s.n_bad_amax);
  double top = 0;  // max |code| / scale_o over the codes the reference's O is stored as
  for (double o : s.ref.out)
    if (!std::isnan(o)) top = std::max(top, std::abs(fp8_out_value(p, fp8_out_code(p, o))));
  // Explained: the candidate's amax_o matches the prediction, which is itself outside the reference's tolerance.
  // tol: the prediction's own bound (O's, in the prediction's units)
  auto amax_as = [&](const char* tag, const char* what, double pred, double tol) {
    if (!(s.bad_amax[0] && !is_bad(pred, s.amax[0], tol) && is_bad(amax, pred, s.tol_amax[0]))) return;
    std::ostringstream e;
    e << what << ": predicts " << pred << ", the candidate gave " << s.amax[0] << " for max |O| = " << amax
      << (s.n_bad_out + s.n_bad_lse ? "" : " (out and lse are right)");
    sc.out.push_back({tag, 1.0 / all, e.str()});
  };
  amax_as("amax-o-scaled", "fp8 output: amax_o in scale_o units (max |O * scale_o|)", amax * p.scale_o,
          (s.tol_amax[0] + 4 * unit_roundoff(DType::f32) * amax) * p.scale_o);
  // The candidate's codes round its own O, which may round to the code next to the reference's: one step of the
  // format (2 u_8 of the value) of slack.
  amax_as("amax-o-after-cast", "fp8 output: amax_o of the stored codes (max |code| / scale_o)", top,
          s.tol_amax[0] + 2 * u8 * top);
}

}  // namespace attncheck::diagnose
