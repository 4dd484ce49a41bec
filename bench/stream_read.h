// The stream-read bandwidth every bench divides by, measured one way for all of them so
// their ratios compare: the better of one sequential stream and four interleaved streams
// with an L2 prefetch per thread (how the matvec kernels read weights), best of reps,
// over a buffer on transparent huge pages where the kernel allows them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cbx {
class ThreadPool;
}

namespace cbx::bench {

double wall_seconds();

// Read bandwidth (GB/s) of `bytes` at `buf` (64-byte aligned) with the pool's threads.
// `clock_s` measures time (wall by default; bench kernels can pass its CPU clock).
double stream_read_gbps(ThreadPool& pool, const uint8_t* buf, size_t bytes, int reps,
                        double (*clock_s)() = wall_seconds);
// The same over a freshly allocated and touched buffer of `mb` MiB (freed on return), on
// huge pages where the kernel allows them (the default, like the decode's re-laid-out
// weights) or on plain 4 KB pages (what a malloc'd STREAM-style buffer gets with THP madvise).
double stream_read_gbps(ThreadPool& pool, size_t mb, int reps, bool huge_pages = true);

}  // namespace cbx::bench
