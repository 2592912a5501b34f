// Argument parsing and output of `memsnap merge`: the same rank comparison as `memsnap DIR`,
// from the per-rank JSON reports alone.
#include "cli/merge_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "analysis/conclude.h"
#include "cli/cli_output.h"
#include "query/merge.h"
#include "report/comparison_report.h"
#include "report/json_report.h"

namespace memsnap::cli {
namespace {

// The body rank's report with the comparison in it, exactly as `memsnap DIR --format json`.
std::string merged_json(MergedRanks& m, std::size_t top) {
  Analysis body;
  body.headline = m.body.value("headline", "");
  const auto steps = m.body.value("next_steps", std::vector<std::string>{});
  const auto kinds = m.body.contains("rank_summary") ? m.body["rank_summary"].value("next_step_kinds", std::vector<std::string>{})
                                                     : std::vector<std::string>{};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto kind = i < kinds.size() ? enum_from_name<NextStepKind>(kinds[i]) : std::nullopt;
    body.next_steps.push_back(NextStep::said(kind.value_or(NextStepKind::LookAtSite), verbatim(steps[i])));
  }
  for (auto& u : m.body.value("uncertainties", std::vector<std::string>{})) body.uncertainties.push_back(verbatim(std::move(u)));
  conclude_ranks(m.ranks, body);
  set_findings_json(m.body, body);
  add_ranks_json(m.body, m.ranks, top);
  return m.body.dump(2) + "\n";
}

}  // namespace

int run_merge(int argc, char** argv) {
  CLI::App app{"memsnap merge: compare ranks from their JSON reports (memsnap rankN.pickle --format json)", "memsnap merge"};
  std::vector<std::string> paths;
  std::string format = "text", out_path;
  std::size_t top = 10;
  app.add_option("REPORTS", paths, "per-rank JSON reports, or a directory holding them")->required();
  app.add_option("--format", format, "text|json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("-o,--output", out_path, "write to FILE instead of standard output");
  app.add_option("--top", top, "top sites per rank in the JSON (as many as `memsnap DIR --top N` lists)")->check(CLI::Range(1, 1000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  return guarded(paths.size() == 1 ? paths.front() : std::string("merge"), [&] {
    MergedRanks merged = merge_reports(report_files(paths));
    const std::string text = format == "json" ? merged_json(merged, top) : ranks_headline(merged.ranks) + "\n" + ranks_text(merged.ranks);
    if (write_output(text, out_path)) return 0;
    std::fprintf(stderr, "memsnap: error: %s: cannot write the output; check the directory exists and is writable\n", out_path.c_str());
    return kExitInput;
  });
}

}  // namespace memsnap::cli
