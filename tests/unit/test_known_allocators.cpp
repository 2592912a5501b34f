// The known-allocator table (analysis/known_allocators.cpp): every entry recognises its generated
// fixture (known_<id>: the site, the kind and the exact bytes), its example frame has its fact,
// plain memory matches no entry, and docs/known-allocators.md lists exactly the table's rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analysis/analyze.h"
#include "analysis/known_allocators.h"
#include "analysis/site_what.h"
#include "model/load.h"
#include "report/json_report.h"
#include "report/text_report.h"
#include "test_support.h"

namespace memsnap {
namespace known_allocators_tests {

std::string pattern_text(const TextPattern& p, std::string_view what) {
  switch (p.match) {
    case TextMatch::Any: return "";
    case TextMatch::Equals: return fmt::format("{} is `{}`", what, p.text);
    case TextMatch::StartsWith: return fmt::format("{} starts with `{}`", what, p.text);
    case TextMatch::EndsWith: return fmt::format("{} ends with `{}`", what, p.text);
    case TextMatch::Contains: return fmt::format("{} contains `{}`", what, p.text);
  }
  return "";
}

std::string frames_text(const KnownAllocator& k) {
  std::string out;
  for (const FrameMatch& m : k.frames) {
    std::string one = pattern_text(m.file, "file");
    const std::string name = pattern_text(m.name, "function");
    if (!name.empty()) one += one.empty() ? name : " and " + name;
    if (one.empty()) one = "any frame with the fact";
    out += out.empty() ? one : " or " + one;
  }
  return out;
}

std::string fact_name(FrameFacts fact) {
  for (auto [bit, name] : {std::pair{kKvCacheCode, "kKvCacheCode"}, {kAutocastCast, "kAutocastCast"}, {kAttentionMath, "kAttentionMath"},
                           {kAttentionCode, "kAttentionCode"}, {kWorkspaceCode, "kWorkspaceCode"}, {kFrameworkBuffer, "kFrameworkBuffer"},
                           {kOtherOptimizer, "kOtherOptimizer"}, {kCommunication, "kCommunication"}, {kOptimizerCode, "kOptimizerCode"}}) {
    if (fact == bit) return name;
  }
  return "?";
}

// The docs' table as the table itself writes it.
std::string expected_doc_table() {
  std::string out = "| id | kind | recognised by | name | note | knob |\n|---|---|---|---|---|---|\n";
  for (const KnownAllocator& k : known_allocators()) {
    std::string by = fmt::format("a `{}` frame: {}", fact_name(k.fact), frames_text(k));
    if (k.with) by += fmt::format("; with a `{}` frame on the stack", fact_name(k.with));
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", k.id, category_name(k.kind), by, k.name, k.note, k.knob);
  }
  return out;
}

TEST(KnownAllocators, TheDocsListEveryEntry) {
  std::ifstream in(std::string(MEMSNAP_DATA_DIR) + "/../../docs/known-allocators.md");
  ASSERT_TRUE(in) << "docs/known-allocators.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- table: generated from src/analysis/known_allocators.cpp -->\n", end = "<!-- end of table -->";
  const auto from = doc.find(begin), to = doc.find(end);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(doc.substr(from + begin.size(), to - from - begin.size()), expected_doc_table())
      << "docs/known-allocators.md differs from the table; the table as it should read:\n" << expected_doc_table();
}

TEST(KnownAllocators, IdsAreUniqueAndEveryExampleFrameHasItsFact) {
  for (const KnownAllocator& k : known_allocators()) {
    EXPECT_EQ(find_known_allocator(k.id), &k) << k.id;
    EXPECT_NE(frame_facts(k.example_file, k.example_function) & k.fact, 0u) << k.id;
    EXPECT_FALSE(k.name.empty() || k.note.empty() || k.knob.empty()) << k.id;
  }
  EXPECT_EQ(find_known_allocator("no_such_entry"), nullptr);
}

// Each entry's fixture: the entry's blocks form one site with the entry, its kind and the exact
// bytes the generator allocated; the plain activation beside them matches nothing.
TEST(KnownAllocators, EveryEntryRecognisesItsFixture) {
  const std::filesystem::path dir = MEMSNAP_FIXTURE_DIR;
  for (const KnownAllocator& k : known_allocators()) {
    SCOPED_TRACE(std::string(k.id));
    const std::string name = "known_" + std::string(k.id);
    std::ifstream in(dir / (name + ".truth.json"));
    ASSERT_TRUE(in) << name << " has no fixture";
    const auto expect = nlohmann::json::parse(in).at("expect");
    const auto& known = expect.at("known_allocator");
    const Analysis a = analyze(load_snapshot((dir / (name + ".pickle")).string()));
    const Site* found = nullptr;
    const Site* control = nullptr;
    for (const Site& s : a.sites) {
      if (s.known) {
        EXPECT_EQ(found, nullptr) << "two sites with an entry";
        found = &s;
      }
      if (s.site == expect.at("control_site").get<std::string>()) control = &s;
    }
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->known, &k);
    EXPECT_EQ(known.at("id").get<std::string>(), k.id);
    EXPECT_EQ(found->site, known.at("site").get<std::string>());
    EXPECT_EQ(category_name(found->category), known.at("kind").get<std::string>());
    EXPECT_EQ(found->category, k.kind);
    EXPECT_EQ(found->bytes, known.at("bytes").get<std::uint64_t>());
    EXPECT_EQ(found->blocks, known.at("blocks").get<std::uint64_t>());
    EXPECT_NE(site_phrase(*found).find(std::string(k.name)), std::string::npos) << site_phrase(*found);
    ASSERT_NE(control, nullptr);
    EXPECT_EQ(control->known, nullptr);
    EXPECT_EQ(control->category, Category::Activation);
  }
}

// The "what" of the fixtures whose frames below the user line say it.
TEST(KnownAllocators, TheWhatIsTheFrameBelowTheUserLine) {
  const std::filesystem::path dir = MEMSNAP_FIXTURE_DIR;
  struct Case {
    std::string fixture, what, op;
  };
  for (const Case& c : std::vector<Case>{
           {"known_vllm_kv_cache", "vllm/worker/cache_engine.py:_allocate_kv_cache", ""},
           {"known_autocast_cast_cache", "torch/nn/modules/linear.py:forward", "at::native::_to_copy"},
           {"known_sdpa_math", "at::native::bmm_out_cuda", "at::native::bmm_out_cuda"},
           {"known_cublas_workspace", "torch/nn/modules/linear.py:forward", "at::cuda::getNewWorkspace"},
           {"known_past_key_values", "", ""},
       }) {
    SCOPED_TRACE(c.fixture);
    const Analysis a = analyze(load_snapshot((dir / (c.fixture + ".pickle")).string()));
    const Site& top = a.sites.at(0);
    EXPECT_EQ(top.what, c.what);
    EXPECT_EQ(top.what_op, c.op);
  }
}

// One line whose call allocates two kinds (vllm.LLM(): the model's weights, then the KV cache) is
// one site of the larger kind that says the other: in the analysis, the text and the JSON report.
TEST(KnownAllocators, ALineOfTwoKindsSaysBoth) {
  const std::filesystem::path dir = MEMSNAP_FIXTURE_DIR;
  std::ifstream in(dir / "vllm_engine_weights_and_cache.truth.json");
  ASSERT_TRUE(in);
  const auto expect = nlohmann::json::parse(in).at("expect");
  const LoadedSnapshot loaded = load_snapshot((dir / "vllm_engine_weights_and_cache.pickle").string());
  const Analysis a = analyze(loaded);
  ASSERT_EQ(a.sites.size(), 1u);
  const Site& site = a.sites[0];
  EXPECT_EQ(site.site, expect.at("site").get<std::string>());
  EXPECT_EQ(category_name(site.category), expect.at("kind").get<std::string>());
  EXPECT_EQ(site.bytes, expect.at("bytes").get<std::uint64_t>());
  const std::vector<SiteKind> want = {
      {Category::Parameter, expect.at("other_bytes").get<std::uint64_t>(), expect.at("other_blocks").get<std::uint64_t>()}};
  EXPECT_EQ(site.other_kinds, want);
  EXPECT_EQ(expect.at("other_kind").get<std::string>(), "parameter");
  const std::string text = text_report({loaded, a});
  EXPECT_NE(text.find("\n      also parameter 481.00 MiB in 5 blocks\n"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(json_report(loaded, a).dump());
  EXPECT_EQ(json.at("top_sites").at(0).at("other_kinds"),
            nlohmann::json::parse(R"([{"kind": "parameter", "bytes": 504365056, "blocks": 5}])"));
  // A site of one kind has no other_kinds key.
  const LoadedSnapshot plain = load_snapshot((dir / "known_vllm_kv_cache.pickle").string());
  const auto plain_json = nlohmann::json::parse(json_report(plain, analyze(plain)).dump());
  EXPECT_FALSE(plain_json.at("top_sites").at(0).contains("other_kinds"));
}

}  // namespace known_allocators_tests
}  // namespace memsnap
