// benchmarks/fma_peak.hpp — the f32 FMA peak of one core, measured: the
// best of 8 to 24 independent FMA chains, at AVX-512 or AVX2 width, several
// timed trials each. An FMA counts as 2 flops. This is the ceiling every
// "% of peak" kiln reports is taken against (scripts/compare-peers through
// compare/fma_peak.cpp, and the GEMM benchmark): no real kernel reaches it,
// since loads, stores and shuffles share the issue ports.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace kiln_bench {

#if defined(__AVX512F__)
/// 16 lanes: _mm512 FMAs.
struct avx512_width {
  using vec = __m512;
  static constexpr int lanes = 16;
  static constexpr const char* name = "avx512";
  static vec splat(float x) { return _mm512_set1_ps(x); }
  static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* to, vec v) { _mm512_storeu_ps(to, v); }
};
#endif
#if defined(__AVX2__) && defined(__FMA__)
/// 8 lanes: _mm256 FMAs.
struct avx2_width {
  using vec = __m256;
  static constexpr int lanes = 8;
  static constexpr const char* name = "avx2+fma";
  static vec splat(float x) { return _mm256_set1_ps(x); }
  static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* to, vec v) { _mm256_storeu_ps(to, v); }
};
#endif

// `iters` rounds of N independent chains acc[i] = acc[i] * a + b; returns a
// value derived from every chain so that none is optimised away.
template <class W, int N>
[[gnu::noinline]] float fma_chains(long iters, float a_in, float b_in) {
  asm volatile("" ::: "memory");  // not a pure function: every call must run
  using vec = typename W::vec;
  const vec a = W::splat(a_in), b = W::splat(b_in);
  vec acc[N];
  for (int i = 0; i < N; ++i) acc[i] = W::splat(static_cast<float>(i) * 1e-3f);
  for (long it = 0; it < iters; ++it) {
    [&]<int... I>(std::integer_sequence<int, I...>) { ((acc[I] = W::fma(acc[I], a, b)), ...); }
    (std::make_integer_sequence<int, N>{});
  }
  float s = 0;
  for (int i = 0; i < N; ++i) {
    float t[W::lanes];
    W::store(t, acc[i]);
    for (float x : t) s += x;
  }
  return s;
}

template <class W, int N>
double fma_chains_gflops(double ms, float& sink) {
  // a < 1 and b small keep every chain finite however long it runs.
  using clock = std::chrono::steady_clock;
  long iters = 1 << 16;
  for (;;) {  // calibrate to about 1/5 of the time per trial
    const auto t0 = clock::now();
    sink += fma_chains<W, N>(iters, 0.999f, 1e-3f);
    if (std::chrono::duration<double, std::milli>(clock::now() - t0).count() > ms / 5) break;
    iters *= 2;
  }
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = clock::now();
    sink += fma_chains<W, N>(iters, 0.999f, 1e-3f);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 2.0 * N * W::lanes * static_cast<double>(iters) / s / 1e9);
  }
  return best;
}

/// The peak at width W, in GFLOP/s, and the number of chains that reached
/// it; about `ms` milliseconds in all.
struct fma_peak {
  double gflops = 0;
  int chains = 0;
  float sink = 0;
};
template <class W>
fma_peak measure_fma_peak(double ms = 200) {
  fma_peak p;
  auto run = [&]<int N>(std::integral_constant<int, N>) {
    const double g = fma_chains_gflops<W, N>(ms / 5, p.sink);
    if (g > p.gflops) p.gflops = g, p.chains = N;
  };
  run(std::integral_constant<int, 8>{});
  run(std::integral_constant<int, 12>{});
  run(std::integral_constant<int, 16>{});
  run(std::integral_constant<int, 20>{});
  run(std::integral_constant<int, 24>{});
  return p;
}

}  // namespace kiln_bench
