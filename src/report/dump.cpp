// JSON Lines writers for `memsnap dump`.
#include "report/dump.h"

#include <algorithm>
#include <cerrno>
#include <span>
#include <utility>
#include <vector>
#include <fmt/format.h>

#include "report/json_writer.h"

namespace memsnap {
namespace {

class LineWriter {
 public:
  explicit LineWriter(std::FILE* out) : out_(out) {}
  fmt::memory_buffer& buf() { return buf_; }
  void end_line() {
    buf_.push_back('\n');
    if (buf_.size() > (1 << 20)) flush();
  }
  // Writes what is buffered; after the first failed write the rest is dropped.
  void flush() {
    if (error_ == 0 && std::fwrite(buf_.data(), 1, buf_.size(), out_) != buf_.size()) error_ = errno != 0 ? errno : EIO;
    buf_.clear();
  }
  // Flushes everything down to the file; the errno of the first failure, or 0.
  int finish() {
    flush();
    if (error_ == 0 && std::fflush(out_) != 0) error_ = errno != 0 ? errno : EIO;
    return error_;
  }

 private:
  std::FILE* out_;
  fmt::memory_buffer buf_;
  int error_ = 0;
};

// ,"key":"text" for each non-empty text.
void append_texts(fmt::memory_buffer& b, const Snapshot& s, std::span<const std::pair<const char*, StrId>> texts) {
  for (const auto& [key, id] : texts) {
    if (id == 0) continue;
    fmt::format_to(std::back_inserter(b), ",\"{}\":", key);
    append_json_string(b, s.str(id));
  }
}

// An FX frame's keys (augment_with_fx_traces=True); fx_original_trace as the id of its stack.
void append_fx_keys(fmt::memory_buffer& b, const Snapshot& s, const FxFrame& fx) {
  const std::pair<const char*, StrId> texts[] = {
      {"fx_node_op", fx.node_op}, {"fx_node_name", fx.node_name}, {"fx_node_target", fx.node_target}};
  append_texts(b, s, texts);
  if (fx.original != kNoStack) fmt::format_to(std::back_inserter(b), ",\"fx_original_stack\":{}", fx.original);
}

void append_frames(fmt::memory_buffer& b, const Snapshot& s, StackId stack) {
  b.push_back('[');
  const FrameId* f = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    if (i) b.push_back(',');
    const Frame& fr = s.frames[f[i]];
    fmt::format_to(std::back_inserter(b), "{{\"filename\":");
    append_json_string(b, s.str(fr.filename));
    fmt::format_to(std::back_inserter(b), ",\"line\":{},\"name\":", fr.line);
    append_json_string(b, s.str(fr.name));
    if (const FxFrame* fx = s.fx_frames.empty() ? nullptr : s.fx_frame(f[i])) append_fx_keys(b, s, *fx);
    b.push_back('}');
  }
  b.push_back(']');
}

// The tag of an allocation's stack (compiled region, label, annotate text, category), if any.
void append_tag(fmt::memory_buffer& b, const Snapshot& s, StackId stack) {
  if (s.tagged_stacks.empty()) return;
  const AllocationTag& tag = s.tag_of(stack);
  const std::pair<const char*, StrId> texts[] = {
      {"region", tag.region}, {"label", tag.label}, {"annotation", tag.note}, {"category", tag.category}};
  append_texts(b, s, texts);
}

// The 2026 facts of one trace event (pool_id, metadata, compiled region, forward frames).
void append_event_facts(fmt::memory_buffer& b, const Snapshot& s, const EventFacts* f) {
  if (!f) return;
  fmt::format_to(std::back_inserter(b), ",\"pool_id\":[{},{}]", f->pool.first, f->pool.second);
  const std::pair<const char*, StrId> texts[] = {{"user_metadata", f->user_metadata},
                                                  {"compile_context", f->compile_context},
                                                  {"internal_metadata", f->internal_metadata},
                                                  {"category", f->category}};
  append_texts(b, s, texts);
  if (f->forward_stack != kNoStack) fmt::format_to(std::back_inserter(b), ",\"forward_stack\":{}", f->forward_stack);
}

// The forward_frames stack of block `index`, or kNoStack.
StackId block_forward_stack(const Snapshot& s, std::size_t index) {
  const auto& list = s.block_forward_stacks;
  const auto it = std::lower_bound(list.begin(), list.end(), index, [](const auto& p, std::size_t i) { return p.first < i; });
  return it != list.end() && it->first == index ? it->second : kNoStack;
}

void dump_segments(const Snapshot& s, LineWriter& w, const std::vector<Segment>& segments, bool host) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& g = segments[i];
    auto& b = w.buf();
    fmt::format_to(std::back_inserter(b),
                   "{{\"index\":{},\"device\":{},\"address\":{},\"total_size\":{},\"allocated_size\":{},"
                   "\"active_size\":{},\"requested_size\":{},\"stream\":{},\"segment_type\":\"{}\","
                   "\"segment_pool_id\":[{},{}],\"is_expandable\":{},\"blocks\":{},\"frames\":",
                   i, g.device, g.address, g.total_size, g.allocated_size, g.active_size, g.requested_size, g.stream,
                   g.is_large ? "large" : "small", g.pool_id[0], g.pool_id[1], g.is_expandable, g.block_count);
    append_frames(b, s, g.stack);
    if (g.forward_stack != kNoStack) fmt::format_to(std::back_inserter(b), ",\"forward_stack\":{}", g.forward_stack);
    if (host) fmt::format_to(std::back_inserter(b), ",\"host\":true");
    b.push_back('}');
    w.end_line();
  }
}

void dump_blocks(const Snapshot& s, LineWriter& w, const std::vector<Segment>& segments, const std::vector<Block>& blocks, bool host) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& g = segments[i];
    for (std::uint32_t k = 0; k < g.block_count && g.first_block + k < blocks.size(); ++k) {
      const Block& bl = blocks[g.first_block + k];
      auto& b = w.buf();
      fmt::format_to(std::back_inserter(b),
                     "{{\"device\":{},\"segment\":{},\"address\":{},\"size\":{},\"requested_size\":{},"
                     "\"state\":\"{}\",\"stack\":{},\"frames\":",
                     g.device, i, bl.address, bl.size, bl.requested_size, block_state_name(bl.state), bl.stack);
      append_frames(b, s, bl.stack);
      if (const StackId fwd = host ? kNoStack : block_forward_stack(s, g.first_block + k); fwd != kNoStack) {
        fmt::format_to(std::back_inserter(b), ",\"forward_stack\":{}", fwd);
      }
      if (!host) append_tag(b, s, bl.stack);
      if (host) fmt::format_to(std::back_inserter(b), ",\"host\":true");
      b.push_back('}');
      w.end_line();
    }
  }
}

// host_traces entries, after the devices' ("host":true, index in the host list).
void dump_host_trace(const Snapshot& s, LineWriter& w) {
  for (std::size_t i = 0; i < s.host.events.size(); ++i) {
    const TraceEvent& e = s.host.events[i];
    auto& b = w.buf();
    fmt::format_to(std::back_inserter(b), "{{\"host\":true,\"index\":{},\"action\":\"{}\",\"addr\":{},\"size\":{},\"stream\":{}", i,
                   action_name(e.action), e.addr, e.size, s.stream(e));
    if (e.has_time) fmt::format_to(std::back_inserter(b), ",\"time_us\":{}", e.time_us);
    fmt::format_to(std::back_inserter(b), ",\"stack\":{}}}", e.stack);
    w.end_line();
  }
}

void dump_trace(const Snapshot& s, LineWriter& w) {
  for (std::size_t d = 0; d < s.device_traces.size(); ++d) {
    const DeviceTrace& t = s.device_traces[d];
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const TraceEvent& e = t.events[i];
      auto& b = w.buf();
      fmt::format_to(std::back_inserter(b), "{{\"device\":{},\"index\":{},\"action\":\"{}\",\"{}\":{},\"size\":{},\"stream\":{}",
                     d, t.dropped + i, action_name(e.action), e.action == Action::Oom ? "device_free" : "addr", e.addr,
                     e.size, s.stream(e));
      if (e.has_time) fmt::format_to(std::back_inserter(b), ",\"time_us\":{}", e.time_us);
      append_event_facts(b, s, s.facts_of_event(static_cast<std::int64_t>(d), i));
      if (e.action == Action::Alloc) append_tag(b, s, e.stack);
      fmt::format_to(std::back_inserter(b), ",\"stack\":{}}}", e.stack);
      w.end_line();
    }
  }
  dump_host_trace(s, w);
}

void dump_frames(const Snapshot& s, LineWriter& w) {
  for (StackId id = 1; id < s.stack_count(); ++id) {
    auto& b = w.buf();
    fmt::format_to(std::back_inserter(b), "{{\"stack\":{},\"frames\":", id);
    append_frames(b, s, id);
    if (s.forward_attributed_stack(id)) fmt::format_to(std::back_inserter(b), ",\"via_forward_frames\":true");
    if (s.fx_attributed_stack(id)) fmt::format_to(std::back_inserter(b), ",\"via_fx_original_trace\":true");
    append_tag(b, s, id);
    b.push_back('}');
    w.end_line();
  }
}

}  // namespace

std::optional<DumpWhat> parse_dump_what(std::string_view name) {
  if (name == "segments") return DumpWhat::Segments;
  if (name == "blocks") return DumpWhat::Blocks;
  if (name == "trace") return DumpWhat::Trace;
  if (name == "frames") return DumpWhat::Frames;
  if (name == "settings") return DumpWhat::Settings;
  if (name == "annotations") return DumpWhat::Annotations;
  return std::nullopt;
}

int write_dump(const Snapshot& s, DumpWhat what, std::FILE* out) {
  LineWriter w(out);
  switch (what) {
    case DumpWhat::Segments:
      dump_segments(s, w, s.segments, false);
      dump_segments(s, w, s.host.segments, true);
      break;
    case DumpWhat::Blocks:
      dump_blocks(s, w, s.segments, s.blocks, false);
      dump_blocks(s, w, s.host.segments, s.host.blocks, true);
      break;
    case DumpWhat::Trace: dump_trace(s, w); break;
    case DumpWhat::Frames: dump_frames(s, w); break;
    case DumpWhat::Settings:
      if (s.settings.present) {
        w.buf().append(s.settings.json);
        w.end_line();
      }
      break;
    case DumpWhat::Annotations:
      for (const auto& a : s.annotations) {
        w.buf().append(a.json);
        w.end_line();
      }
      break;
  }
  return w.finish();
}

}  // namespace memsnap
