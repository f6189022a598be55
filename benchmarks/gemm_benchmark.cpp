// The GEMMs of the Fashion-MNIST MLP's training step (batch 64) and of the
// CNN's convolutions (one sample), through kiln's kernel and through Eigen's
// (the path kiln used before, and uses where AVX-512 is absent), and with
// bf16 operands, in GFLOP/s.
// This CPU's f32 FMA peak is ≈ 115 GFLOP/s per core (3.6 GHz × 32 FLOP per
// cycle: two 256-bit FMA pipes, AVX-512 double-pumped; see docs/performance.md).
// Run: build/benchmarks/kiln_gemm_benchmarks
#include <kiln/fwd.hpp>

#include <kiln/detail/gemm.hpp>
#include <kiln/random.hpp>

#include <benchmark/benchmark.h>

#include <vector>

namespace {
using kiln::detail::index;

/// C (m×n) = op(A)·op(B) with op(A) m×k, op(B) k×n, as kiln's layers call it.
template <bool TransA, bool TransB, bool Eigen, bool Bf16 = false>
void gemm(benchmark::State& state) {
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
  for (auto _ : state) {
    if constexpr (Eigen) {
      std::fill(c.begin(), c.end(), 0.0f);
      scratch.eigen_run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m);
    } else {
      scratch.run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), m, false);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

// MLP 784-256-128-10 at batch 64. Forward: y = Wᵀx (the weight is stored row-major).
void mlp_forward(benchmark::internal::Benchmark* b) {
  b->Args({256, 64, 784})->Args({128, 64, 256})->Args({10, 64, 128});
}
// Weight gradients: dW = x·dyᵀ.
void mlp_weight_gradient(benchmark::internal::Benchmark* b) {
  b->Args({784, 256, 64})->Args({256, 128, 64})->Args({128, 10, 64});
}
// Input gradients (not for the first layer): dx = W·dy.
void mlp_input_gradient(benchmark::internal::Benchmark* b) { b->Args({256, 64, 128})->Args({128, 64, 10}); }
// The CNN's convolutions, one sample (P positions, F filters, C·K·K taps):
// forward Yᵀ = cols·W (P × F × CKK), and a large square product.
void conv_forward(benchmark::internal::Benchmark* b) {
  b->Args({784, 16, 25})->Args({196, 32, 400})->Args({1024, 1024, 1024});
}
// Weight gradient dW = colsᵀ·Yᵀ (CKK × F × P).
void conv_weight_gradient(benchmark::internal::Benchmark* b) { b->Args({25, 16, 784})->Args({400, 32, 196}); }
// Unfolded input gradient dcols = dYᵀ·Wᵀ (P × CKK × F).
void conv_input_gradient(benchmark::internal::Benchmark* b) { b->Args({196, 400, 32}); }

BENCHMARK(gemm<true, false, false>)->Name("kiln/forward")->Apply(mlp_forward);
BENCHMARK(gemm<true, false, true>)->Name("eigen/forward")->Apply(mlp_forward);
BENCHMARK(gemm<false, true, false>)->Name("kiln/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, true, true>)->Name("eigen/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, false, false>)->Name("kiln/input_gradient")->Apply(mlp_input_gradient);
BENCHMARK(gemm<false, false, true>)->Name("eigen/input_gradient")->Apply(mlp_input_gradient);
// precision<bf16>: operands rounded to bf16 as they are packed, AVX512-BF16 dot products.
BENCHMARK(gemm<true, false, false, true>)->Name("kiln_bf16/forward")->Apply(mlp_forward);
BENCHMARK(gemm<false, true, false, true>)->Name("kiln_bf16/weight_gradient")->Apply(mlp_weight_gradient);
BENCHMARK(gemm<false, false, false, true>)->Name("kiln_bf16/input_gradient")->Apply(mlp_input_gradient);
BENCHMARK(gemm<false, false, false>)->Name("kiln/conv_forward")->Apply(conv_forward);
BENCHMARK(gemm<false, false, true>)->Name("eigen/conv_forward")->Apply(conv_forward);
BENCHMARK(gemm<true, false, false>)->Name("kiln/conv_weight_gradient")->Apply(conv_weight_gradient);
BENCHMARK(gemm<true, false, true>)->Name("eigen/conv_weight_gradient")->Apply(conv_weight_gradient);
BENCHMARK(gemm<false, true, false>)->Name("kiln/conv_input_gradient")->Apply(conv_input_gradient);
BENCHMARK(gemm<false, true, true>)->Name("eigen/conv_input_gradient")->Apply(conv_input_gradient);
}  // namespace

BENCHMARK_MAIN();
