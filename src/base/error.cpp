// InputError: the single error type for snapshots memsnap cannot analyze.
#include "base/error.h"

namespace memsnap {

InputError::InputError(const std::string& problem, const std::string& remedy)
    : std::runtime_error(problem + "; " + remedy), problem_(problem), remedy_(remedy) {}

}  // namespace memsnap
