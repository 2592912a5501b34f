// `memsnap at` and `memsnap blocks`: the live set at a moment, and its individual allocations.
#pragma once

namespace memsnap::cli {

int run_at(int argc, char** argv);
int run_blocks(int argc, char** argv);

}  // namespace memsnap::cli
