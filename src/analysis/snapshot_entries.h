// The trace's `snapshot` entries (an earlier _snapshot() taken while recording; its size is the
// device's active bytes then) as a check on the replay: the layout replayed at that entry must
// hold as many active bytes, give or take what unsplit blocks add. A mismatch is reported as an
// inconsistency (invariants), never an error.
#pragma once

#include <string>
#include <vector>

#include "analysis/timeline.h"
#include "model/snapshot.h"

namespace memsnap {

// Entries checked per device (the first ones in the window).
inline constexpr std::size_t kMaxCheckedSnapshotEntries = 256;

// One line per device whose snapshot entries the replay does not match (the first mismatch and
// how many there were).
std::vector<std::string> snapshot_entry_mismatches(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines);

}  // namespace memsnap
