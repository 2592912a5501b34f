// memsnap's command line: analyze a snapshot, dump its raw contents, or print capture recipes.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <fmt/format.h>
#include <string>

#include "base/error.h"
#include "base/format_bytes.h"
#include "cli/budget_options.h"
#include "cli/cli_output.h"
#include "cli/merge_command.h"
#include "cli/query_commands.h"
#include "cli/run_memsnap.h"
#include "model/load.h"
#include "report/capture.h"
#include "report/dump.h"

namespace {

using memsnap::cli::guarded;
using memsnap::cli::input_error;
using memsnap::cli::kExitInput;
using memsnap::cli::kExitUsage;
using memsnap::cli::write_output;

// --max-trace-events: a count, or a usage error (negative or beyond 2^63-1 are refused, not wrapped).
std::optional<std::uint64_t> max_events_option(const std::string& text) {
  const auto n = memsnap::cli::parse_count(text);
  if (!n) {
    std::fprintf(stderr, "memsnap: error: --max-trace-events %s: not a count; use a whole number from 0 to 9223372036854775807\n",
                 text.c_str());
  }
  return n;
}

int run_dump(int argc, char** argv) {
  CLI::App app{"memsnap dump: write a snapshot's raw contents as JSON Lines", "memsnap dump"};
  std::string path, what, max_events_text = "1000000";
  app.add_option("PATH", path, "snapshot file")->required();
  app.add_option("--what", what, "segments|blocks|trace|frames|settings|annotations")->required()
      ->check(CLI::IsMember({"segments", "blocks", "trace", "frames", "settings", "annotations"}));
  app.add_option("--max-trace-events", max_events_text, "keep only the newest N trace events per device");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  const auto max_events = max_events_option(max_events_text);
  if (!max_events) return kExitUsage;
  return guarded(path, [&] {
    const auto loaded = memsnap::load_snapshot(path, {.max_trace_events = *max_events, .split = {}});
    const int error = memsnap::write_dump(loaded.snapshot, *memsnap::parse_dump_what(what), stdout);
    return memsnap::cli::stdout_written(error) ? 0 : kExitInput;
  });
}

int run_capture(int argc, char** argv) {
  CLI::App app{"memsnap capture: print ready-to-paste snapshot capture recipes", "memsnap capture"};
  bool oom = false, diff = false;
  app.add_flag("--oom", oom, "dump a snapshot automatically when CUDA runs out of memory");
  app.add_flag("--diff", diff, "capture a pair of snapshots to diff with --diff");
  bool distributed = false;
  app.add_flag("--distributed", distributed, "one snapshot per rank (rankN.pickle), and the failing rank's at an OOM");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (distributed) return write_output(memsnap::capture_recipe(memsnap::CaptureKind::Distributed), "") ? 0 : kExitInput;
  const std::string text = memsnap::capture_recipe(oom ? memsnap::CaptureKind::Oom
                                                       : diff ? memsnap::CaptureKind::Diff : memsnap::CaptureKind::Minimal);
  return write_output(text, "") ? 0 : kExitInput;
}

int run_analyze(int argc, char** argv) {
  CLI::App app{"memsnap: analyze a PyTorch CUDA memory snapshot (pickle or JSON, optionally gzip/zstd)\n"
               "  memsnap PATH            analyze one snapshot\n"
               "  memsnap dump PATH --what segments|blocks|trace|frames|settings|annotations\n"
               "  memsnap capture [--oom | --diff | --distributed]",
               "memsnap"};
  std::string path, diff_path, format = "text", out_path, device_used, max_events_text = "1000000";
  int top = 10;
  app.add_option("PATH", path, "snapshot file (pickle or JSON, optionally gzip/zstd) or a directory of per-rank snapshots");
  app.add_option("--diff", diff_path, "a later snapshot of the same run to compare with");
  app.add_option("--max-trace-events", max_events_text, "keep only the newest N trace events per device (default 1000000)");
  app.add_option("--device-used", device_used, "device memory in use seen outside PyTorch, e.g. 81920MiB or 80GiB");
  app.add_option("--format", format, "text|json|html")->check(CLI::IsMember({"text", "json", "html"}));
  app.add_option("-o,--output", out_path, "write the report to FILE instead of standard output");
  app.add_option("--top", top, "number of top allocation sites to list")->check(CLI::Range(1, 1000));
  std::string group_by = "site";
  app.add_option("--group-by", group_by, "rows of the site tables: site (split by compiled region), region (compile_context) or "
                                         "label (user_metadata)")
      ->check(CLI::IsMember({"site", "region", "label"}));
  memsnap::cli::BudgetArgs budgets;
  memsnap::cli::add_budget_options(app, budgets);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (!memsnap::cli::parse_budget_args(budgets)) return kExitUsage;
  if (path.empty()) {
    const std::string text = memsnap::capture_recipe(memsnap::CaptureKind::NoPath);
    std::fwrite(text.data(), 1, text.size(), stderr);
    return kExitUsage;
  }
  std::error_code ec;
  const bool path_is_directory = std::filesystem::is_directory(path, ec);  // errors (loops, long names) surface when it is opened
  if (!diff_path.empty() && path_is_directory) {
    std::fprintf(stderr, "memsnap: error: --diff compares two snapshot files; PATH %s is a directory of ranks\n", path.c_str());
    return kExitUsage;
  }
  if (!device_used.empty() && !memsnap::parse_size(device_used)) {
    std::fprintf(stderr, "memsnap: error: --device-used %s: not a size below 8 EiB; use bytes or a unit such as 81920MiB or 80GiB\n",
                 device_used.c_str());
    return kExitUsage;
  }
  const auto max_events = max_events_option(max_events_text);
  if (!max_events) return kExitUsage;
  if (!memsnap::cli::output_is_not_an_input(out_path, {path, diff_path})) return kExitUsage;
  return guarded(path, [&] {
    memsnap::cli::RunRequest request;
    request.path = path;
    request.diff_path = diff_path;
    request.path_is_directory = path_is_directory;
    request.format = format;
    request.want_json = budgets.active();
    request.options.top = static_cast<std::size_t>(top);
    request.options.group_by = group_by == "region" ? memsnap::SiteGrouping::Region
                               : group_by == "label" ? memsnap::SiteGrouping::Label
                                                     : memsnap::SiteGrouping::Site;
    if (!device_used.empty()) request.options.device_used = memsnap::parse_size(device_used);
    request.load = memsnap::LoadOptions{.max_trace_events = *max_events, .split = {}};
    memsnap::cli::RunOutput out;
    try {
      out = memsnap::cli::run_memsnap(request);
    } catch (const memsnap::cli::LaterInputError& e) {
      return input_error(e.path, e.error.what());
    }
    if (!write_output(out.text, out_path)) return kExitInput;
    return budgets.active() ? memsnap::cli::check_budgets(budgets, *out.report) : 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  memsnap::cli::prepare_output_signals();
  if (argc >= 2 && std::string(argv[1]) == "dump") return run_dump(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "capture") return run_capture(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "at") return memsnap::cli::run_at(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "merge") return memsnap::cli::run_merge(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "blocks") return memsnap::cli::run_blocks(argc - 1, argv + 1);
  return run_analyze(argc, argv);
}
