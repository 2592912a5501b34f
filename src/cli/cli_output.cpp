// The one-line error, the checked and atomic report writer, and the count parser shared by
// memsnap's subcommands.
#include "cli/cli_output.h"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace memsnap::cli {
namespace {

// Writes all of `text` to `fd`; the errno of the first failure, or 0.
int write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

bool stdout_failed(int err) {
  if (err == 0 || err == EPIPE) return false;  // EPIPE: the reader has what it wanted
  std::fprintf(stderr, "memsnap: error: standard output: cannot write the output (%s); free space or redirect it elsewhere\n",
               std::strerror(err));
  return true;
}

bool file_failed(const std::string& out_path, const std::string& temp, int err, int fd) {
  if (fd >= 0) ::close(fd);
  if (!temp.empty()) ::unlink(temp.c_str());
  std::fprintf(stderr, "memsnap: error: %s: cannot write the report (%s); check the directory exists, is writable and has space\n",
               out_path.c_str(), std::strerror(err));
  return false;
}

// The mode a newly created file would get: 0666 less the umask.
mode_t new_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

bool write_file_atomically(const std::string& text, const std::string& out_path) {
  const std::filesystem::path target(out_path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string temp = (dir / ("." + target.filename().string() + ".memsnap-XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return file_failed(out_path, "", errno, -1);
  if (::fchmod(fd, new_file_mode()) != 0) return file_failed(out_path, temp, errno, fd);
  if (const int err = write_all(fd, text)) return file_failed(out_path, temp, err, fd);
  if (::fsync(fd) != 0 && errno != EINVAL) return file_failed(out_path, temp, errno, fd);
  if (::close(fd) != 0) return file_failed(out_path, temp, errno, -1);
  if (std::rename(temp.c_str(), out_path.c_str()) != 0) return file_failed(out_path, temp, errno, -1);
  return true;
}

}  // namespace

int input_error(const std::string& path, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "memsnap: error: %s: %s\n", path.c_str(), message.c_str());
  return kExitInput;
}

void prepare_output_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
}

bool write_output(const std::string& text, const std::string& out_path) {
  if (out_path.empty() || out_path == "-") {
    if (std::fflush(stdout) != 0 && stdout_failed(errno)) return false;
    return !stdout_failed(write_all(STDOUT_FILENO, text));
  }
  // A device or a pipe (-o /dev/null, -o /dev/stdout, a FIFO) is written in place: renaming a
  // file over it would replace the device node itself.
  struct stat st{};
  if (::stat(out_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return file_failed(out_path, "", errno, -1);
    if (const int err = write_all(fd, text); err != 0 && err != EPIPE) return file_failed(out_path, "", err, fd);
    return ::close(fd) == 0 || file_failed(out_path, "", errno, -1);
  }
  return write_file_atomically(text, out_path);
}

bool stdout_written(int error) { return !stdout_failed(error); }

bool output_is_not_an_input(const std::string& out_path, const std::vector<std::string>& inputs) {
  if (out_path.empty() || out_path == "-") return true;
  struct stat out {};
  if (::stat(out_path.c_str(), &out) != 0) return true;  // does not exist yet
  for (const auto& input : inputs) {
    struct stat in {};
    if (input.empty() || ::stat(input.c_str(), &in) != 0) continue;
    if (in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
      std::fprintf(stderr, "memsnap: error: -o %s is the input %s; writing the report there would replace the snapshot, choose another file\n",
                   out_path.c_str(), input.c_str());
      return false;
    }
  }
  return true;
}

std::optional<std::uint64_t> parse_count(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value > 0x7FFFFFFFFFFFFFFFull) return std::nullopt;
  return value;
}

}  // namespace memsnap::cli
