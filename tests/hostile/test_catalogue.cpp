// The malformed-input catalogue: each generated case (catalogue_cases.cpp) through every verb that
// reads it, each run under a timeout. A damaged fixture goes through inspect, compare (with a good candidate),
// verify and import (which reads its /inputs arrays); a damaged candidate through compare and inspect --actual
// (with the good fixture). Expected: exit 2 and an
// error naming the file and the field; never a crash, a hang or exit 0/1. Bit flips are the exception: a flip
// inside a value is a valid file with another value (nothing in the schema checksums data), so they must only never
// crash or hang, and an exit 2 must name the file. Each test prints its outcomes per kind and verb.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "../golden/cli_util.hpp"
#include "catalogue.hpp"

namespace attncheck::catalogue {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int rc = -1;  // exit code; -1 killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string out;
};

Outcome run_verb(const std::string& args) {
  // timeout exits 124 after SIGTERM; -k kills a process that ignores it.
  const std::string cmd = "timeout -k 2 10 " + std::string(ATTNCHECK_EXE) + " " + args + " 2>&1";
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    if (o.out.size() < 65536) o.out.append(buf, n);
  const int st = pclose(p);
  if (WIFEXITED(st)) {
    o.rc = WEXITSTATUS(st);
    o.timed_out = o.rc == 124 || o.rc == 137;
    if (o.rc > 128 && !o.timed_out) o.signal = o.rc - 128;  // timeout passes on the child's signal as 128+N
  } else if (WIFSIGNALED(st)) {
    o.signal = WTERMSIG(st);
  }
  return o;
}

std::string label(const Outcome& o) {
  if (o.timed_out) return "timeout";
  if (o.signal) return "signal " + std::to_string(o.signal);
  return "exit " + std::to_string(o.rc);
}

const Sources& sources() {
  static const fs::path dir = test::scratch("catalogue");
  static const Sources s = make_sources(dir);
  return s;
}

fs::path dir_for(const std::string& kind) { return sources().plain.parent_path().parent_path() / kind; }

// Where `import` writes the fixture it makes of a case (outside the case's directory, which verify lists).
fs::path import_out(const Case& c) {
  std::string n = c.name;
  for (char& ch : n)
    if (ch == '/') ch = '_';
  return dir_for("import-out") / n / "imported.h5";
}

// import takes the problem from its flags and only the arrays from the file: the flags that describe each source.
std::string import_flags(const Case& c) {
  if (c.partner == sources().rich_candidate)
    return " --layout bshd --causal bottom-right --window 6,-1 --softcap 10 --dropout-p 0.1 --dropout-seed 99"
           " --key-lengths 17,9 --want-lse --want-weights";
  return " --want-lse --want-weights";
}

// What import must do with a case. It reads the arrays q, k, v, mask, bias and keep under /inputs, and no
// attribute and nothing under /expected: damage elsewhere leaves it a valid import (exit 0).
Want import_want(const Case& c) {
  const std::string& k = c.kind;
  if (k == "bit-flip") return Want::any;
  if (k == "modification") return Want::accepted;  // import reads q, k, v: modification parameters are not imported
  if (k == "kv-cache") return Want::refused;       // the codes are not a float k: import refuses them by dtype
  if (k.starts_with("attribute/") || k == "inconsistent-shape" || k == "size-bomb" || k == "work-bomb")
    return Want::accepted;  // attributes only
  const std::string what = c.name.substr(k.size() + 1);
  if (k.starts_with("dataset/")) {
    if (what.starts_with("/expected/") || what.starts_with("/inputs/key_lengths")) return Want::accepted;
    // Without mask or bias it is the problem without them; keep is required by --dropout-p.
    if (k == "dataset/missing" && (what == "/inputs/mask" || what == "/inputs/bias")) return Want::accepted;
    // v one longer in its last dimension is a valid problem with Dv = Dqk + 1.
    if (k == "dataset/wrong-shape" && what == "/inputs/v") return Want::accepted;
    return Want::refused;
  }
  if (k == "storage" && what == "virtual-expected") return Want::accepted;
  return Want::refused;  // truncations, links, external and virtual storage of inputs, files that are not files
}

// The array a dataset case damaged: "mask" for dataset/wrong-shape//inputs/mask/...
std::string array_of(const Case& c) {
  const std::string path = c.name.substr(c.kind.size() + 1);  // "/inputs/mask" or "/inputs/mask/int32"
  const size_t from = path.find('/', 1) + 1;
  return path.substr(from, path.find('/', from) - from);
}

// `word` occurs in `text` not as part of a longer identifier ("k" in "q, k, v" but not in "keep").
bool names_word(const std::string& text, const std::string& word) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1))
    if ((at == 0 || !ident(text[at - 1])) && (at + word.size() == text.size() || !ident(text[at + word.size()])))
      return true;
  return false;
}

// The verbs that read a case's file.
std::vector<std::pair<std::string, std::string>> verbs(const Case& c) {
  const std::string f = c.file.string(), partner = c.partner.string();
  if (c.candidate)
    return {{"compare", "compare --expected " + partner + " --actual " + f},
            {"inspect --actual", "inspect " + partner + " --actual " + f}};
  std::vector<std::pair<std::string, std::string>> v = {
      {"inspect", "inspect " + f}, {"compare", "compare --expected " + f + " --actual " + partner}};
  if (c.regular) v.push_back({"verify", "verify --impl reference --fixtures " + c.file.parent_path().string()});
  v.push_back({"import", "import " + f + " --out " + import_out(c).string() + import_flags(c)});
  return v;
}

// ATTNCHECK_CATALOGUE_STRIDE=K runs the j-th verb of a kind's i-th case only where (i + j) % K == 0: a kind of K
// cases or more still reaches every verb, at 1/K of the processes (the sanitizer run, where each start costs ~4x).
size_t stride() {
  const char* s = std::getenv("ATTNCHECK_CATALOGUE_STRIDE");
  if (!s) return 1;
  const int k = std::atoi(s);
  if (k < 1) ADD_FAILURE() << "ATTNCHECK_CATALOGUE_STRIDE must be a positive number, got '" << s << "'";
  return k < 1 ? 1 : static_cast<size_t>(k);
}

// Runs every case through its verbs, checks each outcome, prints the tally per kind and verb.
void run_all(const std::vector<Case>& cases) {
  std::map<std::string, std::map<std::string, std::map<std::string, int>>> tally;  // kind -> verb -> outcome -> n
  std::map<std::string, size_t> seen;                                              // kind -> cases of it so far
  const size_t k = stride();
  for (const Case& c : cases) {
    const size_t i = seen[c.kind]++;
    size_t j = 0;
    for (const auto& [verb, args] : verbs(c)) {
      if ((i + j++) % k != 0) continue;
      const bool import = verb == "import";
      if (import) fs::create_directories(import_out(c).parent_path());
      const Outcome o = run_verb(args);
      const Want want = import ? import_want(c) : c.want;
      ++tally[c.kind + (want == Want::refused ? "" : want == Want::any ? " (any)" : " (valid)")][verb][label(o)];
      const std::string where = c.name + " via " + verb + ": " + label(o) + "\n" + o.out;
      EXPECT_FALSE(o.timed_out) << where;
      EXPECT_EQ(o.signal, 0) << where;
      if (want == Want::refused) {
        EXPECT_EQ(o.rc, 2) << where;
      } else if (want == Want::accepted) {
        EXPECT_EQ(o.rc, 0) << where;
      } else {
        EXPECT_TRUE(o.rc == 0 || o.rc == 1 || o.rc == 2) << where;
      }
      if (import && o.rc != 0) {  // a refused import leaves no fixture and no temporary
        const fs::path d = import_out(c).parent_path();
        EXPECT_TRUE(fs::is_empty(d)) << "import left " << fs::directory_iterator(d)->path() << ": " << where;
      }
      if (o.rc == 2 && want != Want::accepted) {
        EXPECT_NE(o.out.find(c.file.string()), std::string::npos) << "the error does not name the file: " << where;
        bool named = c.expect.empty();
        if (import && c.kind.starts_with("dataset/"))  // import names the array it read, not the dataset's path
          named = names_word(o.out, array_of(c));
        else if (import && c.kind == "kv-cache")  // import reads q, k, v as one float dtype: it names the codes'
          named = o.out.find("q, k, v must share a dtype") != std::string::npos;
        else
          for (const auto& e : c.expect) named = named || o.out.find(e) != std::string::npos;
        EXPECT_TRUE(named) << "the error names none of the expected fields: " << where;
      }
    }
  }
  for (const auto& [kind, by_verb] : tally)
    for (const auto& [verb, outcomes] : by_verb) {
      std::string line = "catalogue " + kind + " | " + verb + " |";
      for (const auto& [what, n] : outcomes) line += " " + what + ": " + std::to_string(n);
      std::printf("%s\n", line.c_str());
    }
}

TEST(Catalogue, Truncations) { run_all(truncations(sources(), dir_for("truncation"))); }
TEST(Catalogue, BitFlips) { run_all(bit_flips(sources(), dir_for("bit-flip"))); }
TEST(Catalogue, Attributes) { run_all(attributes(sources(), dir_for("attribute"))); }
TEST(Catalogue, Datasets) { run_all(datasets(sources(), dir_for("dataset"))); }
TEST(Catalogue, ShapesAndBombs) { run_all(shapes_and_bombs(sources(), dir_for("shape"))); }
TEST(Catalogue, Storage) { run_all(storage(sources(), dir_for("storage"))); }
TEST(Catalogue, Candidates) { run_all(candidates(sources(), dir_for("candidate"))); }
TEST(Catalogue, Modifications) { run_all(modifications(dir_for("modification"))); }
TEST(Catalogue, KvCaches) { run_all(kv_caches(dir_for("kv-cache"))); }

TEST(Catalogue, HasAtLeast300Cases) {
  const Sources& s = sources();
  const fs::path d = dir_for("count");
  size_t n = truncations(s, d / "t").size() + bit_flips(s, d / "b").size() + attributes(s, d / "a").size() +
             datasets(s, d / "d").size() + shapes_and_bombs(s, d / "s").size() + storage(s, d / "st").size() +
             candidates(s, d / "c").size();
  std::printf("catalogue: %zu cases\n", n);
  EXPECT_GE(n, 300u);
}

}  // namespace
}  // namespace attncheck::catalogue
