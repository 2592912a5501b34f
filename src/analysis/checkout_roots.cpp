// Pairs the files of two runs that lie in different directories (see the header).
#include "analysis/checkout_roots.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "base/base_name.h"

namespace memsnap {
namespace {

// A shared tail must hold at least the file's directory and its name.
constexpr std::size_t kMinSharedComponents = 2;

// Pairs of same-named files compared at most (a hostile file can name many in many directories).
constexpr std::size_t kMaxComparisons = 1'000'000;

bool is_separator(char c) { return c == '/' || c == '\\'; }

// Where the longest tail of whole path components that `a` and `b` share starts in each, and how
// many components it holds.
struct SharedTail {
  std::size_t a_start = 0, b_start = 0, components = 0;
};

SharedTail shared_tail(std::string_view a, std::string_view b) {
  SharedTail t{a.size(), b.size(), 0};
  std::size_t i = a.size(), j = b.size();
  while (i > 0 && j > 0 && a[i - 1] == b[j - 1]) {
    --i, --j;
    if (is_separator(a[i])) t = {i + 1, j + 1, t.components + 1};
  }
  return t;
}

struct FileSites {
  std::set<std::pair<std::int64_t, std::string>> lines;  // (line, function)
};

std::map<std::string, FileSites> files_of(SiteLists lists) {
  std::map<std::string, FileSites> out;
  for (const std::vector<Site>* sites : lists) {
    for (const Site& s : *sites) {
      if (!s.no_stack && !s.file.empty()) out[s.file].lines.emplace(s.line, s.function);
    }
  }
  return out;
}

bool share_a_line(const FileSites& a, const FileSites& b) {
  for (const auto& line : a.lines) {
    if (b.lines.count(line)) return true;
  }
  return false;
}

}  // namespace

std::vector<RootChange> checkout_roots(const std::vector<Site>& before, const std::vector<Site>& after) {
  return checkout_roots({&before}, {&after});
}

std::vector<RootChange> checkout_roots(SiteLists before, SiteLists after) {
  const auto earlier = files_of(before), later = files_of(after);
  std::map<std::string, std::vector<const std::string*>> later_by_name;  // files on the later side only
  for (const auto& [file, sites] : later) {
    if (!earlier.count(file)) later_by_name[base_name(file)].push_back(&file);
  }
  std::map<std::pair<std::string, std::string>, std::size_t> votes;
  std::size_t compared = 0;
  for (const auto& [b_file, b_sites] : earlier) {
    const auto same_name = later_by_name.find(base_name(b_file));
    if (later.count(b_file) || same_name == later_by_name.end()) continue;
    for (const std::string* a_file : same_name->second) {
      if (++compared > kMaxComparisons) break;
      const SharedTail t = shared_tail(b_file, *a_file);
      if (t.components < kMinSharedComponents || !share_a_line(b_sites, later.at(*a_file))) continue;
      ++votes[{b_file.substr(0, t.a_start), a_file->substr(0, t.b_start)}];
    }
  }
  std::vector<RootChange> ranked;
  for (const auto& [roots, files] : votes) ranked.push_back({roots.first, roots.second, files});
  std::stable_sort(ranked.begin(), ranked.end(), [](const RootChange& x, const RootChange& y) { return x.files > y.files; });
  std::vector<RootChange> out;
  std::set<std::string> taken_before, taken_after;
  for (RootChange& c : ranked) {
    if (!taken_before.insert(c.before).second || !taken_after.insert(c.after).second) continue;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Site> rebased(std::vector<Site> sites, const std::vector<RootChange>& changes) {
  for (Site& s : sites) {
    const RootChange* change = nullptr;
    for (const RootChange& c : changes) {
      if (s.file.rfind(c.before, 0) == 0 && (!change || c.before.size() > change->before.size())) change = &c;
    }
    if (s.no_stack || !change) continue;
    const std::string file = change->after + s.file.substr(change->before.size());
    if (s.site.rfind(s.file, 0) == 0) s.site = file + s.site.substr(s.file.size());
    s.file = file;
  }
  return sites;
}

}  // namespace memsnap
