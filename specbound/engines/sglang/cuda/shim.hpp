// specbound: run a CUDA kernel on the CPU, one (block, thread) after another.
//
// Only for kernels whose threads never wait on or read from each other: no shared
// memory, barriers, warp intrinsics or atomics (specbound.engines.sglang.cuda.source refuses the
// others before anything is compiled).  For such a kernel a sequential run is one of the
// schedules the GPU may pick; the harness runs two (ascending and descending) and
// compares them.
//
// Types are CUDA's: blockIdx/threadIdx are uint3 and blockDim/gridDim dim3 (unsigned int
// fields); int, int64_t, size_t and pointers have the same widths under g++ on x86-64 as
// under nvcc, so the kernel's 32-bit int arithmetic stays 32-bit.  Every loop condition
// of the kernel file is prefixed with SPECBOUND_STEP() (source.bound_loops), which counts
// against a per-thread budget and throws when it is spent: a walk that never ends becomes
// a reported hang instead of a stuck process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

static uint3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

namespace specbound {

struct StepBudgetSpent {
  long long line;
};

static long long steps_left = 0;

// One loop-condition evaluation of the current thread; `line` is the loop's line in the
// kernel file (the file is compiled under a #line directive naming its sglang path).
static inline bool step(long long line) {
  if (--steps_left < 0) throw StepBudgetSpent{line};
  return true;
}

// Runs body() once per (block, thread) of the launch.  hang[0..3] receives (block,
// thread, loop line, budget) of a thread that spent its budget; the return value is 0
// (done), 1 (a thread spent its budget) or 2 (a C++ exception left the kernel).
template <class Body>
int launch(const unsigned* grid, const unsigned* block, int descending, long long budget, long long* hang,
           Body&& body) {
  gridDim = dim3{grid[0], grid[1], grid[2]};
  blockDim = dim3{block[0], block[1], block[2]};
  const unsigned long long blocks = 1ull * grid[0] * grid[1] * grid[2];
  const unsigned long long threads = 1ull * block[0] * block[1] * block[2];
  int rc = 0;
  for (unsigned long long i = 0; i < blocks && rc == 0; ++i) {
    const unsigned long long b = descending ? blocks - 1 - i : i;
    blockIdx = uint3{unsigned(b % grid[0]), unsigned(b / grid[0] % grid[1]), unsigned(b / grid[0] / grid[1])};
    for (unsigned long long k = 0; k < threads && rc == 0; ++k) {
      const unsigned long long t = descending ? threads - 1 - k : k;
      threadIdx = uint3{unsigned(t % block[0]), unsigned(t / block[0] % block[1]), unsigned(t / block[0] / block[1])};
      steps_left = budget;
      try {
        body();
      } catch (const StepBudgetSpent& e) {
        hang[0] = (long long)b;
        hang[1] = (long long)t;
        hang[2] = e.line;
        hang[3] = budget;
        rc = 1;
      } catch (...) {
        rc = 2;
      }
    }
  }
  std::fflush(stdout);  // the kernel's printf output, before the next launch marker
  return rc;
}

}  // namespace specbound

#define SPECBOUND_STEP() ::specbound::step(__LINE__)
