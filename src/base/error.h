// Errors memsnap reports to users: one line saying what is wrong and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace memsnap {

// An input that cannot be analyzed. `what()` is "what is wrong; what to do" without the path;
// the CLI prefixes "memsnap: error: PATH: ".
class InputError : public std::runtime_error {
 public:
  InputError(const std::string& problem, const std::string& remedy);
  const std::string& problem() const { return problem_; }
  const std::string& remedy() const { return remedy_; }

 private:
  std::string problem_;
  std::string remedy_;
};

// The remedy for a snapshot that is corrupt or cut short.
inline constexpr const char* kRecaptureRemedy =
    "re-capture it with torch.cuda.memory._dump_snapshot() (run `memsnap capture`) and check the copy is complete";

}  // namespace memsnap
