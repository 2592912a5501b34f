// jemalloc's options for the memsnap executable (linked with MEMSNAP_JEMALLOC, the default; see
// the top-level CMakeLists.txt). jemalloc reads this string at its first allocation; the
// MALLOC_CONF environment variable still overrides it.
//
// thp:always: every extent jemalloc maps is madvised MADV_HUGEPAGE (when the kernel's THP mode is
// `madvise` or `always`), so the analysis' vectors and hash tables fault in 2 MiB at a time. With
// glibc's malloc each large vector is a fresh mmap faulted 4 KiB at a time and unmapped when
// freed, and on a VM a page fault is a trap to the hypervisor: the full report of a 1 GB
// snapshot took hundreds of ms of page faults (bench/README.md §19). Freed memory stays with
// jemalloc for reuse (dirty_decay_ms, 10 s by default), so the stages that free and allocate
// again take no fresh pages. metadata_thp:auto lets its own metadata use huge pages once it is
// large enough to be worth it.

extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface (man jemalloc, "TUNING").
const char* malloc_conf = "thp:always,metadata_thp:auto";
}
