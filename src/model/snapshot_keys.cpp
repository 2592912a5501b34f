// The key tables of snapshot_keys.h (PyTorch's names; see ../shared/spec/snapshot-format.md).
#include "model/snapshot_keys.h"

namespace memsnap {
namespace {

constexpr KeyRow<RootKey> kRootKeys[] = {
    {"segments", RootKey::Segments},
    {"device_traces", RootKey::DeviceTraces},
    {"allocator_settings", RootKey::AllocatorSettings},
    {"external_annotations", RootKey::ExternalAnnotations},
    {"host_segments", RootKey::HostSegments},
    {"host_traces", RootKey::HostTraces},
    {"traces", RootKey::Ignored},
};

constexpr KeyRow<SegmentKey> kSegmentKeys[] = {
    {"device", SegmentKey::Device},
    {"address", SegmentKey::Address},
    {"total_size", SegmentKey::TotalSize},
    {"allocated_size", SegmentKey::AllocatedSize},
    {"active_size", SegmentKey::ActiveSize},
    {"requested_size", SegmentKey::RequestedSize},
    {"stream", SegmentKey::Stream},
    {"segment_type", SegmentKey::SegmentType},
    {"is_expandable", SegmentKey::IsExpandable},
    {"frames", SegmentKey::Frames},
    {"blocks", SegmentKey::Blocks},
    {"segment_pool_id", SegmentKey::PoolId},
    {"forward_frames", SegmentKey::ForwardFrames},
};

constexpr KeyRow<BlockKey> kBlockKeys[] = {
    {"address", BlockKey::Address},
    {"size", BlockKey::Size},
    {"requested_size", BlockKey::RequestedSize},
    {"state", BlockKey::State},
    {"frames", BlockKey::Frames},
    {"history", BlockKey::History},
    {"forward_frames", BlockKey::ForwardFrames},
    {"user_metadata", BlockKey::Ignored},
};

constexpr KeyRow<FrameDictKey> kFrameKeys[] = {
    {"filename", FrameDictKey::Filename},
    {"name", FrameDictKey::Name},
    {"line", FrameDictKey::Line},
    {"fx_node_op", FrameDictKey::FxNodeOp},
    {"fx_node_name", FrameDictKey::FxNodeName},
    {"fx_node_target", FrameDictKey::FxNodeTarget},
    {"fx_original_trace", FrameDictKey::FxOriginalTrace},
};

constexpr KeyRow<TraceField> kTraceEntryKeys[] = {
    {"action", TraceField::Action},
    {"addr", TraceField::Addr},
    {"device_free", TraceField::Addr},  // an oom entry's free bytes, in addr
    {"size", TraceField::Size},
    {"stream", TraceField::Stream},
    {"time_us", TraceField::Time},
    {"frames", TraceField::Frames},
    {"compile_context", TraceField::CompileContext},
    {"user_metadata", TraceField::UserMetadata},
    {"internal_metadata", TraceField::InternalMetadata},
    {"pool_id", TraceField::PoolId},
    {"forward_frames", TraceField::ForwardFrames},
    {"category", TraceField::Category},
};

}  // namespace

std::span<const KeyRow<RootKey>> root_keys() { return kRootKeys; }
std::span<const KeyRow<SegmentKey>> segment_keys() { return kSegmentKeys; }
std::span<const KeyRow<BlockKey>> block_keys() { return kBlockKeys; }
std::span<const KeyRow<FrameDictKey>> frame_keys() { return kFrameKeys; }
std::span<const KeyRow<TraceField>> trace_entry_keys() { return kTraceEntryKeys; }

}  // namespace memsnap
