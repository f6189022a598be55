// The machine's f32 FMA peak on one core, measured (benchmarks/fma_peak.hpp:
// 8 to 24 independent FMA chains, AVX-512 when the build targets it, else
// AVX2 + FMA; compiled -march=native like every comparison target), pinned
// to one core; prints the best GFLOP/s as one JSON line, e.g.
//   {"isa":"avx512","lanes":16,"chains":12,"gflops":176.3,"cpu":3}
// This is the ceiling the % of peak in scripts/compare-peers is taken against.
//
//   kiln_compare_fma_peak [--cpu N] [--ms 200]
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../fma_peak.hpp"

namespace {
#if defined(__AVX512F__)
using width = kiln_bench::avx512_width;
#elif defined(__AVX2__) && defined(__FMA__)
using width = kiln_bench::avx2_width;
#else
#error "fma_peak needs AVX-512F or AVX2+FMA (the comparison builds with -march=native)"
#endif
}  // namespace

int main(int argc, char** argv) {
  int cpu = -1;
  double ms = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpu") == 0 && i + 1 < argc) {
      cpu = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      ms = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--cpu N] [--ms 200]\n", argv[0]);
      return 2;
    }
  }
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      std::fprintf(stderr, "%s: cannot pin to cpu %d: %s\n", argv[0], cpu, std::strerror(errno));
      return 1;
    }
  }
  const kiln_bench::fma_peak peak = kiln_bench::measure_fma_peak<width>(ms);
  std::printf("{\"isa\":\"%s\",\"lanes\":%d,\"chains\":%d,\"gflops\":%.1f,\"cpu\":%d,\"sink\":%g}\n", width::name,
              width::lanes, peak.chains, peak.gflops, sched_getcpu(), static_cast<double>(peak.sink));
  return 0;
}
