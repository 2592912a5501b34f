// Text report: totals in allocator terms and the trace window.
#include "report/text_report.h"

#include <fmt/format.h>

#include "base/format_bytes.h"

namespace memsnap {
namespace {

void totals_lines(std::string& out, const Totals& t) {
  auto line = [&](const char* label, const std::string& value) { out += fmt::format("  {:<28}{}\n", label, value); };
  line("reserved (segments)", format_bytes(static_cast<std::int64_t>(t.reserved)));
  line("allocated (live tensors)", format_bytes(static_cast<std::int64_t>(t.allocated)));
  line("awaiting free (pending)", format_bytes(static_cast<std::int64_t>(t.pending_free)));
  line("inactive (cached, reusable)", format_bytes(static_cast<std::int64_t>(t.inactive)));
  line("requested by live tensors", fmt::format("{} ({} lost to rounding)", format_bytes(static_cast<std::int64_t>(t.requested)),
                                                format_bytes(static_cast<std::int64_t>(t.allocated) - static_cast<std::int64_t>(t.requested))));
  line("largest inactive block", format_bytes(static_cast<std::int64_t>(t.largest_inactive_block)));
  line("segments / blocks", fmt::format("{} / {}", t.segments, t.blocks));
  line("peak allocated (trace)", t.peak_allocated ? format_bytes(*t.peak_allocated) : "unknown (no trace history)");
  line("peak reserved (trace)", t.peak_reserved ? format_bytes(*t.peak_reserved) : "unknown (no trace history)");
}

}  // namespace

std::string text_report(const LoadedSnapshot& loaded, const Analysis& a) {
  std::string out;
  out += fmt::format("memsnap report for {} ({}, {})\n\n", loaded.input.path, format_name(loaded.input.format),
                     format_bytes(static_cast<std::int64_t>(loaded.input.bytes)));
  out += "Totals\n";
  totals_lines(out, a.totals.overall);
  if (a.totals.devices.size() > 1) {
    for (const auto& d : a.totals.devices) {
      out += fmt::format("\nDevice {}\n", d.device);
      totals_lines(out, d.totals);
    }
  }
  out += fmt::format("\nTrace: {} events, {} analyzed, {} dropped\n", a.trace.events, a.trace.analyzed, a.trace.dropped);
  return out;
}

}  // namespace memsnap
