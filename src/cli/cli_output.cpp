// The one-line error and the report writer shared by memsnap's subcommands.
#include "cli/cli_output.h"

#include <cstdio>

namespace memsnap::cli {

int input_error(const std::string& path, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "memsnap: error: %s: %s\n", path.c_str(), message.c_str());
  return kExitInput;
}

bool write_output(const std::string& text, const std::string& out_path) {
  if (out_path.empty() || out_path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return true;
  }
  std::FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace memsnap::cli
