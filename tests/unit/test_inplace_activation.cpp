// out_of_place_activation: an activation that makes the peak by writing a new tensor beside the
// input it reads, freed right after it; the saving measured on the whole live curve. Against the
// generator's scenarios_inplace.py (exact bytes) and HugePandaCoder's inference script.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "analysis/analyze.h"
#include "base/units.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace inplace_activation_tests {

namespace fs = std::filesystem;

const Pattern* out_of_place(const Analysis& a) { return test::pattern(a, PatternId::OutOfPlaceActivation); }

bool has_evidence(const Pattern& p, const std::string& text) {
  return std::any_of(p.evidence.begin(), p.evidence.end(), [&](const Sentence& s) { return s.text().find(text) != std::string::npos; });
}

// Each relu of a conv -> relu -> pool loop makes the 4.25 GiB peak beside the conv output it reads.
// In place, the peak falls to the conv's and the pool's moments (3.25 GiB): the finding saves
// 1 GiB, not the relu's 2 GiB, and says so.
TEST(OutOfPlaceActivation, ReluBesideItsFreedInputSavesWhatTheCurveSays) {
  const std::string name = "relu_out_of_place_peak";
  const Analysis a = analyze(load_snapshot(test::fixture_path(name + ".pickle").string()));
  const auto expect = test::fixture_expect(name);
  const Pattern* p = out_of_place(a);
  ASSERT_NE(p, nullptr);
  const auto peak = expect.at("peak_bytes").get<std::uint64_t>();
  const auto in_place = expect.at("in_place_peak_bytes").get<std::uint64_t>();
  EXPECT_EQ(p->saving_bytes, std::optional<std::uint64_t>(peak - in_place));
  EXPECT_EQ(p->verdict, Verdict::Problem);
  EXPECT_EQ(p->confidence, Confidence::High);  // the input is freed from relu's own line
  const std::string site = expect.at("site").get<std::string>();
  EXPECT_EQ(p->sites, std::vector<std::string>{site});
  EXPECT_EQ(p->summary.text(), "relu runs out of place at the peak: " + site + " allocates 2.00 GiB while its input of the same size, from " +
                                   "/home/user/project/train.py:12, is freed right after it, so both copies are live at the peak");
  EXPECT_TRUE(has_evidence(*p, "the same line runs out of place 3 times in the trace"));
  EXPECT_TRUE(has_evidence(*p, "and the peak is 3.25 GiB (24% lower: another moment of the trace is then the highest)"));
  ASSERT_EQ(p->fix.size(), 1u);
  EXPECT_EQ(p->fix.front().id, FixId::InplaceActivation);
  EXPECT_NE(p->fix.front().text().find("F.relu(x, inplace=True), nn.ReLU(inplace=True) or x.relu_()"), std::string::npos);
  // The fix is the first next step, and the headline says what it takes off the peak.
  ASSERT_FALSE(a.next_steps.empty());
  EXPECT_EQ(a.next_steps.front().pattern, PatternId::OutOfPlaceActivation);
  EXPECT_NE(a.headline.find(p->summary.text() + "; in place, the peak is 1.00 GiB (24%) lower."), std::string::npos) << a.headline;
}

// relu's input is read again by a residual add, so both are live by necessity; the add, which
// makes the peak with one of its inputs freed right after it, is no activation.
TEST(OutOfPlaceActivation, NotWhenTheInputIsReadAgainOrThePeakIsNoActivation) {
  const Analysis a = analyze(load_snapshot(test::fixture_path("relu_residual_input_kept.pickle").string()));
  EXPECT_EQ(out_of_place(a), nullptr);
  EXPECT_EQ(a.headline.find("out of place"), std::string::npos) << a.headline;
}

TEST(OutOfPlaceActivation, NotInTrainingScenarios) {
  for (const std::string name : {"healthy_training", "activation_pressure", "inference_no_grad", "cpp_frames", "example"}) {
    const fs::path file = name == "example" ? fs::path(MEMSNAP_DATA_DIR) / "example.pickle" : test::fixture_path(name + ".pickle");
    EXPECT_EQ(out_of_place(analyze(load_snapshot(file.string()))), nullptr) << name;
  }
}

// HugePandaCoder's inference2_peso_oct.py: x = conv(x) at line 198, x = F.relu(x) at line 200, ten
// times; each relu writes 6.85 GiB beside the conv output it reads. In place, the peak falls by
// 3.42 GiB to another moment of the loop (checked against a replay of the trace in Python).
TEST(OutOfPlaceActivation, RealInferenceScriptsReluAtLine200) {
  const auto file = fs::path(test::corpus_dir()) / "HugePandaCoder_octree-nca-groupeq_mem_snapshots_inference2_peso_oct.pickle";
  if (!fs::exists(file)) GTEST_SKIP() << "real corpus not found: " << file;
  const Analysis a = analyze(load_snapshot(file.string()));
  const Pattern* p = out_of_place(a);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->saving_bytes, std::optional<std::uint64_t>(3'676'569'600));
  ASSERT_EQ(p->sites.size(), 1u);
  EXPECT_TRUE(p->sites.front().ends_with("inference2_peso_oct.py:200")) << p->sites.front();
  EXPECT_NE(p->summary.text().find("inference2_peso_oct.py:200 allocates 6.85 GiB while its input of the same size, from "), std::string::npos);
  EXPECT_NE(p->summary.text().find("inference2_peso_oct.py:198, is freed right after it"), std::string::npos);
  EXPECT_TRUE(has_evidence(*p, "the same line runs out of place 10 times in the trace"));
  EXPECT_NE(a.headline.find("; in place, the peak is 3.42 GiB (20%) lower."), std::string::npos) << a.headline;
}

}  // namespace inplace_activation_tests
}  // namespace memsnap
