// libFuzzer target over the whole pipeline: any bytes through format detection, the readers and
// the model, the analysis, the three renderers (text, JSON, HTML page with its plots), the diff of
// the snapshot with itself, and the exporters at the peak. Only InputError may escape; anything
// else (a crash, a sanitizer report, another exception, a hang, memory past -rss_limit_mb) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/conclude.h"
#include "analysis/diff.h"
#include "base/error.h"
#include "model/load.h"
#include "query/moment_view.h"
#include "report/exporters.h"
#include "report/html_report.h"
#include "report/json_report.h"
#include "report/text_report.h"

namespace {

// What `memsnap FILE --diff FILE` renders, in all three formats.
void render_diff_with_itself(const memsnap::LoadedSnapshot& loaded, const memsnap::Analysis& analysis) {
  memsnap::Analysis later = analysis;
  const memsnap::DiffReport diff = memsnap::diff_snapshots(loaded, analysis, loaded, later);
  memsnap::conclude_diff(diff, later);
  const memsnap::ReportInput input{loaded, later, &diff, nullptr};
  const auto report = memsnap::json_report(input);
  (void)report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  (void)memsnap::html_page(report, memsnap::html_plot_data(loaded, later));
  (void)memsnap::text_report(input);
}

// `memsnap at FILE --peak --export collapsed|speedscope|csv` (the snapshot may have no such moment).
void export_peak(const memsnap::LoadedSnapshot& loaded, const memsnap::Analysis& analysis) {
  memsnap::MomentQuery query;
  query.moment.kind = analysis.timelines.empty() ? memsnap::MomentKind::End : memsnap::MomentKind::Peak;
  const memsnap::MomentView view = memsnap::view_moment(loaded.snapshot, analysis.timelines, query);
  (void)memsnap::collapsed_stacks(loaded.snapshot, view, 0);
  (void)memsnap::speedscope_json(loaded.snapshot, view, 0, "fuzz");
  (void)memsnap::groups_csv(view);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto loaded = memsnap::load_snapshot_bytes(
        memsnap::input_from_memory(std::vector<std::uint8_t>(data, data + size)), "fuzz", {1000});
    const memsnap::Analysis analysis = memsnap::analyze(loaded);
    (void)memsnap::text_report({loaded, analysis});
    const auto report = memsnap::json_report(loaded, analysis);
    (void)report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    (void)memsnap::html_page(report, memsnap::html_plot_data(loaded, analysis));
    render_diff_with_itself(loaded, analysis);
    export_peak(loaded, analysis);
  } catch (const memsnap::InputError&) {
  }
  return 0;
}
