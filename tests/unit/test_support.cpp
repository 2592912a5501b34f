// Shared test helpers.
#include "test_support.h"

#include "model/frame_facts.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include "base/error.h"

namespace memsnap::test {

std::filesystem::path corpus_dir() {
  if (const char* env = std::getenv("MEMSNAP_CORPUS")) return env;
  return MEMSNAP_DEFAULT_CORPUS;
}

std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& in) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  std::vector<std::uint8_t> out(deflateBound(&zs, in.size()) + 32);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::vector<std::uint8_t> zstd(const std::vector<std::uint8_t>& in) {
  std::vector<std::uint8_t> out(ZSTD_compressBound(in.size()));
  out.resize(ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3));
  return out;
}

TempDir::TempDir(const std::string& name)
    : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() { std::filesystem::remove_all(path); }

LoadedSnapshot load_bytes(const std::vector<std::uint8_t>& bytes, std::uint64_t max_events) {
  return load_snapshot_bytes(input_from_memory(bytes), "test", {.max_trace_events = max_events, .split = {}});
}

std::string load_error(const std::vector<std::uint8_t>& bytes) {
  try {
    load_bytes(bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::filesystem::path fixture_path(const std::string& file) { return std::filesystem::path(MEMSNAP_FIXTURE_DIR) / file; }

nlohmann::json fixture_truth(const std::string& name) {
  std::ifstream in(fixture_path(name + ".truth.json"));
  return nlohmann::json::parse(in);
}

nlohmann::json fixture_expect(const std::string& name) { return fixture_truth(name).value("expect", nlohmann::json::object()); }

const Pattern* pattern(const Analysis& a, PatternId id) {
  const auto it = std::find_if(a.patterns.begin(), a.patterns.end(), [&](const Pattern& p) { return p.id == id; });
  return it == a.patterns.end() ? nullptr : &*it;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  const std::filesystem::path dir = MEMSNAP_FIXTURE_DIR;
  if (!std::filesystem::exists(dir)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto path = entry.path();
    if (path.extension() == ".json" && path.stem().extension() == ".truth") names.push_back(path.stem().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

CliRun run_memsnap(const std::string& args, const std::string& cwd) {
  static std::atomic<int> counter{0};
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("memsnap_test_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::string cmd = std::string(MEMSNAP_BINARY) + " " + args + " 2>" + err_path.string();
  if (!cwd.empty()) cmd = "cd '" + cwd + "' && " + cmd;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return r;
}

const char* const kSpecVectorHex =
    "8004957e020000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c0761646472"
    "657373948a0600000000007f8c0a746f74616c5f73697a65944a000040018c0e616c6c6f63617465645f73697a6594"
    "4a000030008c0b6163746976655f73697a65944a000030008c0e7265717565737465645f73697a65944ac0c62d008c"
    "0673747265616d944b008c0c7365676d656e745f74797065948c056c61726765948c0f7365676d656e745f706f6f6c"
    "5f6964944b004b0086948c0d69735f657870616e6461626c6594898c066672616d6573945d947d94288c046e616d65"
    "948c046d61696e948c0866696c656e616d65948c0b2f772f747261696e2e7079948c046c696e65944b0775618c0662"
    "6c6f636b73945d94287d942868058a0600000000007f8c0473697a65944a0000300068094ac0c62d008c0573746174"
    "65948c106163746976655f616c6c6f63617465649468106811757d942868058a0600003000007f681b4a0000100168"
    "094b00681c8c08696e6163746976659468105d94756575618c0d6465766963655f747261636573945d945d947d9428"
    "8c06616374696f6e948c05616c6c6f63948c0461646472948a0600000000007f681b4ac0c62d00680a4b008c077469"
    "6d655f7573948a072c6f5ae97816068c0f636f6d70696c655f636f6e74657874948c034e2f41948c0d757365725f6d"
    "65746164617461948c0094681068117561618c12616c6c6f6361746f725f73657474696e6773947d94288c0e6d6178"
    "5f73706c69745f73697a65944affffffff8c1c676172626167655f636f6c6c656374696f6e5f7468726573686f6c64"
    "94470000000000000000758c1465787465726e616c5f616e6e6f746174696f6e73945d94752e";

Snapshot one_stack(const std::vector<StackFrame>& frames, std::span<const FactRule> rules) {
  Snapshot s;
  s.strings = {""};
  for (const StackFrame& sf : frames) {
    Frame f;
    f.filename = static_cast<StrId>(s.strings.size());
    s.strings.push_back(sf.file);
    f.name = static_cast<StrId>(s.strings.size());
    s.strings.push_back(sf.name);
    f.line = sf.line;
    f.facts = frame_facts(sf.file, sf.name, ~FrameFacts(0), rules);
    s.stack_frames.push_back(static_cast<FrameId>(s.frames.size()));
    s.frames.push_back(f);
  }
  s.stack_offsets.push_back(static_cast<std::uint32_t>(s.stack_frames.size()));
  return s;
}

}  // namespace memsnap::test
