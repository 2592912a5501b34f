// Writers for the live set at a moment: JSON, 80-column text, JSON Lines of allocations.
#include "report/moment_report.h"

#include <cmath>
#include <fmt/format.h>

#include "base/format_bytes.h"

namespace memsnap {
namespace {

const char* moment_kind_name(MomentKind k) {
  switch (k) {
    case MomentKind::End: return "end";
    case MomentKind::Event: return "event";
    case MomentKind::Time: return "time";
    case MomentKind::Step: return "step";
    case MomentKind::Annotation: return "annotation";
    case MomentKind::Peak: return "peak";
    case MomentKind::Oom: return "oom";
  }
  return "end";
}

template <typename T>
nlohmann::ordered_json optional_json(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json moment_info_json(const Moment& m) {
  return {{"kind", moment_kind_name(m.kind)}, {"device", m.device}, {"event_index", m.index}, {"events", m.events},
          {"time_us", optional_json(m.time_us)}, {"replayed", m.timeline != nullptr}, {"description", m.description}};
}

nlohmann::ordered_json filter_json(const MomentQuery& q) {
  const LiveFilter& f = q.filter;
  return {{"stream", optional_json(f.stream)},
          {"pool", f.large ? nlohmann::ordered_json(*f.large ? "large" : "small") : nlohmann::ordered_json(nullptr)},
          {"min_size", f.min_size},
          {"frame", f.frame ? nlohmann::ordered_json(f.frame_text) : nlohmann::ordered_json(nullptr)},
          {"site", f.site.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.site)}};
}

nlohmann::ordered_json group_json(const LiveGroup& g) {
  return {{"key", g.key}, {"requested", g.requested}, {"bytes", g.bytes}, {"blocks", g.blocks},
          {"percent", std::round(g.percent * 100) / 100}, {"kind", category_name(g.kind)}, {"what", g.what},
          {"stack", g.stack}};
}

nlohmann::ordered_json pool_json(const PoolLayout& p) {
  return {{"pool", p.is_large ? "large" : "small"}, {"stream", p.stream}, {"reserved", p.reserved}, {"free", p.free},
          {"largest_free_block", p.largest_free_block}, {"segments", p.segments},
          {"wholly_free_segments", p.wholly_free_segments}};
}

}  // namespace

nlohmann::ordered_json moment_json(const LoadedSnapshot& loaded, const MomentQuery& q, const MomentView& v, std::size_t top) {
  nlohmann::ordered_json j;
  j["schema"] = kAtSchema;
  j["input"] = {{"path", loaded.input.path}, {"bytes", loaded.input.bytes}};
  j["moment"] = moment_info_json(v.live.moment);
  j["filter"] = filter_json(q);
  j["totals"] = {{"requested", v.requested}, {"bytes", v.bytes}, {"blocks", v.live.allocations.size()},
                 {"reserved", v.reserved}, {"device_allocated", v.live.layout.allocated()}};
  auto kinds = nlohmann::ordered_json::array();
  for (const LiveGroup& g : v.kinds) {
    kinds.push_back({{"kind", g.key}, {"requested", g.requested}, {"bytes", g.bytes}, {"blocks", g.blocks},
                     {"percent", std::round(g.percent * 100) / 100}});
  }
  j["by_kind"] = kinds;
  j["group_by"] = group_by_name(q.group_by);
  j["frame_depth"] = q.frame_depth;
  auto groups = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < v.groups.size() && i < top; ++i) groups.push_back(group_json(v.groups[i]));
  j["groups"] = groups;
  j["groups_total"] = v.groups.size();
  auto pools = nlohmann::ordered_json::array();
  for (const PoolLayout& p : v.pools) pools.push_back(pool_json(p));
  j["layout"] = pools;
  return j;
}

std::string moment_text(const LoadedSnapshot& loaded, const MomentQuery& q, const MomentView& v, std::size_t top) {
  const Moment& m = v.live.moment;
  std::string out = fmt::format("memsnap at {}\n", loaded.input.path);
  out += fmt::format("Device {}, {}", m.device, m.description);
  if (m.timeline) out += fmt::format(" (state after {} of {} events", m.index, m.events);
  if (m.timeline && m.time_us) out += fmt::format(", time_us {}", *m.time_us);
  out += m.timeline ? ")\n" : "\n";
  out += fmt::format("Live: {} requested in {} blocks ({} occupied); reserved {}\n", format_bytes(v.requested),
                     v.live.allocations.size(), format_bytes(v.bytes), format_bytes(v.reserved));
  out += "\nBy kind\n";
  for (const LiveGroup& g : v.kinds) {
    out += fmt::format("  {:<16} {:>12} {:>6.1f}%  {} blocks\n", g.key, format_bytes(g.requested), g.percent, g.blocks);
  }
  out += fmt::format("\nBy {} (top {} of {})\n", group_by_name(q.group_by), std::min(top, v.groups.size()), v.groups.size());
  const std::size_t shown = q.frame_depth ? q.frame_depth : 3;
  for (std::size_t i = 0; i < v.groups.size() && i < top; ++i) {
    const LiveGroup& g = v.groups[i];
    out += fmt::format("  {:>12} {:>6.1f}%  {:>5} blocks  {}", format_bytes(g.requested), g.percent, g.blocks, g.key);
    out += q.group_by == GroupBy::Kind ? "\n" : fmt::format("  ({})\n", category_name(g.kind));
    if (q.group_by != GroupBy::Site) out += fmt::format("      what: {}\n", g.what);
    for (std::size_t k = 0; k < g.stack.size() && k < shown && q.group_by != GroupBy::Stack; ++k) {
      out += fmt::format("      at {}\n", g.stack[k]);
    }
  }
  out += "\nLayout\n";
  for (const PoolLayout& p : v.pools) {
    out += fmt::format("  {} pool, stream {}: reserved {}, free {}, largest free block {}, {} segments ({} wholly free)\n",
                       p.is_large ? "large" : "small", p.stream, format_bytes(p.reserved), format_bytes(p.free),
                       format_bytes(p.largest_free_block), p.segments, p.wholly_free_segments);
  }
  if (v.pools.empty()) out += "  no segments reserved\n";
  return out;
}

std::string blocks_jsonl(const Snapshot& s, const MomentQuery& q, const MomentView& v) {
  std::string out;
  SiteCache sites(s);
  for (const LiveAllocation& a : v.live.allocations) {
    const Site& site = sites.describe(a.stack);
    nlohmann::ordered_json j;
    j["device"] = v.live.moment.device;
    j["address"] = a.address;
    j["size"] = a.size;
    j["requested_size"] = a.requested;
    j["stream"] = a.stream;
    j["pool"] = a.is_large ? "large" : "small";
    j["alloc_event"] = optional_json(a.alloc_event);
    j["alloc_time_us"] = optional_json(a.alloc_time_us);
    j["free_event"] = optional_json(a.free_event);
    j["free_time_us"] = optional_json(a.free_time_us);
    j["site"] = site.site;
    j["kind"] = category_name(site.category);
    j["stack"] = stack_frames(s, a.stack, q.frame_depth);
    out += j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

}  // namespace memsnap
