// kiln's vectorised f32 transcendental functions (kiln/detail/vector_math.hpp)
// against what the layers called before: std:: per element, or Eigen's
// array functions (tanh, logistic), over 16,384 values, in ns per value;
// and the training step of examples/char_transformer.cpp's model (batch 32,
// one thread, AdamW), whose GELUs and softmaxes they serve.
// Run (ratios of medians, the pairs interleaved; docs/performance.md):
//   build/benchmarks/kiln_vector_math_benchmarks --benchmark_repetitions=9
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <kiln/kiln.hpp>
#include <kiln/detail/libm_expf.hpp>
#include <kiln/detail/vector_math.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include <Eigen/Core>

namespace {
using namespace kiln;
namespace vm = kiln::detail::vmath;
constexpr std::size_t n = 16384;
using array = Eigen::Array<float, Eigen::Dynamic, 1>;

/// Values spread over [−span, span].
std::vector<float> values(float span) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = span * (2.0f * static_cast<float>((i * 7919) % n) / n - 1.0f);
  return x;
}

template <class F>
void run(benchmark::State& state, float span, F f) {
  const std::vector<float> x = values(span);
  std::vector<float> y(n), dy(n, 1.0f);
  for (auto _ : state) {
    f(x.data(), dy.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["ns/value"] = benchmark::Counter(static_cast<double>(state.iterations() * n),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
using eigen_in = Eigen::Map<const array>;
using eigen_out = Eigen::Map<array>;

void exp_std(benchmark::State& s) {
  run(s, 10, [](const float* x, const float*, float* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
  });
}
void exp_kiln(benchmark::State& s) {
  run(s, 10, [](const float* x, const float*, float* y) { vm::exp(x, y, n); });
}
void exp_libm_kiln(benchmark::State& s) {  // glibc's bits (the loss's exp)
  run(s, 10, [](const float* x, const float*, float* y) { kiln::detail::libm_expf::exp_shifted(x, 0, 0, 1, y, n); });
}
void tanh_eigen(benchmark::State& s) {  // kiln::tanh before
  run(s, 5, [](const float* x, const float*, float* y) { eigen_out(y, n) = eigen_in(x, n).tanh(); });
}
void tanh_kiln(benchmark::State& s) {
  run(s, 5, [](const float* x, const float*, float* y) { vm::tanh(x, y, n); });
}
void sigmoid_eigen(benchmark::State& s) {  // kiln::sigmoid before
  run(s, 10, [](const float* x, const float*, float* y) { eigen_out(y, n) = eigen_in(x, n).logistic(); });
}
void sigmoid_kiln(benchmark::State& s) {
  run(s, 10, [](const float* x, const float*, float* y) { vm::sigmoid(x, y, n); });
}
void erf_std(benchmark::State& s) {
  run(s, 4, [](const float* x, const float*, float* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
  });
}
void erf_kiln(benchmark::State& s) {
  run(s, 4, [](const float* x, const float*, float* y) { vm::erf(x, y, n); });
}
constexpr float sqrt1_2 = static_cast<float>(std::numbers::sqrt2 / 2);
void gelu_std(benchmark::State& s) {  // kiln::gelu before: std::erf per element in an Eigen expression
  run(s, 5, [](const float* x, const float*, float* y) {
    const eigen_in a(x, n);
    eigen_out(y, n) = a * (0.5f * (1.0f + (a * sqrt1_2).unaryExpr([](float v) { return std::erf(v); })));
  });
}
void gelu_kiln(benchmark::State& s) {
  run(s, 5, [](const float* x, const float*, float* y) { vm::gelu(x, y, n); });
}
void gelu_backward_std(benchmark::State& s) {
  run(s, 5, [](const float* x, const float* dy, float* dx) {
    const eigen_in a(x, n);
    const float k = static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    eigen_out(dx, n) = eigen_in(dy, n) * (0.5f * (1.0f + (a * sqrt1_2).unaryExpr([](float v) { return std::erf(v); })) +
                                          a * k * (-0.5f * a.square()).exp());
  });
}
void gelu_backward_kiln(benchmark::State& s) {
  run(s, 5, [](const float* x, const float* dy, float* dx) { vm::gelu_backward(x, dy, dx, n); });
}
void gelu_backward_given_output_kiln(benchmark::State& s) {  // what an f32 gelu layer runs: Φ = y / x
  std::vector<float> y(n);
  const std::vector<float> x = values(5);
  vm::gelu(x.data(), y.data(), n);
  run(s, 5, [&](const float* xs, const float* dy, float* dx) { vm::gelu_backward(xs, y.data(), dy, dx, n); });
}
BENCHMARK(exp_std);
BENCHMARK(exp_kiln);
BENCHMARK(exp_libm_kiln);
BENCHMARK(tanh_eigen);
BENCHMARK(tanh_kiln);
BENCHMARK(sigmoid_eigen);
BENCHMARK(sigmoid_kiln);
BENCHMARK(erf_std);
BENCHMARK(erf_kiln);
BENCHMARK(gelu_std);
BENCHMARK(gelu_kiln);
BENCHMARK(gelu_backward_std);
BENCHMARK(gelu_backward_kiln);
BENCHMARK(gelu_backward_given_output_kiln);

// examples/char_transformer.cpp's model.
struct chars;
using gpt = model<input_tokens<64>, embedding<char_vocabulary::size, 64, tied<chars>>, position_embedding,
                  transformer_block<4>, transformer_block<4>, transformer_block<4>, layer_norm, unembed<tied<chars>>>;

void char_transformer_train_step(benchmark::State& state) {
  constexpr std::size_t B = 32;
  auto p = compile<gpt, batch<B>>(1);
  const adamw o{.lr = 1e-3f, .weight_decay = 0.01f};
  adamw::state<float> s(p.parameters().size());
  rng g(2);
  for (auto& x : p.input()) x = static_cast<std::uint32_t>(g.below(char_vocabulary::size));
  std::vector<std::uint32_t> t(B * 64);
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(char_vocabulary::size));
  for (auto _ : state) {
    kiln::train_step(p, t, o, s);
    benchmark::DoNotOptimize(p.parameters().data());
  }
  state.counters["windows/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * B), benchmark::Counter::kIsRate);
}
BENCHMARK(char_transformer_train_step)->MinWarmUpTime(0.5)->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
