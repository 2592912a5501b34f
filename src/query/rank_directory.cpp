// Reading a directory of per-rank snapshots (rank_directory.h): the file list, the parallel
// load and analysis, and the body rank kept whole.
#include "query/rank_directory.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "analysis/analyze.h"
#include "base/error.h"

namespace memsnap {
namespace {

namespace fs = std::filesystem;

bool snapshot_extension(std::string_view name) {
  const auto same = [](char e, char n) { return e == std::tolower(static_cast<unsigned char>(n)); };
  for (std::string_view ext : {".pickle", ".pkl", ".json", ".gz", ".zst", ".zstd", ".pickle5", ".snapshot"}) {
    if (name.size() >= ext.size() && std::equal(ext.begin(), ext.end(), name.end() - static_cast<std::ptrdiff_t>(ext.size()), same)) {
      return true;
    }
  }
  return false;
}

// The full snapshot and analysis of the rank that would be the body under one metric: the
// highest value, the lowest rank among equals (compare_ranks' choice).
struct BodyCandidate {
  std::optional<std::int64_t> value;
  std::int64_t rank = 0;
  std::size_t file = 0;
  std::shared_ptr<const LoadedSnapshot> loaded;
  std::shared_ptr<const Analysis> analysis;
  bool beats(std::int64_t v, std::int64_t r) const { return !value || v > *value || (v == *value && r < rank); }
};

}  // namespace

std::vector<std::string> rank_files(const std::string& directory) {
  std::vector<std::string> all, snaps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_regular_file(ec)) continue;
    all.push_back(entry.path().string());
    if (snapshot_extension(name)) snaps.push_back(entry.path().string());
  }
  auto& out = snaps.empty() ? all : snaps;
  std::sort(out.begin(), out.end());
  return out;
}

RankDirectory analyze_rank_directory(const std::string& directory, const LoadOptions& load, const AnalyzeOptions& options,
                                     unsigned threads) {
  const auto files = rank_files(directory);
  if (files.empty()) {
    throw InputError("the directory holds no snapshot files", "put one snapshot per rank in it (e.g. rank0.pickle, rank1.pickle)");
  }
  const auto ranks = ranks_of_files(files);  // as compare_ranks() numbers them
  std::vector<std::optional<RankResult>> results(files.size());
  std::vector<std::string> errors(files.size());
  BodyCandidate by_peak, by_allocated;  // the body is chosen by peak when every rank has one
  std::mutex body_mutex;
  // True when rank i is (so far) the body under one of the metrics: then it is kept whole.
  auto keep_if_body = [&](std::size_t i, const std::shared_ptr<const LoadedSnapshot>& loaded, const std::shared_ptr<const Analysis>& a) {
    const Totals& t = a->totals.overall;
    bool kept = false;
    std::lock_guard lock(body_mutex);
    for (BodyCandidate* c : {&by_peak, &by_allocated}) {
      const bool peak = c == &by_peak;
      if (peak && !t.peak_allocated) continue;
      const std::int64_t v = peak ? *t.peak_allocated : static_cast<std::int64_t>(t.allocated);
      if (!c->beats(v, ranks[i])) continue;
      c->value = v;
      c->rank = ranks[i];
      c->file = i;
      c->loaded = loaded;
      c->analysis = a;
      kept = true;
    }
    return kept;
  };
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < files.size();) {
      try {
        auto loaded = std::make_shared<const LoadedSnapshot>(load_snapshot(files[i], load));
        auto a = std::make_shared<Analysis>(analyze(*loaded, options));
        // A kept body is copied before its bulky parts are dropped; any other rank is moved.
        if (keep_if_body(i, loaded, a)) results[i] = rank_result(files[i], *loaded, *a);
        else results[i] = rank_result(files[i], *loaded, std::move(*a));
      } catch (const std::bad_alloc&) {
        errors[i] = "ran out of memory while reading";
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, files.size()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  RankDirectory out;
  out.ranks = compare_ranks(directory, files, std::move(results), errors);
  BodyCandidate& body = out.ranks.metric == RankMetric::PeakAllocated ? by_peak : by_allocated;
  if (files[body.file] != out.ranks.ranks[out.ranks.body].path) {
    throw InputError("the body rank changed while the directory was read", "run memsnap again");  // cannot happen: same rule
  }
  out.body_loaded = std::move(*std::const_pointer_cast<LoadedSnapshot>(body.loaded));
  out.body = std::move(*std::const_pointer_cast<Analysis>(body.analysis));
  return out;
}

}  // namespace memsnap
