// The self-contained HTML report: one file holding the JSON report, the plot data (downsampled
// timelines with step, peak and OOM markers, live bytes per top site over time, segment maps)
// and the charting library, CSS and script inlined at build time, so it opens offline.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "analysis/analyze.h"

namespace memsnap {

inline constexpr const char* kHtmlPlotsSchema = "memsnap.html-plots/1";

struct HtmlOptions {
  std::size_t timeline_points = 4000;  // per device: allocated and reserved share these points
  std::size_t stack_points = 1500;     // per device, for the stacked view by site
  std::size_t all_devices_points = 12000;  // with many devices, both budgets shrink to fit this
  std::size_t stack_sites = 8;         // sites drawn in the stacked view (plus "other")
  std::size_t max_steps = 300;         // step markers per device (thinned by annotation name beyond)
  std::size_t max_segments = 600;      // segment rows per map (the largest are kept)
  std::size_t max_blocks = 8000;       // blocks per map before neighbouring blocks are merged
  std::size_t max_oom_maps = 3;        // replayed layouts before the newest OOMs
};

// The page's "plots" object (schema memsnap.html-plots/1): per device the downsampled allocated
// (DeviceTimeline::curve) and reserved curves, markers and per-site stacked series; the segment
// maps at the end and before OOMs; the site names they refer to.
nlohmann::ordered_json html_plot_data(const LoadedSnapshot& loaded, const Analysis& analysis,
                                      const HtmlOptions& options = {});

// The page: the template with {"report": report, "plots": plots} inlined as JSON. `report` is the
// JSON report (optional "diff" and "ranks" sections render when present); `plots` may be null
// when there is no single snapshot to plot (the page then shows the report's sections only).
std::string html_page(const nlohmann::ordered_json& report, const nlohmann::ordered_json& plots);

// html_page(json_report(loaded, analysis), html_plot_data(loaded, analysis, options)).
std::string html_report(const LoadedSnapshot& loaded, const Analysis& analysis, const HtmlOptions& options = {});

// The page template with the library, CSS and script inlined (generated at build time by
// cmake/embed_assets.cmake), and the name and version of the inlined charting library.
std::string_view html_template();
std::string_view html_chart_library();

}  // namespace memsnap
