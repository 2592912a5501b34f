// Folded stacks, speedscope and CSV writers over a moment's live set.
#include "report/exporters.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "analysis/frame_filter.h"

namespace memsnap {
namespace {

// Distinct stacks (frame ids, root first, omitted frames left out, at most `depth` innermost)
// with their requested bytes.
std::map<std::vector<FrameId>, std::uint64_t> folded(const Snapshot& s, const MomentView& v, std::size_t depth) {
  std::map<std::vector<FrameId>, std::uint64_t> out;
  for (const LiveAllocation& a : v.live.allocations) {
    std::vector<FrameId> frames;
    const FrameId* f = s.stack_begin(a.stack);
    for (std::size_t i = 0; i < s.stack_size(a.stack) && (depth == 0 || frames.size() < depth); ++i) {
      const Frame& fr = s.frames[f[i]];
      if (!is_omitted_frame(s.str(fr.filename), s.str(fr.name))) frames.push_back(f[i]);
    }
    std::reverse(frames.begin(), frames.end());
    out[frames] += a.requested;
  }
  return out;
}

// A frame's name with the folded format's separators (';', newlines) replaced.
std::string folded_label(const Snapshot& s, FrameId id) {
  const Frame& f = s.frames[id];
  std::string label = fmt::format("{} ({}:{})", s.str(f.name), s.str(f.filename), f.line);
  std::replace(label.begin(), label.end(), ';', ',');
  std::replace(label.begin(), label.end(), '\n', ' ');
  std::replace(label.begin(), label.end(), '\r', ' ');
  return label;
}

constexpr const char* kNoStackLabel = "[no stack recorded]";

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string collapsed_stacks(const Snapshot& s, const MomentView& v, std::size_t depth) {
  std::vector<std::string> lines;
  for (const auto& [frames, bytes] : folded(s, v, depth)) {
    std::string line;
    for (FrameId f : frames) {
      if (!line.empty()) line += ';';
      line += folded_label(s, f);
    }
    if (frames.empty()) line = kNoStackLabel;
    lines.push_back(fmt::format("{} {}\n", line, bytes));
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l;
  return out;
}

std::string speedscope_json(const Snapshot& s, const MomentView& v, std::size_t depth, const std::string& name) {
  std::map<FrameId, std::size_t> frame_index;
  auto frames = nlohmann::ordered_json::array();
  auto index_of = [&](FrameId id) {
    auto [it, inserted] = frame_index.try_emplace(id, frames.size());
    if (inserted) {
      const Frame& f = s.frames[id];
      frames.push_back({{"name", std::string(s.str(f.name))}, {"file", std::string(s.str(f.filename))}, {"line", f.line}});
    }
    return it->second;
  };
  auto samples = nlohmann::ordered_json::array();
  auto weights = nlohmann::ordered_json::array();
  std::uint64_t total = 0;
  for (const auto& [stack, bytes] : folded(s, v, depth)) {
    auto sample = nlohmann::ordered_json::array();
    if (stack.empty()) {
      const std::size_t none = frames.size();
      if (frame_index.find(static_cast<FrameId>(-1)) == frame_index.end()) {
        frame_index[static_cast<FrameId>(-1)] = none;
        frames.push_back({{"name", kNoStackLabel}});
      }
      sample.push_back(frame_index[static_cast<FrameId>(-1)]);
    }
    for (FrameId f : stack) sample.push_back(index_of(f));
    samples.push_back(sample);
    weights.push_back(bytes);
    total += bytes;
  }
  nlohmann::ordered_json profile = {{"type", "sampled"}, {"name", name}, {"unit", "bytes"}, {"startValue", 0},
                                    {"endValue", total}, {"samples", samples}, {"weights", weights}};
  nlohmann::ordered_json j = {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
                              {"shared", {{"frames", frames}}},
                              {"profiles", nlohmann::ordered_json::array({profile})},
                              {"name", name},
                              {"activeProfileIndex", 0},
                              {"exporter", "memsnap"}};
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string groups_csv(const MomentView& v) {
  std::string out = "key,kind,requested,bytes,blocks,percent,what\n";
  for (const LiveGroup& g : v.groups) {
    out += fmt::format("{},{},{},{},{},{:.2f},{}\n", csv_field(g.key), category_name(g.kind), g.requested, g.bytes, g.blocks,
                       g.percent, csv_field(g.what));
  }
  return out;
}

}  // namespace memsnap
