// run_memsnap(): the analysis mode (one snapshot, a pair, a rank directory), then the renderer
// from kRenderers.
#include "cli/run_memsnap.h"

#include <array>
#include <future>

#include "analysis/conclude.h"
#include "base/phase_timer.h"
#include "query/rank_directory.h"
#include "report/html_report.h"
#include "report/json_report.h"
#include "report/json_writer.h"
#include "report/text_report.h"

namespace memsnap::cli {
namespace {

using Json = nlohmann::ordered_json;

struct Renderer {
  std::string_view format;
  bool needs_json;
  std::string (*render)(const ReportInput& input, const Json* report);
};

constexpr std::array kRenderers = {
    Renderer{"text", false, [](const ReportInput& in, const Json*) { return valid_utf8(text_report(in)); }},  // frame names are the snapshot's bytes
    Renderer{"json", true,
             [](const ReportInput&, const Json* report) { return report->dump(2, ' ', false, Json::error_handler_t::replace) + "\n"; }},
    Renderer{"html", true, [](const ReportInput& in, const Json* report) { return html_page(*report, html_plot_data(in.loaded, in.analysis)); }},
};

const Renderer& renderer(const std::string& format) {
  for (const Renderer& r : kRenderers) {
    if (r.format == format) return r;
  }
  return kRenderers.front();
}

RunOutput render(const RunRequest& request, const ReportInput& input) {
  const Renderer& r = renderer(request.format);
  RunOutput out;
  if (r.needs_json || request.want_json) {
    PhaseTimer timer("report json");
    out.report = json_report(input);
  }
  PhaseTimer timer("render");
  out.text = r.render(input, out.report ? &*out.report : nullptr);
  return out;
}

}  // namespace

bool known_format(const std::string& format) {
  for (const Renderer& r : kRenderers) {
    if (r.format == format) return true;
  }
  return false;
}

RunOutput run_memsnap(const RunRequest& request) {
  if (request.path_is_directory) {
    // One snapshot per rank, analyzed in parallel; the body of the report is the rank with the
    // highest peak, the comparison goes into its own sections.
    RankDirectory dir = analyze_rank_directory(request.path, request.load, request.options);
    conclude_ranks(dir.ranks, dir.body);
    return render(request, {dir.body_loaded, dir.body, nullptr, &dir.ranks});
  }
  if (!request.diff_path.empty()) {
    // PATH (earlier) and LATER load in parallel; the report describes LATER plus the diff.
    auto earlier = std::async(std::launch::async, [&] {
      auto l = load_snapshot(request.path, request.load);
      auto a = analyze(l, request.options);
      return std::make_pair(std::move(l), std::move(a));
    });
    LoadedSnapshot later;
    Analysis analysis;
    try {
      later = load_snapshot(request.diff_path, request.load);
      analysis = analyze(later, request.options);
    } catch (const InputError& e) {
      earlier.wait();
      throw LaterInputError{request.diff_path, e};
    }
    const auto before = earlier.get();
    const DiffReport diff = diff_snapshots(before.first, before.second, later, analysis);
    conclude_diff(diff, analysis);
    return render(request, {later, analysis, &diff, nullptr});
  }
  const LoadedSnapshot loaded = load_snapshot(request.path, request.load);
  const Analysis analysis = analyze(loaded, request.options);
  return render(request, {loaded, analysis});
}

}  // namespace memsnap::cli
