// Training-step and inference throughput of the Fashion-MNIST MLP
// (784-256-128-10, batch 64, SGD with momentum) and the training step of the
// CNN of BENCHMARKING.md, in samples/s and GFLOP/s, in f32 and with
// precision<bf16>; the latency of predicting 1, 8 or 64 samples with a
// program over the trained program's parameter store.
// Run: build/benchmarks/kiln_benchmarks
#include <kiln/kiln.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {
using namespace kiln;
using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
constexpr std::size_t B = 64;
// FLOPs per sample of one forward pass. A training step adds the weight
// gradients (the same again) and the input gradients of every layer but the
// first (nobody needs the gradient of the data): about 1.0 MFLOP for the MLP.
constexpr double forward_flops = 2.0 * (784 * 256 + 256 * 128 + 128 * 10);
constexpr double train_flops = 2 * forward_flops + (forward_flops - 2.0 * 784 * 256);

/// Training steps (forward, backward, SGD update) of Model at batch B on one core.
template <class Model, class Precision = precision<float>>
void train_steps(benchmark::State& state, double flops_per_sample) {
  auto p = compile<Model, batch<B>, Precision>(1);
  sgd o{.lr = 0.01f, .momentum = 0.9f};
  sgd::state<float> s(p.parameters().size());
  rng g(2);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform());
  std::vector<std::uint32_t> t(B);
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(10));
  for (auto _ : state) {
    kiln::train_step(p, t, o, s);
    benchmark::DoNotOptimize(p.parameters().data());
  }
  const auto samples = static_cast<double>(state.iterations() * B);
  state.counters["samples/s"] = benchmark::Counter(samples, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(samples * flops_per_sample / 1e9, benchmark::Counter::kIsRate);
}

void mlp_train_step(benchmark::State& state) { train_steps<mlp>(state, train_flops); }
BENCHMARK(mlp_train_step)->MinWarmUpTime(0.2);
// precision<bf16>: the same step with bf16 GEMM operands (f32 everything else).
// Run both in one invocation and quote the ratio (docs/precision.md).
void mlp_train_step_bf16(benchmark::State& state) { train_steps<mlp, precision<bf16>>(state, train_flops); }
BENCHMARK(mlp_train_step_bf16)->MinWarmUpTime(0.2);

void mlp_inference(benchmark::State& state) {
  auto p = compile<mlp, batch<B>>(1);
  rng g(2);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform());
  for (auto _ : state) {
    p.forward();
    benchmark::DoNotOptimize(p.output().data());
  }
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * B), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations() * B) * forward_flops / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(mlp_inference)->MinWarmUpTime(0.2);

// The CNN of BENCHMARKING.md: conv 5×5×16 same + relu + pool 2 → conv 5×5×32
// same + relu + pool 2 → dense 10, batch 64, one core.
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, relu, max_pool<2>, conv2d<32, 5, 1, same>, relu,
                  max_pool<2>, flatten, dense<10>>;
constexpr double cnn_forward_flops = 2.0 * (28 * 28 * 16 * 25 + 14 * 14 * 32 * 16 * 25 + 32 * 7 * 7 * 10);
constexpr double cnn_train_flops = 2 * cnn_forward_flops + (cnn_forward_flops - 2.0 * 28 * 28 * 16 * 25);

/// Prediction latency: one forward of a program of batch Bp over a training
/// program's parameter store (eval mode; nothing copied): the time per call
/// is the latency of predicting Bp samples (docs/performance.md).
template <class Model, std::size_t Bp>
void predict(benchmark::State& state) {
  auto train = compile<Model, batch<B>>(1);
  auto p = compile<Model, batch<Bp>>(train.store());
  p.set_training(false);
  rng g(2);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform());
  for (auto _ : state) {
    p.forward();
    benchmark::DoNotOptimize(p.output().data());
  }
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * Bp), benchmark::Counter::kIsRate);
}
BENCHMARK(predict<mlp, 1>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(predict<mlp, 8>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(predict<mlp, 64>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(predict<cnn, 1>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(predict<cnn, 8>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(predict<cnn, 64>)->MinWarmUpTime(0.2)->Unit(benchmark::kMicrosecond);

void cnn_train_step(benchmark::State& state) { train_steps<cnn>(state, cnn_train_flops); }
BENCHMARK(cnn_train_step)->MinWarmUpTime(0.2)->Unit(benchmark::kMillisecond);
void cnn_train_step_bf16(benchmark::State& state) { train_steps<cnn, precision<bf16>>(state, cnn_train_flops); }
BENCHMARK(cnn_train_step_bf16)->MinWarmUpTime(0.2)->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
