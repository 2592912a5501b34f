// Builds the contract's JSON report from an Analysis.
#include "report/json_report.h"

namespace memsnap {
namespace {

nlohmann::ordered_json optional_int(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json input_json(const InputInfo& in) {
  nlohmann::ordered_json j;
  j["path"] = in.path;
  j["format"] = format_name(in.format);
  const char* c = compression_name(in.compression);
  j["compression"] = c ? nlohmann::ordered_json(c) : nlohmann::ordered_json(nullptr);
  j["bytes"] = in.bytes;
  if (in.format == Format::Pickle) j["pickle_protocol"] = in.pickle_protocol;
  return j;
}

nlohmann::ordered_json trace_json(const TraceSummary& t) {
  nlohmann::ordered_json j;
  j["events"] = t.events;
  j["analyzed"] = t.analyzed;
  j["dropped"] = t.dropped;
  auto actions = nlohmann::ordered_json::object();
  for (int i = 0; i < kActionCount; ++i) {
    if (t.actions[i]) actions[action_name(static_cast<Action>(i))] = t.actions[i];
  }
  j["actions"] = actions;
  j["pending_free_requests"] = t.pending_free_requests;
  auto ooms = nlohmann::ordered_json::array();
  for (const auto& o : t.ooms) {
    ooms.push_back({{"device", o.device}, {"size", o.size}, {"device_free", o.device_free}, {"site", nullptr},
                    {"stream", o.stream}, {"time_us", o.time_us}});
  }
  j["oom"] = ooms;
  return j;
}

}  // namespace

nlohmann::ordered_json totals_json(const Totals& t) {
  nlohmann::ordered_json j;
  j["reserved"] = t.reserved;
  j["allocated"] = t.allocated;
  j["pending_free"] = t.pending_free;
  j["inactive"] = t.inactive;
  j["requested"] = t.requested;
  j["segments"] = t.segments;
  j["blocks"] = t.blocks;
  j["largest_inactive_block"] = t.largest_inactive_block;
  j["peak_allocated"] = optional_int(t.peak_allocated);
  j["peak_reserved"] = optional_int(t.peak_reserved);
  return j;
}

nlohmann::ordered_json json_report(const LoadedSnapshot& loaded, const Analysis& a) {
  nlohmann::ordered_json j;
  j["schema"] = kReportSchema;
  j["input"] = input_json(loaded.input);
  j["totals"] = totals_json(a.totals.overall);
  auto devices = nlohmann::ordered_json::array();
  for (const auto& d : a.totals.devices) devices.push_back({{"device", d.device}, {"totals", totals_json(d.totals)}});
  j["devices"] = devices;
  j["trace"] = trace_json(a.trace);
  return j;
}

}  // namespace memsnap
