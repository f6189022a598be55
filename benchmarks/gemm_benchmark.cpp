// The GEMMs of the Fashion-MNIST MLP's training step (batch 64), of the
// CNN's convolutions (one sample) and of the char transformer's
// position-wise layers, through kiln's kernel (AVX-512 where the
// build targets it), kiln's AVX2 kernel (what a CPU without AVX-512 runs;
// compiled here too where the build targets AVX2), Eigen's (kiln's path
// where neither is compiled), and with bf16 operands; in GFLOP/s and as a
// % of this core's FMA peak at the kernel's width, measured first
// (benchmarks/fma_peak.hpp; printed to stderr).
// Run pinned to one core: taskset -c 1 build/benchmarks/kiln_gemm_benchmarks
#include <kiln/fwd.hpp>

#include <kiln/detail/gemm.hpp>
#include <kiln/random.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "fma_peak.hpp"

namespace {
using kiln::detail::index;

/// The FMA peak (GFLOP/s) at AVX-512 and at AVX2 width, measured in main.
double avx512_peak = 0, avx2_peak = 0;

enum class kernel { kiln, eigen, avx2 };

/// C (m×n) = op(A)·op(B) with op(A) m×k, op(B) k×n, as kiln's layers call it.
template <bool TransA, bool TransB, kernel Kernel, bool Bf16 = false>
void gemm(benchmark::State& state) {
  constexpr bool Eigen = Kernel == kernel::eigen;
  const index m = state.range(0), n = state.range(1), k = state.range(2);
  kiln::rng g(1);
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  for (auto& v : a) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : b) v = static_cast<float>(g.uniform(-1, 1));
  kiln::detail::gemm_scratch<float> scratch;
  scratch.use_bf16_operands(Bf16);
  scratch.reserve(m, n, k);
  const index lda = TransA ? k : m, ldb = TransB ? n : k;
#if defined(__AVX2__) && defined(__FMA__)
  struct aligned_free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  const auto packing = [](std::ptrdiff_t floats) {
    return std::unique_ptr<float[], aligned_free>(
        static_cast<float*>(::operator new[](static_cast<std::size_t>(floats) * sizeof(float), std::align_val_t{64})));
  };
  namespace avx2 = kiln::detail::avx2;
  namespace small = kiln::detail::small_gemm;
  const auto pa = packing(std::max(avx2::packed_a_floats(m, k), small::scratch_floats<avx2::small_ops>(m, n, k))),
             pb = packing(avx2::packed_b_floats(n, k));
#endif
  for (auto _ : state) {
    if constexpr (Eigen) {
      std::fill(c.begin(), c.end(), 0.0f);
      scratch.eigen_run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m);
    } else if constexpr (Kernel == kernel::avx2) {
#if defined(__AVX2__) && defined(__FMA__)
      // (as gemm_scratch::run computes f32 products on a CPU without AVX-512)
      if (!small::gemm_if_small<avx2::small_ops, TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m,
                                                                 pa.get(), true))
        avx2::gemm<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m, pa.get(), pb.get(), true);
#endif
    } else {
      scratch.run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m, false);
    }
    benchmark::DoNotOptimize(c.data());
  }
  const double flop = 2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flop / 1e9, benchmark::Counter::kIsRate);
  // (Eigen's kernel and kiln's run at the build's widest width)
  const double peak = Kernel == kernel::avx2 || avx512_peak == 0 ? avx2_peak : avx512_peak;
  if (peak > 0) state.counters["%peak"] = benchmark::Counter(flop / 1e9 / peak * 100, benchmark::Counter::kIsRate);
}

// MLP 784-256-128-10 at batch 64, then at 32 (a replicate<2> replica's
// half of it). Forward: y = Wᵀx (the weight is stored row-major).
void mlp_forward(benchmark::internal::Benchmark* b) {
  b->Args({256, 64, 784})->Args({128, 64, 256})->Args({10, 64, 128});
  b->Args({256, 32, 784})->Args({128, 32, 256})->Args({10, 32, 128});
}
// Weight gradients: dW = x·dyᵀ.
void mlp_weight_gradient(benchmark::internal::Benchmark* b) {
  b->Args({784, 256, 64})->Args({256, 128, 64})->Args({128, 10, 64});
  b->Args({784, 256, 32})->Args({256, 128, 32})->Args({128, 10, 32});
}
// Input gradients (not for the first layer): dx = W·dy.
void mlp_input_gradient(benchmark::internal::Benchmark* b) {
  b->Args({256, 64, 128})->Args({128, 64, 10});
  b->Args({256, 32, 128})->Args({128, 32, 10});
}
// The CNN's convolutions, one sample (P positions, F filters, C·K·K taps):
// forward Yᵀ = cols·W (P × F × CKK), and a large square product.
void conv_forward(benchmark::internal::Benchmark* b) {
  b->Args({784, 16, 25})->Args({196, 32, 400})->Args({1024, 1024, 1024});
}
// Weight gradient dW = colsᵀ·Yᵀ (CKK × F × P).
void conv_weight_gradient(benchmark::internal::Benchmark* b) { b->Args({25, 16, 784})->Args({400, 32, 196}); }
// Unfolded input gradient dcols = dYᵀ·Wᵀ (P × CKK × F).
void conv_input_gradient(benchmark::internal::Benchmark* b) { b->Args({196, 400, 32}); }

// The char transformer's position-wise forward products (y = Wᵀx, the
// weight stored row-major; batch 32 × 64 positions): QKV, the output
// projection, the MLP's up and down projections
void transformer_forward(benchmark::internal::Benchmark* b) {
  b->Args({192, 2048, 64})->Args({64, 2048, 64})->Args({256, 2048, 64})->Args({64, 2048, 256});
}
// Their weight gradients (64 wide, batch 32 × 64 positions): QKV, the
// output projection, the MLP's up and down projections
void transformer_weight_gradient(benchmark::internal::Benchmark* b) {
  b->Args({64, 192, 2048})->Args({64, 64, 2048})->Args({64, 256, 2048})->Args({256, 64, 2048});
}
// and their input gradients
void transformer_input_gradient(benchmark::internal::Benchmark* b) {
  b->Args({64, 2048, 192})->Args({64, 2048, 64})->Args({64, 2048, 256})->Args({256, 2048, 64});
}
// The char transformer's attention, one head of 16 over 64 positions:
// scores S = QᵀK (T × T × 16), the output O = V·P (16 × T × T), and the
// gradient of V, dV = dO·Pᵀ (16 × T × T).
void attention_scores(benchmark::internal::Benchmark* b) { b->Args({64, 64, 16}); }
void attention_output(benchmark::internal::Benchmark* b) { b->Args({16, 64, 64}); }

BENCHMARK(gemm<true, false, kernel::kiln>)->Name("kiln/attention_scores")->Apply(attention_scores);
BENCHMARK(gemm<false, false, kernel::kiln>)->Name("kiln/attention_output")->Apply(attention_output);
BENCHMARK(gemm<false, true, kernel::kiln>)->Name("kiln/attention_value_gradient")->Apply(attention_output);
BENCHMARK(gemm<true, false, kernel::eigen>)->Name("eigen/attention_scores")->Apply(attention_scores);
BENCHMARK(gemm<false, false, kernel::eigen>)->Name("eigen/attention_output")->Apply(attention_output);
BENCHMARK(gemm<false, true, kernel::eigen>)->Name("eigen/attention_value_gradient")->Apply(attention_output);
BENCHMARK(gemm<true, false, kernel::kiln>)->Name("kiln/forward")->Apply(mlp_forward);
BENCHMARK(gemm<true, false, kernel::eigen>)->Name("eigen/forward")->Apply(mlp_forward);
#if defined(__AVX2__) && defined(__FMA__)
BENCHMARK(gemm<true, false, kernel::avx2>)->Name("kiln_avx2/forward")->Apply(mlp_forward);
BENCHMARK(gemm<false, true, kernel::avx2>)->Name("kiln_avx2/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, false, kernel::avx2>)->Name("kiln_avx2/input_gradient")->Apply(mlp_input_gradient);
BENCHMARK(gemm<true, false, kernel::avx2>)->Name("kiln_avx2/transformer_forward")->Apply(transformer_forward);
BENCHMARK(gemm<false, true, kernel::avx2>)->Name("kiln_avx2/transformer_weight_gradient")->Apply(transformer_weight_gradient);
BENCHMARK(gemm<false, false, kernel::avx2>)->Name("kiln_avx2/transformer_input_gradient")->Apply(transformer_input_gradient);
BENCHMARK(gemm<false, false, kernel::avx2>)->Name("kiln_avx2/conv_forward")->Apply(conv_forward);
#endif
BENCHMARK(gemm<false, true, kernel::kiln>)->Name("kiln/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, true, kernel::eigen>)->Name("eigen/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, false, kernel::kiln>)->Name("kiln/input_gradient")->Apply(mlp_input_gradient);
BENCHMARK(gemm<false, false, kernel::eigen>)->Name("eigen/input_gradient")->Apply(mlp_input_gradient);
// precision<bf16>: operands rounded to bf16 as they are packed, AVX512-BF16 dot products.
BENCHMARK(gemm<true, false, kernel::kiln, true>)->Name("kiln_bf16/forward")->Apply(mlp_forward);
BENCHMARK(gemm<false, true, kernel::kiln, true>)->Name("kiln_bf16/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, false, kernel::kiln, true>)->Name("kiln_bf16/input_gradient")->Apply(mlp_input_gradient);
BENCHMARK(gemm<true, false, kernel::kiln>)->Name("kiln/transformer_forward")->Apply(transformer_forward);
BENCHMARK(gemm<true, false, kernel::eigen>)->Name("eigen/transformer_forward")->Apply(transformer_forward);
BENCHMARK(gemm<false, true, kernel::kiln>)->Name("kiln/transformer_weight_gradient")->Apply(transformer_weight_gradient);
BENCHMARK(gemm<false, true, kernel::eigen>)->Name("eigen/transformer_weight_gradient")->Apply(transformer_weight_gradient);
BENCHMARK(gemm<false, false, kernel::kiln>)->Name("kiln/transformer_input_gradient")->Apply(transformer_input_gradient);
BENCHMARK(gemm<false, false, kernel::eigen>)->Name("eigen/transformer_input_gradient")->Apply(transformer_input_gradient);
BENCHMARK(gemm<false, false, kernel::kiln>)->Name("kiln/conv_forward")->Apply(conv_forward);
BENCHMARK(gemm<false, false, kernel::eigen>)->Name("eigen/conv_forward")->Apply(conv_forward);
BENCHMARK(gemm<true, false, kernel::kiln>)->Name("kiln/conv_weight_gradient")->Apply(conv_weight_gradient);
BENCHMARK(gemm<true, false, kernel::eigen>)->Name("eigen/conv_weight_gradient")->Apply(conv_weight_gradient);
BENCHMARK(gemm<false, true, kernel::kiln>)->Name("kiln/conv_input_gradient")->Apply(conv_input_gradient);
BENCHMARK(gemm<false, true, kernel::eigen>)->Name("eigen/conv_input_gradient")->Apply(conv_input_gradient);
}  // namespace

int main(int argc, char** argv) {
#if defined(__AVX512F__)
  const auto wide = kiln_bench::measure_fma_peak<kiln_bench::avx512_width>();
  avx512_peak = wide.gflops;
  std::fprintf(stderr, "FMA peak, AVX-512: %.1f GFLOP/s (%d chains)\n", wide.gflops, wide.chains);
#endif
#if defined(__AVX2__) && defined(__FMA__)
  const auto narrow = kiln_bench::measure_fma_peak<kiln_bench::avx2_width>();
  avx2_peak = narrow.gflops;
  std::fprintf(stderr, "FMA peak, AVX2: %.1f GFLOP/s (%d chains)\n", narrow.gflops, narrow.chains);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
