// The keys memsnap reads in a snapshot, one table per object: the root dict, a segment, a block, a
// frame and a trace entry. A key in no table is tolerated and counted ("segment.foo" in
// tolerated.unknown_keys; a frame's are not counted). A key PyTorch adds that memsnap ignores is
// one row (field Ignored); a key memsnap reads is one row plus its case in the builder (and, for
// a trace entry, in TraceFields and the reader's typed fast path).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "read/pickle_reader.h"

namespace memsnap {

enum class RootKey : std::uint8_t {
  Segments, DeviceTraces, AllocatorSettings, ExternalAnnotations, HostSegments, HostTraces, Ignored, Unknown
};
enum class SegmentKey : std::uint8_t {
  Device, Address, TotalSize, AllocatedSize, ActiveSize, RequestedSize, Stream, SegmentType, IsExpandable, Frames,
  Blocks, PoolId, ForwardFrames, Unknown
};
enum class BlockKey : std::uint8_t { Address, Size, RequestedSize, State, Frames, History, ForwardFrames, Ignored, Unknown };
enum class FrameDictKey : std::uint8_t { Filename, Name, Line, FxNodeOp, FxNodeName, FxNodeTarget, FxOriginalTrace, Unknown };

template <typename Field>
struct KeyRow {
  std::string_view key;
  Field field;
};

std::span<const KeyRow<RootKey>> root_keys();
std::span<const KeyRow<SegmentKey>> segment_keys();
std::span<const KeyRow<BlockKey>> block_keys();
std::span<const KeyRow<FrameDictKey>> frame_keys();
std::span<const KeyRow<TraceField>> trace_entry_keys();

// The field of `key` in `rows`, or `unknown`.
template <typename Field>
Field field_of(std::span<const KeyRow<Field>> rows, std::string_view key, Field unknown = Field::Unknown) {
  for (const KeyRow<Field>& row : rows) {
    if (row.key == key) return row.field;
  }
  return unknown;
}

}  // namespace memsnap
