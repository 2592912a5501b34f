// `memsnap merge REPORT.json... | DIR`: the rank comparison from per-rank JSON reports.
#pragma once

namespace memsnap::cli {

int run_merge(int argc, char** argv);

}  // namespace memsnap::cli
