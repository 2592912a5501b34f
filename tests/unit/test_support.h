// Helpers shared by the unit tests: loading bytes, catching the error message, paths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/finding.h"
#include "model/frame_facts.h"
#include "model/load.h"

namespace memsnap::test {

LoadedSnapshot load_bytes(const std::vector<std::uint8_t>& bytes, std::uint64_t max_events = 1'000'000);
// The InputError message loading `bytes` throws; "" when it loads.
std::string load_error(const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> read_file(const std::string& path);
std::vector<std::uint8_t> from_hex(const std::string& hex);

// The real corpus (MEMSNAP_CORPUS, else ../shared/corpus/real); absent from a user's clone.
std::filesystem::path corpus_dir();

// Names of the generated single-snapshot fixtures (NAME.truth.json in MEMSNAP_FIXTURE_DIR), sorted.
std::vector<std::string> fixture_names();
// A file of the generated fixtures ("NAME.pickle", "NAME.truth.json", ...).
std::filesystem::path fixture_path(const std::string& file);
// The generator's truth for fixture NAME (NAME.truth.json), and the "expect" object in it (empty
// when the scenario sets none).
nlohmann::json fixture_truth(const std::string& name);
nlohmann::json fixture_expect(const std::string& name);

// The report's finding of this pattern, or null.
const Pattern* pattern(const Analysis& a, PatternId id);

// The memsnap binary run with `args` (a shell command line); `cwd` empty = the current folder.
struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};
CliRun run_memsnap(const std::string& args, const std::string& cwd = "");

// gzip (level 9) and zstd (level 3) compression of `in`, for inputs the tests compress.
std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& in);
std::vector<std::uint8_t> zstd(const std::vector<std::uint8_t>& in);

// A fresh temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name);
  ~TempDir();
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A snapshot holding one stack (stack 1) of these frames, innermost first, each with its frame facts.
struct StackFrame {
  std::string file, name;
  std::int64_t line = 0;
};
// frames' facts from `rules` (as the builder sets them; the project's rules by default).
Snapshot one_stack(const std::vector<StackFrame>& frames, std::span<const FactRule> rules = frame_fact_rules());

// The spec's 649-byte protocol-4 test vector (snapshot-format.md §9.2).
extern const char* const kSpecVectorHex;

// The prose of typed conclusions, for assertions on their wording.
template <class T>
std::vector<std::string> texts(const std::vector<T>& items) {
  std::vector<std::string> out;
  for (const auto& x : items) out.push_back(x.text());
  return out;
}

}  // namespace memsnap::test

namespace memsnap {
// gtest prints typed conclusions by their names and prose.
template <class E>
  requires requires { EnumNames<E>::names; }
std::ostream& operator<<(std::ostream& os, E value) {
  return os << name_of(value);
}
inline std::ostream& operator<<(std::ostream& os, const Sentence& s) { return os << s.text(); }
inline std::ostream& operator<<(std::ostream& os, const NextStep& s) { return os << s.text(); }
}  // namespace memsnap
