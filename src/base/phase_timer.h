// PhaseTimer: with MEMSNAP_PROFILE=1 in the environment, prints how long each named stage took
// to stderr ("memsnap: profile: read 212.4 ms"), for benchmarks and profiling. Otherwise free.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace memsnap {

inline bool profiling_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MEMSNAP_PROFILE");
    return v && *v && *v != '0';
  }();
  return enabled;
}

class PhaseTimer {
 public:
  explicit PhaseTimer(const char* name) : name_(name) {
    if (profiling_enabled()) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (!profiling_enabled()) return;
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start_;
    std::fprintf(stderr, "memsnap: profile: %s %.1f ms\n", name_, took.count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace memsnap
