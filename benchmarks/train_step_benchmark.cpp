// Training-step and inference throughput of the Fashion-MNIST MLP
// (784-256-128-10, batch 64, SGD with momentum), in samples/s and GFLOP/s.
// Run: build/benchmarks/kiln_benchmarks
#include <kiln/kiln.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {
using namespace kiln;
using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
constexpr std::size_t B = 64;
// Multiply-adds per sample of one forward pass; a training step is ~3× that.
constexpr double forward_flops = 2.0 * (784 * 256 + 256 * 128 + 128 * 10);

void mlp_train_step(benchmark::State& state) {
  auto p = compile<mlp, batch<B>>(1);
  sgd o{.lr = 0.01f, .momentum = 0.9f};
  sgd::state<float> s(p.parameters().size());
  rng g(2);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform());
  std::vector<std::uint32_t> t(B);
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(10));
  for (auto _ : state) {
    p.forward();
    p.backward(t);
    s.step(o, p.parameters(), p.gradients());
    benchmark::DoNotOptimize(p.parameters().data());
  }
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * B), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations() * B) * 3 * forward_flops / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(mlp_train_step)->MinWarmUpTime(0.2);

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
}  // namespace

BENCHMARK_MAIN();
