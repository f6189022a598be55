// Training throughput of replicate<1> versus replicate<2> for the
// Fashion-MNIST MLP (784-256-128-10) at B = 64 per replica, as a ratio
// measured side by side in one run (BENCHMARKING.md): warm-up, then windows
// of steps alternating A B A B ..., medians of the windows.
//
// Run: build/benchmarks/replicate_speedup [windows] [steps per window]
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace kiln;
using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
constexpr std::size_t B = 64;

template <class Program>
struct runner {
  Program p = Program(1);
  sgd o{.lr = 0.01f, .momentum = 0.9f};
  sgd::state<float> s{p.parameters().size()};
  std::vector<std::uint32_t> t = std::vector<std::uint32_t>(Program::global_batch);
  runner() {
    rng g(2);
    for (auto& x : p.input()) x = static_cast<float>(g.uniform());
    for (auto& v : t) v = static_cast<std::uint32_t>(g.below(10));
  }
  /// Samples per second over `steps` training steps.
  double window(std::size_t steps) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < steps; ++i) {
      kiln::train_step(p, t, o, s);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(steps * Program::global_batch) / seconds;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const std::size_t windows = argc > 1 ? std::stoul(argv[1]) : 9;
  const std::size_t steps = argc > 2 ? std::stoul(argv[2]) : 300;
  runner<decltype(compile<mlp, batch<B>, replicate<1>>())> one;
  runner<decltype(compile<mlp, batch<B>, replicate<2>>())> two;
  one.window(100);  // warm-up
  two.window(100);
  std::vector<double> a, b;
  for (std::size_t w = 0; w < windows; ++w) {
    a.push_back(one.window(steps));
    b.push_back(two.window(steps));
  }
  const double ma = median(a), mb = median(b);
  std::printf("MLP 784-256-128-10, B = %zu per replica, %zu windows of %zu steps, interleaved\n", B, windows, steps);
  std::printf("replicate<1>: %.0f samples/s (median)\n", ma);
  std::printf("replicate<2>: %.0f samples/s (median)\n", mb);
  std::printf("speed-up replicate<2> / replicate<1>: %.2fx\n", mb / ma);
}
