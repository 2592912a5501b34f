// Grouping a live set and summing its layout per pool and stream.
#include "query/live_summary.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <unordered_map>

namespace memsnap {
namespace {

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

std::string group_key(const Snapshot& s, const Site& site, StackId stack, GroupBy by, std::size_t depth) {
  switch (by) {
    case GroupBy::Site: return site.site;
    case GroupBy::Function: return site.no_stack ? site.site : fmt::format("{} ({})", site.function, site.file);
    case GroupBy::File: return site.no_stack ? site.site : site.file;
    case GroupBy::Kind: return category_name(site.category);
    case GroupBy::Stack: {
      const auto frames = stack_frames(s, stack, depth);
      return frames.empty() ? std::string("[no stack recorded]") : join(frames, " <- ");
    }
  }
  return site.site;
}

std::string what_of(const Site& site) {
  return site.no_stack ? site.site : fmt::format("{} ({})", site.site, site.function);
}

}  // namespace

std::vector<LiveGroup> group_live(const Snapshot& s, SiteCache& sites, const std::vector<LiveAllocation>& allocations,
                                  GroupBy by, std::size_t depth) {
  std::vector<LiveGroup> groups;
  std::unordered_map<std::string, std::size_t> index;
  std::vector<std::uint64_t> largest;  // per group, the requested bytes of its largest allocation
  std::uint64_t total = 0;
  for (const LiveAllocation& a : allocations) {
    const Site& site = sites.describe(a.stack);
    auto [it, inserted] = index.try_emplace(group_key(s, site, a.stack, by, depth), groups.size());
    if (inserted) {
      groups.push_back({it->first, 0, 0, 0, 0, site.category, what_of(site), {}, a.stack});
      largest.push_back(0);
    }
    LiveGroup& g = groups[it->second];
    g.requested += a.requested;
    g.bytes += a.size;
    ++g.blocks;
    total += a.requested;
    if (a.requested > largest[it->second]) {
      largest[it->second] = a.requested;
      g.kind = site.category;
      g.what = what_of(site);
      g.example_stack = a.stack;
    }
  }
  for (LiveGroup& g : groups) {
    g.percent = total ? 100.0 * static_cast<double>(g.requested) / static_cast<double>(total) : 0;
    if (by == GroupBy::Stack) {
      g.stack = stack_frames(s, g.example_stack, depth);
      continue;
    }
    const auto& path = sites.describe(g.example_stack).call_path;  // from the site outward
    g.stack.assign(path.begin(), depth && depth < path.size() ? path.begin() + static_cast<std::ptrdiff_t>(depth) : path.end());
  }
  std::sort(groups.begin(), groups.end(), [](const LiveGroup& a, const LiveGroup& b) {
    return a.requested != b.requested ? a.requested > b.requested : a.key < b.key;
  });
  return groups;
}

std::vector<PoolLayout> pool_layouts(const DeviceLayout& layout) {
  std::map<std::pair<bool, std::int64_t>, PoolLayout> pools;  // (small first as false, stream)
  std::uint64_t current = 0;        // start of the segment being walked
  bool current_used = false, started = false;
  PoolLayout* pool = nullptr;
  auto close_segment = [&] {
    if (started && !current_used) ++pool->wholly_free_segments;
  };
  layout.for_each_piece([&](std::uint64_t start, const DeviceLayout::Range& r, std::uint64_t begin, std::uint64_t end,
                            const DeviceLayout::Live* live) {
    if (!started || start != current) {
      close_segment();
      started = true;
      current = start;
      current_used = false;
      pool = &pools[{!r.is_large, r.stream}];
      pool->is_large = r.is_large;
      pool->stream = r.stream;
      ++pool->segments;
      pool->reserved += r.end - start;
    }
    if (live) {
      current_used = true;
      return;
    }
    pool->free += end - begin;
    pool->largest_free_block = std::max(pool->largest_free_block, end - begin);
  });
  close_segment();
  std::vector<PoolLayout> out;
  for (auto& [key, p] : pools) out.push_back(p);
  return out;
}

}  // namespace memsnap
