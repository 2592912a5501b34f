// Argument parsing of the moment queries (`at`, `blocks`): one moment option, the filters, the
// grouping, and the output format; the answer comes from one timeline replay.
#include "cli/query_commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fmt/format.h>
#include <regex>
#include <string>

#include "analysis/timeline.h"
#include "base/format_bytes.h"
#include "cli/cli_output.h"
#include "model/load.h"
#include "report/exporters.h"
#include "report/moment_report.h"

namespace memsnap::cli {
namespace {

struct QueryArgs {
  std::string path, format = "text", out_path, time, annotation, pool, min_size, frame, group_by = "site";
  std::uint64_t max_events = 1'000'000;
  std::optional<std::uint64_t> event, step, oom;
  std::optional<std::int64_t> device, stream;
  bool peak = false;
  std::size_t top = 20;
  std::size_t frame_depth = 0;
};

void add_query_options(CLI::App& app, QueryArgs& a) {
  app.add_option("PATH", a.path, "snapshot file (pickle or JSON, optionally gzip/zstd)")->required();
  auto* moments = app.add_option_group("moment", "the moment to look at (default: the end)");
  moments->add_option("--event", a.event, "the state after kept trace event N (0-based)");
  moments->add_option("--time", a.time, "the state at time T: 1.5s, 200ms or 300us since the first event, or an absolute time_us");
  moments->add_option("--step", a.step, "the state at step boundary K (0-based) of the steps found");
  moments->add_option("--annotation", a.annotation, "the state at annotation NAME, or its i-th occurrence NAME#i (0-based)");
  moments->add_flag("--peak", a.peak, "the state at the device's peak of allocated memory");
  moments->add_option("--oom", a.oom, "the state just before OOM I (0-based, numbered as in the report)");
  moments->require_option(0, 1);
  app.add_option("--device", a.device, "device (default: the OOM's, else the one with the highest peak)");
  app.add_option("--stream", a.stream, "only allocations on this stream");
  app.add_option("--pool", a.pool, "only allocations in this pool")->check(CLI::IsMember({"large", "small"}));
  app.add_option("--min-size", a.min_size, "only allocations of at least SIZE requested bytes, e.g. 1MiB");
  app.add_option("--frame", a.frame, "only allocations with a frame (file:line:function) matching REGEX");
  app.add_option("--frame-depth", a.frame_depth, "frames kept per stack, innermost first (default: all)");
  app.add_option("--max-trace-events", a.max_events, "keep only the newest N trace events per device (default 1000000)");
  app.add_option("-o,--output", a.out_path, "write to FILE instead of standard output");
}

MomentSpec moment_of(const QueryArgs& a) {
  MomentSpec spec;
  auto numbered = [&](MomentKind kind, std::uint64_t number) {
    spec.kind = kind;
    spec.number = number;
  };
  if (a.event) numbered(MomentKind::Event, *a.event);
  else if (a.step) numbered(MomentKind::Step, *a.step);
  else if (a.oom) numbered(MomentKind::Oom, *a.oom);
  else if (a.peak) spec.kind = MomentKind::Peak;
  else if (!a.time.empty()) spec = *parse_time_spec(a.time);
  else if (!a.annotation.empty()) spec = annotation_spec(a.annotation);
  return spec;
}

// The query, or a usage error (printed) for values CLI11 cannot check.
std::optional<MomentQuery> query_of(const QueryArgs& a) {
  auto usage = [](const std::string& message) {
    std::fprintf(stderr, "memsnap: error: %s\n", message.c_str());
    return std::nullopt;
  };
  if (!a.time.empty() && !parse_time_spec(a.time)) {
    return usage(fmt::format("--time {}: not a time; use 1.5s, 200ms, 300us (since the first event) or an absolute time_us", a.time));
  }
  MomentQuery q;
  q.moment = moment_of(a);
  q.device = a.device;
  q.frame_depth = a.frame_depth;
  q.filter.stream = a.stream;
  if (!a.pool.empty()) q.filter.large = a.pool == "large";
  if (!a.min_size.empty()) {
    const auto size = parse_size(a.min_size);
    if (!size) return usage(fmt::format("--min-size {}: not a size; use bytes or a unit such as 512KiB or 1MiB", a.min_size));
    q.filter.min_size = *size;
  }
  if (!a.frame.empty()) {
    try {
      q.filter.frame = std::regex(a.frame, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return usage(fmt::format("--frame {}: not a regular expression ({}); use ECMAScript syntax such as 'model\\.py:4[0-9]'",
                               a.frame, e.what()));
    }
    q.filter.frame_text = a.frame;
  }
  const auto by = parse_group_by(a.group_by);
  q.group_by = by.value_or(GroupBy::Site);
  return q;
}

int parse_failed(CLI::App& app, const CLI::ParseError& e) { return app.exit(e) == 0 ? 0 : kExitUsage; }

int write_or_fail(const std::string& text, const std::string& out_path) {
  if (write_output(text, out_path)) return 0;
  std::fprintf(stderr, "memsnap: error: %s: cannot write the output; check the directory exists and is writable\n", out_path.c_str());
  return kExitInput;
}

// Loads, replays once, and answers `query`.
template <typename Render>
int answer(const QueryArgs& a, const MomentQuery& query, Render&& render) {
  return guarded(a.path, [&] {
    const auto loaded = load_snapshot(a.path, {.max_trace_events = a.max_events, .split = {}});
    const auto timelines = build_timelines(loaded.snapshot);
    const MomentView view = view_moment(loaded.snapshot, timelines, query);
    return write_or_fail(render(loaded, view), a.out_path);
  });
}

}  // namespace

int run_at(int argc, char** argv) {
  CLI::App app{"memsnap at: the live set at one moment (totals, kinds, sites, layout)", "memsnap at"};
  QueryArgs a;
  add_query_options(app, a);
  app.add_option("--group-by", a.group_by, "site|function|file|kind|stack")
      ->check(CLI::IsMember({"site", "function", "file", "kind", "stack"}));
  app.add_option("--top", a.top, "groups to list")->check(CLI::Range(1, 100000));
  app.add_option("--format", a.format, "text|json|collapsed|speedscope|csv")
      ->check(CLI::IsMember({"text", "json", "collapsed", "speedscope", "csv"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failed(app, e);
  }
  const auto query = query_of(a);
  if (!query) return kExitUsage;
  return answer(a, *query, [&](const LoadedSnapshot& loaded, const MomentView& view) {
    const Snapshot& s = loaded.snapshot;
    if (a.format == "json") return moment_json(loaded, *query, view, a.top).dump(2) + "\n";
    if (a.format == "collapsed") return collapsed_stacks(s, view, a.frame_depth);
    if (a.format == "csv") return groups_csv(view);
    if (a.format == "speedscope") {
      return speedscope_json(s, view, a.frame_depth,
                             fmt::format("{}: device {}, {}", loaded.input.path, view.live.moment.device, view.live.moment.description));
    }
    return moment_text(loaded, *query, view, a.top);
  });
}

int run_blocks(int argc, char** argv) {
  CLI::App app{"memsnap blocks: the allocations live at one moment, one JSON object a line", "memsnap blocks"};
  QueryArgs a;
  std::string site;
  add_query_options(app, a);
  app.add_option("--site", site, "only allocations attributed to FILE:LINE (a path suffix is enough)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failed(app, e);
  }
  auto query = query_of(a);
  if (!query) return kExitUsage;
  query->filter.site = site;
  return answer(a, *query, [&](const LoadedSnapshot& loaded, const MomentView& view) {
    return blocks_jsonl(loaded.snapshot, *query, view);
  });
}

}  // namespace memsnap::cli
