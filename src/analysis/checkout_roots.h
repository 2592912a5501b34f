// Two runs of one program from different directories (another clone, another user's home, a
// container's mount): the directory each side's paths start with, found from files whose paths end
// alike, so that a diff pairs their sites (flexgen/pytorch_backend.py:195 under
// /home/u/FlexGen/ and under /home/u/origin_git_Flex/) instead of calling one new and the
// other removed.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "analysis/attribution.h"

namespace memsnap {

// Paths under `before` in the earlier snapshot are under `after` in the later one (both end in '/').
struct RootChange {
  std::string before, after;
  std::size_t files = 0;  // files paired by it
};

// The changes of directory that pair files no path pairs as it is: a file on one side only and one
// on the other side only that end in the same directory and name and hold a site of the same line
// and function. The change that pairs the most files comes first; a directory takes part in one
// change at most (the user's clone and a library's install directory are two changes). Empty when
// no file pairs that way.
std::vector<RootChange> checkout_roots(const std::vector<Site>& before, const std::vector<Site>& after);

// The same from several lists of sites a side (a diff's sites at the end and at the peak: two runs
// are compared peak against peak, and their peaks may hold other files than their ends).
using SiteLists = std::initializer_list<const std::vector<Site>*>;
std::vector<RootChange> checkout_roots(SiteLists before, SiteLists after);

// `sites` with a change's `before` replaced by its `after` where a file's path starts with it.
std::vector<Site> rebased(std::vector<Site> sites, const std::vector<RootChange>& changes);

}  // namespace memsnap
