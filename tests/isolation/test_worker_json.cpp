// The worker protocol knows every feature of the table (attncheck/features.hpp): its capability names come from the
// table, so a feature added there travels to workers and plugins without touching the protocol code. Each feature's
// protocol name round-trips through the capabilities JSON, and docs/worker-protocol.md names it.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "attncheck/features.hpp"
#include "worker_json.hpp"

namespace attncheck::worker {
namespace {

Capabilities all_flags_on() {
  Capabilities c;
  for (const Feature& f : problem_features())
    if (f.boolean()) f.declare(c, true);
  return c;
}

// Features whose outputs (or inputs: q4_1's mins) the protocol has no tensor for: listed by name, but never offered
// to a worker.
bool output_never_travels(const std::string& name) {
  return name == "scores" || name == "kv_append" || name == "fp8_out" || name == "kv_q4";
}

bool lists(const json& caps, const std::string& name) {
  for (const auto& x : caps.at("features"))
    if (x.get<std::string>() == name) return true;
  return false;
}

// The invariance and masked-input declarations travel both ways; a bad masked_inputs names the field and the value.
TEST(WorkerJson, InvarianceAndMaskedInputDeclarationsRoundTrip) {
  Declarations d;
  d.deterministic = d.batch_invariant = true;
  d.masked_inputs = MaskedInputs::finite_required;
  const Declarations back = declarations_from_json(declarations_to_json(d), "hello", Declarations{});
  EXPECT_TRUE(back.deterministic);
  EXPECT_TRUE(back.batch_invariant);
  EXPECT_EQ(back.masked_inputs, MaskedInputs::finite_required);
  try {
    declarations_from_json(json{{"masked_inputs", "finite"}}, "hello", Declarations{});
    FAIL() << "accepted masked_inputs \"finite\"";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("hello: declarations: field 'masked_inputs': expected \"isolated\" or "
                                         "\"finite-required\", got \"finite\""),
              std::string::npos)
        << e.what();
  }
}

// Schedule knobs (names), the bitwise ones among them and layout_invariant travel both ways; an unknown knob, or a
// bitwise knob that is not a knob, is an error naming the field.
TEST(WorkerJson, ScheduleAndLayoutDeclarationsRoundTrip) {
  Declarations d;
  d.schedule_knobs = knob_threads | knob_num_splits, d.schedule_bitwise = knob_threads;
  d.layout_invariant = true;
  const json j = declarations_to_json(d);
  EXPECT_EQ(j["schedule_knobs"], json::array({"threads", "num_splits"})) << j.dump();
  const Declarations back = declarations_from_json(j, "hello", Declarations{});
  EXPECT_EQ(back.schedule_knobs, knob_threads | knob_num_splits);
  EXPECT_EQ(back.schedule_bitwise, unsigned{knob_threads});
  EXPECT_TRUE(back.layout_invariant);
  const std::pair<json, const char*> bad[] = {
      {json{{"schedule_knobs", {"threads", "warps"}}}, "field 'schedule_knobs': expected an array of \"threads\""},
      {json{{"schedule_knobs", {"threads"}}, {"schedule_bitwise", {"num_splits"}}},
       "field 'schedule_bitwise': num_splits must be among schedule_knobs (threads)"}};
  for (const auto& [in, want] : bad) {
    try {
      declarations_from_json(in, "hello", Declarations{});
      ADD_FAILURE() << "accepted " << in.dump();
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(WorkerJson, EveryTableFeatureHasAProtocolName) {
  std::set<std::string> seen;
  int flags = 0;
  for (const Feature& f : problem_features()) {
    ASSERT_NE(f.protocol, nullptr) << f.name;
    const std::string name = f.protocol;
    EXPECT_FALSE(name.empty()) << f.name;
    EXPECT_TRUE(seen.insert(name).second) << "protocol name '" << name << "' used twice";
    if (!f.boolean()) {  // carried by its own key of the capabilities object
      EXPECT_TRUE(capabilities_to_json(Capabilities{}).contains(name)) << f.name << " -> " << name;
      continue;
    }
    ++flags;
    if (output_never_travels(name)) continue;  // from_json clears them; checked below
    Capabilities on = all_flags_on(), off = all_flags_on();
    f.declare(off, false);
    EXPECT_TRUE(lists(capabilities_to_json(on), name)) << f.name;
    EXPECT_FALSE(lists(capabilities_to_json(off), name)) << f.name;
    EXPECT_TRUE(f.declared(capabilities_from_json(capabilities_to_json(on), "test"))) << f.name;
    EXPECT_FALSE(f.declared(capabilities_from_json(capabilities_to_json(off), "test"))) << f.name;
    // Every other flag is untouched by this one's name.
    const Capabilities back = capabilities_from_json(capabilities_to_json(off), "test");
    for (const Feature& g : problem_features()) {
      if (g.boolean() && &g != &f && !output_never_travels(g.protocol)) {
        EXPECT_TRUE(g.declared(back)) << g.name << " lost while round-tripping " << f.name;
      }
    }
  }
  EXPECT_GE(flags, 16);
}

TEST(WorkerJson, OutputsWithoutAProtocolTensorAreNeverOfferedToAWorker) {
  Capabilities c = all_flags_on();
  EXPECT_TRUE(lists(capabilities_to_json(c), "scores"));
  EXPECT_TRUE(lists(capabilities_to_json(c), "kv_append"));
  const Capabilities back = capabilities_from_json(capabilities_to_json(c), "test");
  EXPECT_FALSE(back.scores_out) << "a worker cannot return raw scores: the protocol has no such tensor";
  EXPECT_FALSE(back.kv_append) << "a worker cannot return present keys/values: the protocol has no such tensor";
  EXPECT_FALSE(back.fp8_out) << "a worker cannot return amax_o: the protocol has no such tensor";
  EXPECT_FALSE(back.kv_q4) << "a worker cannot take q4_1's mins: the protocol has no such tensor";
}

// The max-logit output has a protocol tensor: a worker that lists it is offered it, with its form in the problem.
TEST(WorkerJson, TheMaxLogitOutputTravelsWithItsForm) {
  EXPECT_TRUE(capabilities_from_json(capabilities_to_json(all_flags_on()), "test").max_logit_out);
  EXPECT_FALSE(capabilities_from_json(capabilities_to_json(Capabilities{}), "test").max_logit_out);
  for (MaxLogitOut m : {MaxLogitOut::rows, MaxLogitOut::heads}) {
    Problem p;
    p.max_logit = m;
    p.scale = p.effective_scale();
    const json j = problem_to_json(p);
    EXPECT_EQ(j.at("max_logit"), to_string(m));
    EXPECT_EQ(problem_from_json(j, "test").max_logit, m);
  }
  json j = problem_to_json(Problem{});
  EXPECT_FALSE(j.contains("max_logit")) << "a problem without the output sends no field a worker must read";
  j["max_logit"] = "columns";
  EXPECT_THROW(problem_from_json(j, "run 3"), ProtocolError);
}

// A problem message read back is the problem sent (its lossless name equal): fp8 descales were dropped (read as 1)
// because they travel as numbers and the name fallback skips keys the message carries.
TEST(WorkerJson, ProblemsRoundTripWithTheirFeatures) {
  Problem fp8;
  fp8.dtype = DType::e5m2, fp8.descale_q = 0.375, fp8.descale_k = 1.25, fp8.descale_v = 0.1;
  Problem sinks;
  sinks.Hq = 2, sinks.sinks = {0.5, -1};
  for (Problem p : {fp8, sinks}) {
    p.scale = p.effective_scale();  // the protocol sends the effective scale
    EXPECT_EQ(problem_from_json(problem_to_json(p), "test").name(), p.name());
  }
}

// The block mask handed with a run request (feature block_mask) round-trips, and an inconsistent one is a protocol
// error naming the field and the value, never a block mask handed on.
TEST(WorkerJson, TheHandedBlockMaskRoundTripsAndIsValidated) {
  Problem p;
  p.Lq = p.Lk = 8, p.Dqk = p.Dv = 4, p.causal = true;
  BlockMask m;  // 4 x 4 blocks of a causal 8 x 8: query block 0 sees key block 0 partly, block 1 sees 0 fully, 1 partly
  m.q_block = m.kv_block = 4, m.B = m.H = 1, m.q_blocks = m.slots = 2;
  m.kv_num_blocks = {1, 1}, m.kv_indices = {0, 0, 1, 0};
  m.full_kv_num_blocks = {0, 1}, m.full_kv_indices = {0, 0, 0, 0};
  const BlockMask back = block_mask_from_json(block_mask_to_json(m), "run 3", p);
  EXPECT_EQ(back.kv_indices, m.kv_indices);
  EXPECT_EQ(back.full_kv_num_blocks, m.full_kv_num_blocks);
  EXPECT_EQ(back.q_block, 4);
  json bad = block_mask_to_json(m);
  bad["kv_indices"][2] = 5;
  try {
    block_mask_from_json(bad, "run 3", p);
    FAIL() << "an index outside the key blocks was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("run 3: block_mask: block mask: kv_indices[0,0,1,0] = 5 is outside"),
              std::string::npos)
        << e.what();
  }
  bad = block_mask_to_json(m);
  bad["q_block"] = "four";
  EXPECT_THROW(block_mask_from_json(bad, "run 3", p), ProtocolError);
}

TEST(WorkerJson, UnknownFeatureNamesAreIgnored) {
  json j = capabilities_to_json(Capabilities{});
  j["features"].push_back("a-feature-of-a-later-attncheck");
  EXPECT_NO_THROW(capabilities_from_json(j, "test"));
}

TEST(WorkerJson, TheProtocolDocumentNamesEveryFeature) {
  std::ifstream in(WORKER_PROTOCOL_DOC);
  ASSERT_TRUE(in) << WORKER_PROTOCOL_DOC;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const Feature& f : problem_features()) {
    std::string quoted = "`";
    quoted.append(f.protocol).push_back('`');
    EXPECT_NE(doc.find(quoted), std::string::npos)
        << "docs/worker-protocol.md does not name " << quoted << " (feature " << f.name << ")";
  }
}

}  // namespace
}  // namespace attncheck::worker
