// What every memsnap subcommand shares at its edge: the one-line error, writing the result
// (standard output or -o FILE), and the guard that turns any failure into exit status 1.
#pragma once
#include <exception>
#include <new>
#include <string>

#include <fmt/format.h>

#include "base/error.h"

namespace memsnap::cli {

inline constexpr int kExitInput = 1;
inline constexpr int kExitUsage = 2;

// Prints `memsnap: error: PATH: MESSAGE` on stderr and returns kExitInput.
int input_error(const std::string& path, const std::string& message);

// Writes `text` to standard output (empty path or "-") or to the file `out_path`; false on failure.
bool write_output(const std::string& text, const std::string& out_path);

// Runs `body`, turning every failure into the one-line error and exit status 1.
template <typename Fn>
int guarded(const std::string& path, Fn&& body) {
  try {
    return body();
  } catch (const InputError& e) {
    return input_error(path, e.what());
  } catch (const std::bad_alloc&) {
    return input_error(path, "ran out of memory while reading; retry with a smaller --max-trace-events or on a machine with more memory");
  } catch (const std::exception& e) {
    return input_error(path, fmt::format("internal error ({}); please report it with the file", e.what()));
  }
}

}  // namespace memsnap::cli
