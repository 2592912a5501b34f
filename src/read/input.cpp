// Opening snapshot files: mmap, gzip/zstd decompression with a size limit, and format sniffing
// by content (never by extension), with a clear message for screenshots, HTML and checkpoints.
#include "read/input.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
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

std::uint64_t max_decompressed() { return std::min(limits::kMaxDecompressedBytes, limits::memory_budget_bytes()); }

[[noreturn]] void too_big() {
  throw InputError(fmt::format("the decompressed snapshot exceeds memsnap's limit of {} MiB (half this machine's memory, at most 16 GiB)",
                               max_decompressed() >> 20),
                   "decompress it yourself and pass the plain file, or check it is not a decompression bomb");
}

std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> in) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw InputError("cannot start the gzip decoder", "try again");
  std::vector<std::uint8_t> out(std::max<std::size_t>(in.size() * 4, 1 << 16));
  zs.next_in = const_cast<Bytef*>(in.data());
  std::size_t remaining_in = in.size();
  int rc = Z_OK;
  std::size_t produced = 0;
  while (rc != Z_STREAM_END) {
    if (produced == out.size()) {
      if (out.size() >= max_decompressed()) { inflateEnd(&zs); too_big(); }
      out.resize(std::min<std::uint64_t>(out.size() * 2, max_decompressed()));
    }
    const auto in_chunk = static_cast<uInt>(std::min<std::size_t>(remaining_in, 1u << 30));
    zs.avail_in = in_chunk;
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced, 1u << 30));
    const uInt before_out = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += before_out - zs.avail_out;
    remaining_in -= in_chunk - zs.avail_in;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) { inflateEnd(&zs); throw InputError("the gzip data is corrupt", kRecaptureRemedy); }
    if (rc == Z_BUF_ERROR && remaining_in == 0) { inflateEnd(&zs); throw InputError("the gzip data is truncated", kRecaptureRemedy); }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

std::vector<std::uint8_t> unzstd(std::span<const std::uint8_t> in) {
  ZSTD_DStream* ds = ZSTD_createDStream();
  if (!ds) throw InputError("cannot start the zstd decoder", "try again");
  std::vector<std::uint8_t> out(std::max<std::size_t>(in.size() * 4, 1 << 16));
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::size_t produced = 0;
  std::size_t last = 1;
  while (true) {
    if (produced == out.size()) {
      if (out.size() >= max_decompressed()) { ZSTD_freeDStream(ds); too_big(); }
      out.resize(std::min<std::uint64_t>(out.size() * 2, max_decompressed()));
    }
    ZSTD_outBuffer output{out.data() + produced, out.size() - produced, 0};
    last = ZSTD_decompressStream(ds, &output, &input);
    produced += output.pos;
    if (ZSTD_isError(last)) {
      ZSTD_freeDStream(ds);
      throw InputError(fmt::format("the zstd data is corrupt ({})", ZSTD_getErrorName(last)), kRecaptureRemedy);
    }
    if (last == 0 && input.pos == input.size) break;
    if (input.pos == input.size && output.pos < output.size) {
      ZSTD_freeDStream(ds);
      throw InputError("the zstd data is truncated", kRecaptureRemedy);
    }
  }
  ZSTD_freeDStream(ds);
  out.resize(produced);
  return out;
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
    if (!mapped_) data_ = buffer_.data();
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
}

InputBytes input_from_memory(std::vector<std::uint8_t> bytes) {
  InputBytes in;
  in.file_bytes = bytes.size();
  std::span<const std::uint8_t> raw(bytes);
  if (starts_with(raw, "\x1F\x8B")) {
    in.compression = Compression::Gzip;
    in.buffer_ = gunzip(raw);
  } else if (starts_with(raw, "\x28\xB5\x2F\xFD")) {
    in.compression = Compression::Zstd;
    in.buffer_ = unzstd(raw);
  } else {
    in.buffer_ = std::move(bytes);
  }
  in.data_ = in.buffer_.data();
  in.size_ = in.buffer_.size();
  if (in.compression != Compression::None && in.size_ == 0) {
    throw InputError("the compressed file decompresses to nothing", kRecaptureRemedy);
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
    ::close(fd);
    if (p == MAP_FAILED) throw InputError(fmt::format("cannot map the file ({})", std::strerror(errno)), "check the file is readable");
    madvise(p, static_cast<std::size_t>(st.st_size), MADV_SEQUENTIAL);
    in.data_ = static_cast<const std::uint8_t*>(p);
    in.size_ = static_cast<std::size_t>(st.st_size);
    in.mapped_ = true;
    in.file_bytes = in.size_;
    const auto raw = in.bytes();
    if (starts_with(raw, "\x1F\x8B") || starts_with(raw, "\x28\xB5\x2F\xFD")) {
      InputBytes out;
      out.compression = starts_with(raw, "\x1F\x8B") ? Compression::Gzip : Compression::Zstd;
      out.buffer_ = out.compression == Compression::Gzip ? gunzip(raw) : unzstd(raw);
      out.data_ = out.buffer_.data();
      out.size_ = out.buffer_.size();
      out.file_bytes = in.size_;
      if (out.size_ == 0) throw InputError("the compressed file decompresses to nothing", kRecaptureRemedy);
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
      if (!starts_with(data, "\x1F\x8B") && !starts_with(data, "\x28\xB5\x2F\xFD")) {
        try {
          sniff(data);
        } catch (...) {
          ::close(fd);
          throw;
        }
      }
    }
    if (data.size() > max_decompressed()) { ::close(fd); too_big(); }
  }
  ::close(fd);
  return input_from_memory(std::move(data));
}

}  // namespace memsnap
