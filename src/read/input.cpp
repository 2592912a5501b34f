// Opening snapshot files: mmap, gzip/zstd decompression bounded by a maximum ratio (all members
// and frames; skippable frames skipped), and format sniffing by content (never by extension),
// with a clear message for screenshots, HTML and checkpoints.
#include "read/input.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <optional>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {
namespace {

constexpr const char* kNeedSnapshot =
    "memsnap needs the snapshot file itself: call torch.cuda.memory._dump_snapshot(\"snap.pickle\") in your run "
    "(`memsnap capture` prints the recipe)";

bool starts_with(std::span<const std::uint8_t> b, std::string_view magic, std::size_t at = 0) {
  return b.size() >= at + magic.size() && std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

bool starts_with_text_ci(std::span<const std::uint8_t> b, std::size_t at, std::string_view text) {
  if (b.size() < at + text.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (std::tolower(b[at + i]) != text[i]) return false;
  }
  return true;
}

std::size_t skip_space(std::span<const std::uint8_t> b) {
  std::size_t i = 0;
  if (starts_with(b, "\xEF\xBB\xBF")) i = 3;  // UTF-8 BOM
  while (i < b.size() && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) ++i;
  return i;
}

// Names what the bytes are when they are not a snapshot; throws. Returns the format otherwise.
Format sniff(std::span<const std::uint8_t> b) {
  if (b.empty()) throw InputError("the file is empty", kRecaptureRemedy);
  if (b[0] == 0x80) {
    if (b.size() >= 2 && (b[1] < 2 || b[1] > 5)) {
      throw InputError(fmt::format("unsupported pickle protocol {} (memsnap reads protocols 2-5)", b[1]), kNeedSnapshot);
    }
    return Format::Pickle;
  }
  const std::size_t t = skip_space(b);
  if (t < b.size() && (b[t] == '{' || b[t] == '[')) return Format::Json;
  if (starts_with(b, "\x89PNG") || starts_with(b, "\xFF\xD8\xFF") || starts_with(b, "GIF8") ||
      (starts_with(b, "RIFF") && starts_with(b, "WEBP", 8))) {
    throw InputError("this is an image (a memory_viz screenshot?), not a memory snapshot", kNeedSnapshot);
  }
  if (starts_with_text_ci(b, t, "<!doctype") || starts_with_text_ci(b, t, "<html") ||
      starts_with_text_ci(b, t, "<svg") || starts_with_text_ci(b, t, "<?xml")) {
    throw InputError("this is an HTML/SVG page (a saved memory_viz view?), not a memory snapshot", kNeedSnapshot);
  }
  if (starts_with(b, "%PDF")) throw InputError("this is a PDF, not a memory snapshot", kNeedSnapshot);
  if (starts_with(b, "PK\x03\x04")) {
    throw InputError("this is a zip archive (a torch.save() checkpoint?), not a memory snapshot", kNeedSnapshot);
  }
  if (b[0] == '(' || b[0] == '}' || b[0] == ']' || b[0] == 'c') {
    throw InputError("this looks like a protocol 0/1 pickle, which memsnap does not read",
                     "write the snapshot with pickle protocol 2 or later (torch.cuda.memory._dump_snapshot() does)");
  }
  throw InputError(fmt::format("unrecognized content (first byte 0x{:02x}): neither a pickle nor JSON", b[0]), kNeedSnapshot);
}

// What a compressed input may expand to: kMaxCompressionRatio times its size (at least
// kMinDecompressedAllowance), never more than kMaxDecompressedBytes or half the machine's memory.
std::uint64_t max_decompressed(std::size_t compressed_bytes) {
  const std::uint64_t by_ratio = std::max<std::uint64_t>(limits::kMinDecompressedAllowance,
                                                         std::uint64_t(compressed_bytes) * limits::kMaxCompressionRatio);
  return std::min<std::uint64_t>({by_ratio, limits::kMaxDecompressedBytes, limits::memory_budget_bytes()});
}

[[noreturn]] void expands_too_far(std::uint64_t limit) {
  throw InputError(fmt::format("the compressed data expands beyond {} MiB (memsnap's limit: {} times the compressed size, "
                               "at least {} MiB, at most {} GiB or half this machine's memory)",
                               limit >> 20, limits::kMaxCompressionRatio, limits::kMinDecompressedAllowance >> 20,
                               limits::kMaxDecompressedBytes >> 30),
                   "if it is a genuine snapshot, decompress it yourself and pass the plain file; otherwise it is a decompression bomb");
}

// The decompressor's output: grows by doubling up to `limit` with realloc (large blocks move by
// mremap, not by copying, and nothing is zero-filled, so memory is touched only as it is written).
// Its first bytes are checked to be a pickle or JSON as soon as they exist, so a bomb of zeros or
// garbage is refused before it is expanded.
class Output {
 public:
  Output(std::uint64_t limit, std::uint64_t first_size) : limit_(limit) {
    grow(std::min(limit, std::max<std::uint64_t>(first_size, 1 << 16)));
  }
  // Room for the decoder to write into; refuses when the limit is reached.
  std::span<std::uint8_t> room() {
    if (produced_ == capacity_) {
      if (capacity_ >= limit_) expands_too_far(limit_);
      grow(std::min<std::uint64_t>(std::uint64_t(capacity_) * 2, limit_));
    }
    return {data_.get() + produced_, std::min<std::size_t>(capacity_ - produced_, 1u << 30)};
  }
  void wrote(std::size_t n) {
    produced_ += n;
    if (!sniffed_ && produced_ >= 64) check_content();
  }
  std::size_t size() const { return produced_; }
  HeapBytes take() && {
    if (!sniffed_ && produced_ > 0) check_content();
    return std::move(data_);
  }

 private:
  void grow(std::uint64_t size) {
    auto* p = static_cast<std::uint8_t*>(std::realloc(data_.get(), static_cast<std::size_t>(size)));
    if (!p) throw std::bad_alloc();
    (void)data_.release();
    data_.reset(p);
    capacity_ = static_cast<std::size_t>(size);
  }
  void check_content() {
    sniffed_ = true;
    (void)sniff({data_.get(), produced_});
  }
  std::uint64_t limit_;
  HeapBytes data_;
  std::size_t capacity_ = 0;
  std::size_t produced_ = 0;
  bool sniffed_ = false;
};

struct Decompressed {
  HeapBytes data;
  std::size_t size = 0;
};

constexpr std::size_t kFirstOutputBytes = 16u << 20;  // a corrupt file fails before much is touched

bool is_gzip(std::span<const std::uint8_t> b) { return starts_with(b, "\x1F\x8B"); }
// A zstd frame, or a skippable frame (magic 0x184D2A50-5F, as pzstd writes first) before one.
bool is_zstd(std::span<const std::uint8_t> b) {
  return starts_with(b, "\x28\xB5\x2F\xFD") || (b.size() >= 4 && (b[0] & 0xF0) == 0x50 && starts_with(b, "\x2A\x4D\x18", 1));
}

// All gzip members in `in` (`cat a.gz b.gz`, bgzip's blocks), concatenated.
Decompressed gunzip(std::span<const std::uint8_t> in) {
  struct Stream {
    z_stream zs{};
    ~Stream() { inflateEnd(&zs); }
  } s;
  if (inflateInit2(&s.zs, 16 + MAX_WBITS) != Z_OK) throw InputError("cannot start the gzip decoder", "try again");
  const std::uint64_t limit = max_decompressed(in.size());
  Output out(limit, std::min<std::uint64_t>(std::uint64_t(in.size()) * 4, kFirstOutputBytes));
  std::size_t consumed = 0;
  while (true) {
    const auto room = out.room();
    const auto in_chunk = static_cast<uInt>(std::min<std::size_t>(in.size() - consumed, 1u << 30));
    s.zs.next_in = const_cast<Bytef*>(in.data() + consumed);
    s.zs.avail_in = in_chunk;
    s.zs.next_out = room.data();
    s.zs.avail_out = static_cast<uInt>(room.size());
    const int rc = inflate(&s.zs, Z_NO_FLUSH);
    out.wrote(room.size() - s.zs.avail_out);
    consumed += in_chunk - s.zs.avail_in;
    if (rc == Z_STREAM_END) {
      // Another member follows: read it too; anything else after the last member is ignored.
      if (!is_gzip(in.subspan(consumed))) break;
      inflateReset(&s.zs);
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) throw InputError("the gzip data is corrupt", kRecaptureRemedy);
    if (rc == Z_BUF_ERROR && consumed == in.size()) throw InputError("the gzip data is truncated", kRecaptureRemedy);
  }
  const std::size_t size = out.size();
  return {std::move(out).take(), size};
}

// The decompressed size the first zstd frame declares, when it declares one.
std::optional<std::uint64_t> zstd_declared_size(std::span<const std::uint8_t> in) {
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR) return std::nullopt;
  return size;
}

// All zstd frames in `in`; skippable frames are skipped.
Decompressed unzstd(std::span<const std::uint8_t> in) {
  struct Stream {
    ZSTD_DStream* ds = ZSTD_createDStream();
    ~Stream() { ZSTD_freeDStream(ds); }
  } s;
  if (!s.ds) throw InputError("cannot start the zstd decoder", "try again");
  const std::uint64_t limit = max_decompressed(in.size());
  const auto declared = zstd_declared_size(in);
  if (declared && *declared > limit) expands_too_far(limit);
  // One more byte than declared, so that a single-frame file needs no growth.
  Output out(limit, declared ? *declared + 1 : std::min<std::uint64_t>(std::uint64_t(in.size()) * 4, kFirstOutputBytes));
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  while (true) {
    const auto room = out.room();
    ZSTD_outBuffer output{room.data(), room.size(), 0};
    const std::size_t last = ZSTD_decompressStream(s.ds, &output, &input);
    out.wrote(output.pos);
    if (ZSTD_isError(last)) {
      throw InputError(fmt::format("the zstd data is corrupt ({})", ZSTD_getErrorName(last)), kRecaptureRemedy);
    }
    if (last == 0 && input.pos == input.size) break;
    if (input.pos == input.size && output.pos < output.size) throw InputError("the zstd data is truncated", kRecaptureRemedy);
  }
  const std::size_t size = out.size();
  return {std::move(out).take(), size};
}

// The compression the bytes start with.
Compression compression_of(std::span<const std::uint8_t> b) {
  if (is_gzip(b)) return Compression::Gzip;
  if (is_zstd(b)) return Compression::Zstd;
  return Compression::None;
}

Decompressed decompress(Compression c, std::span<const std::uint8_t> raw) {
  return c == Compression::Gzip ? gunzip(raw) : unzstd(raw);
}

[[noreturn]] void stream_too_big() {
  throw InputError(fmt::format("the input stream exceeds memsnap's limit of {} MiB (half this machine's memory, at most {} GiB)",
                               std::min(limits::kMaxDecompressedBytes, limits::memory_budget_bytes()) >> 20,
                               limits::kMaxDecompressedBytes >> 30),
                   "save it to a file and pass the file");
}

}  // namespace

const char* format_name(Format f) { return f == Format::Pickle ? "pickle" : "json"; }
const char* compression_name(Compression c) {
  switch (c) {
    case Compression::Gzip: return "gzip";
    case Compression::Zstd: return "zstd";
    case Compression::None: return nullptr;
  }
  return nullptr;
}

InputBytes::InputBytes(InputBytes&& o) noexcept { *this = std::move(o); }
InputBytes& InputBytes::operator=(InputBytes&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    buffer_ = std::move(o.buffer_);
    heap_ = std::move(o.heap_);
    if (!mapped_) data_ = heap_ ? heap_.get() : buffer_.data();
    format = o.format;
    compression = o.compression;
    file_bytes = o.file_bytes;
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_ = false;
  }
  return *this;
}
InputBytes::~InputBytes() { reset(); }
void InputBytes::reset() {
  if (mapped_ && data_) munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
  buffer_.clear();
  heap_.reset();
}

void InputBytes::adopt(HeapBytes heap, std::size_t size) {
  heap_ = std::move(heap);
  data_ = heap_.get();
  size_ = size;
  if (size_ == 0) throw InputError("the compressed file decompresses to nothing", kRecaptureRemedy);
}

InputBytes input_from_memory(std::vector<std::uint8_t> bytes) {
  InputBytes in;
  in.file_bytes = bytes.size();
  std::span<const std::uint8_t> raw(bytes);
  in.compression = compression_of(raw);
  if (in.compression != Compression::None) {
    auto d = decompress(in.compression, raw);
    in.adopt(std::move(d.data), d.size);
  } else {
    in.buffer_ = std::move(bytes);
    in.data_ = in.buffer_.data();
    in.size_ = in.buffer_.size();
  }
  in.format = sniff(in.bytes());
  return in;
}

InputBytes open_input(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw InputError(fmt::format("cannot open the file ({})", std::strerror(err)),
                     err == ENOENT || err == ENAMETOOLONG || err == ELOOP || err == ENOTDIR ? "check the path" : "check the file's permissions");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw InputError("this is a directory, not a snapshot file", "pass a snapshot file, or a directory of per-rank snapshots to `memsnap` itself");
  }
  InputBytes in;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* p = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;  // close() may change it
    ::close(fd);
    if (p == MAP_FAILED) throw InputError(fmt::format("cannot map the file ({})", std::strerror(err)), "check the file is readable");
    madvise(p, static_cast<std::size_t>(st.st_size), MADV_SEQUENTIAL);
    in.data_ = static_cast<const std::uint8_t*>(p);
    in.size_ = static_cast<std::size_t>(st.st_size);
    in.mapped_ = true;
    in.file_bytes = in.size_;
    const auto raw = in.bytes();
    if (const Compression c = compression_of(raw); c != Compression::None) {
      InputBytes out;
      out.compression = c;
      auto d = decompress(c, raw);
      out.adopt(std::move(d.data), d.size);
      out.file_bytes = in.size_;
      out.format = sniff(out.bytes());
      return out;
    }
    in.format = sniff(raw);
    return in;
  }
  // Empty regular files, pipes and other streams: read them whole.
  std::vector<std::uint8_t> data;
  bool sniffed = false;
  std::uint8_t buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw InputError(fmt::format("cannot read the file ({})", std::strerror(errno)), "check the file is readable");
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
    // A stream that is not a snapshot (e.g. /dev/zero) is turned away on its first bytes,
    // before it can fill memory.
    if (!sniffed && data.size() >= 16) {
      sniffed = true;
      if (compression_of(data) == Compression::None) {
        try {
          sniff(data);
        } catch (...) {
          ::close(fd);
          throw;
        }
      }
    }
    if (data.size() > std::min(limits::kMaxDecompressedBytes, limits::memory_budget_bytes())) {
      ::close(fd);
      stream_too_big();
    }
  }
  ::close(fd);
  return input_from_memory(std::move(data));
}

}  // namespace memsnap
