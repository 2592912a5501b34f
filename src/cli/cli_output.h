// What every memsnap subcommand shares at its edge: the one-line error, writing the result
// (standard output or -o FILE, checked and atomic), parsing counts and sizes from the command
// line, and the guard that turns any failure into exit status 1.
#pragma once
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"

namespace memsnap::cli {

inline constexpr int kExitInput = 1;
inline constexpr int kExitUsage = 2;

// Prints `memsnap: error: PATH: MESSAGE` on stderr and returns kExitInput.
int input_error(const std::string& path, const std::string& message);

// Makes failed writes visible: a closed pipe (EPIPE) and a file-size limit (EFBIG) come back as
// errors from write() instead of signals. Call once at the start of main.
void prepare_output_signals();

// Writes `text` to standard output (empty path or "-") or to the file `out_path`; every write,
// flush and close is checked. A file is written to a temporary file in the same directory and
// renamed over `out_path` only when complete, so a failure never leaves a truncated report.
// On failure prints the one-line error (with the errno's text) and returns false; a reader that
// closed standard output early (`| head -1`) is not an error and prints nothing.
bool write_output(const std::string& text, const std::string& out_path);

// Reports the errno of a failed write to standard output (0: none): prints the error and returns
// false, quietly true for 0 or when the reader went away (EPIPE).
bool stdout_written(int error);

// When `out_path` names the same file as one of `inputs` (the report would replace the snapshot),
// prints the usage error and returns false.
bool output_is_not_an_input(const std::string& out_path, const std::vector<std::string>& inputs);

// A count option such as --max-trace-events: a decimal integer from 0 to 2^63-1, or nullopt.
std::optional<std::uint64_t> parse_count(const std::string& text);

// Runs `body`, turning every failure into the one-line error and exit status 1.
template <typename Fn>
int guarded(const std::string& path, Fn&& body) {
  try {
    return body();
  } catch (const InputError& e) {
    return input_error(path, e.what());
  } catch (const std::bad_alloc&) {
    return input_error(path, "ran out of memory while analyzing it; retry on a machine with more memory, or with a smaller --max-trace-events");
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::resource_unavailable_try_again || e.code() == std::errc::not_enough_memory) {
      return input_error(path, fmt::format("ran out of memory or threads ({}); retry on a machine with more memory, or with a higher limit", e.what()));
    }
    return input_error(path, fmt::format("internal error ({}); please report it with the file", e.what()));
  } catch (const std::exception& e) {
    return input_error(path, fmt::format("internal error ({}); please report it with the file", e.what()));
  }
}

}  // namespace memsnap::cli
