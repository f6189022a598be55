// The machine's f32 FMA peak on one core, measured: 8 to 24 independent FMA
// chains (AVX-512 when the build targets it, else AVX2 + FMA; compiled
// -march=native like every comparison target), pinned to one core, several
// timed trials each; prints the best GFLOP/s as one JSON line, e.g.
//   {"isa":"avx512","lanes":16,"chains":12,"gflops":176.3,"cpu":3}
// An FMA counts as 2 flops. This is the ceiling the % of peak in
// scripts/compare-peers is taken against: no real kernel reaches it, since
// loads, stores and shuffles share the issue ports.
//
//   kiln_compare_fma_peak [--cpu N] [--ms 200]
#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace {

#if defined(__AVX512F__)
using vec = __m512;
constexpr int kLanes = 16;
constexpr const char* kIsa = "avx512";
inline vec splat(float x) { return _mm512_set1_ps(x); }
inline vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline void store(float* to, vec v) { _mm512_storeu_ps(to, v); }
#elif defined(__AVX2__) && defined(__FMA__)
using vec = __m256;
constexpr int kLanes = 8;
constexpr const char* kIsa = "avx2+fma";
inline vec splat(float x) { return _mm256_set1_ps(x); }
inline vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline void store(float* to, vec v) { _mm256_storeu_ps(to, v); }
#else
#error "fma_peak needs AVX-512F or AVX2+FMA (the comparison builds with -march=native)"
#endif

inline float sum(vec v) {
  float t[kLanes];
  store(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}

// `iters` rounds of N independent chains acc[i] = acc[i] * a + b; returns a
// value derived from every chain so that none is optimised away.
template <int N>
[[gnu::noinline]] float chains(long iters, float a_in, float b_in) {
  asm volatile("" ::: "memory");  // not a pure function: every call must run
  const vec a = splat(a_in), b = splat(b_in);
  vec acc[N];
  for (int i = 0; i < N; ++i) acc[i] = splat(static_cast<float>(i) * 1e-3f);
  for (long it = 0; it < iters; ++it) {
    [&]<int... I>(std::integer_sequence<int, I...>) { ((acc[I] = fma(acc[I], a, b)), ...); }
    (std::make_integer_sequence<int, N>{});
  }
  float s = 0;
  for (int i = 0; i < N; ++i) s += sum(acc[i]);
  return s;
}

template <int N>
double best_gflops(double ms, float& sink) {
  // a < 1 and b small keep every chain finite however long it runs.
  using clock = std::chrono::steady_clock;
  long iters = 1 << 16;
  for (;;) {  // calibrate to about 1/5 of the time per trial
    const auto t0 = clock::now();
    sink += chains<N>(iters, 0.999f, 1e-3f);
    if (std::chrono::duration<double, std::milli>(clock::now() - t0).count() > ms / 5) break;
    iters *= 2;
  }
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = clock::now();
    sink += chains<N>(iters, 0.999f, 1e-3f);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 2.0 * N * kLanes * static_cast<double>(iters) / s / 1e9);
  }
  return best;
}

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
  float sink = 0;
  double best = 0;
  int best_chains = 0;
  auto run = [&]<int N>(std::integral_constant<int, N>) {
    const double g = best_gflops<N>(ms / 5, sink);
    if (g > best) best = g, best_chains = N;
  };
  run(std::integral_constant<int, 8>{});
  run(std::integral_constant<int, 12>{});
  run(std::integral_constant<int, 16>{});
  run(std::integral_constant<int, 20>{});
  run(std::integral_constant<int, 24>{});
  std::printf("{\"isa\":\"%s\",\"lanes\":%d,\"chains\":%d,\"gflops\":%.1f,\"cpu\":%d,\"sink\":%g}\n", kIsa, kLanes,
              best_chains, best, sched_getcpu(), static_cast<double>(sink));
  return 0;
}
