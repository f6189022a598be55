// bf16 against f32 on Fashion-MNIST: the same model, data, seed and
// optimizer, trained once with f32 GEMMs and once with precision<bf16>
// (f32 master weights, bf16 GEMM operands, f32 accumulation), side by side.
//
// Run:  fashion_mnist_bf16 [mlp|cnn] [epochs] [seed] [data directory]
#include <kiln/kiln.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

using namespace kiln;

using mlp = model<input<28, 28>, flatten, dense<256>, relu, dense<128>, relu, dense<10>>;
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, batch_norm, relu, max_pool<2>, conv2d<32, 5, 1, same>,
                  batch_norm, relu, max_pool<2>, flatten, dense<128>, relu, dropout<1, 4>, dense<10>>;

struct result {
  double accuracy, seconds;
};

/// Trains Model with one precision; the examples' settings (fashion_mnist_mlp / _cnn).
template <class Model, class Precision, class... Options>
result train(const fashion_mnist& data, std::size_t n_epochs, float lr, bool cosine_decay, std::uint64_t seed) {
  auto program = compile<Model, Precision, Options...>(seed);
  trainer t{program, sgd{.lr = lr, .momentum = 0.9f}};
  fit_options o{.validation = &data.test, .seed = seed + 7, .progress = progress_mode::lines};
  if (cosine_decay) o.schedule = cosine{.steps = n_epochs * (60'000 / 64), .floor = 0.05};
  const auto history = t.fit(data.train, epochs{n_epochs}, o);
  double seconds = 0;
  for (const auto& e : history.epochs) seconds += e.seconds;
  return {t.evaluate(data.test).accuracy, seconds};
}

int main(int argc, char** argv) try {
  const std::string which = argc > 1 ? argv[1] : "mlp";
  const std::size_t n_epochs = argc > 2 ? std::stoul(argv[2]) : 10;
  const std::uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 42;
  const std::string dir = argc > 4 ? argv[4] : std::string(fashion_mnist::default_directory);
  fashion_mnist data = fashion_mnist::load(dir, {.normalize = pixel_normalization::standardize});
  result f32, b16;
  if (which == "mlp") {
    f32 = train<mlp, precision<float>, batch<64>>(data, n_epochs, 0.01f, false, seed);
    b16 = train<mlp, precision<bf16>, batch<64>>(data, n_epochs, 0.01f, false, seed);
  } else if (which == "cnn") {
    data.train.reshape({1, 28, 28});  // one channel of 28 × 28: the same values
    data.test.reshape({1, 28, 28});
    f32 = train<cnn, precision<float>, batch<32>, replicate<2>>(data, n_epochs, 0.05f, true, seed);
    b16 = train<cnn, precision<bf16>, batch<32>, replicate<2>>(data, n_epochs, 0.05f, true, seed);
  } else {
    std::fprintf(stderr, "usage: fashion_mnist_bf16 [mlp|cnn] [epochs] [seed] [data directory]\n");
    return 2;
  }
  std::printf(
      "%s, %zu epochs: f32 test accuracy %.4f (%.1f s of training), bf16 %.4f (%.1f s): "
      "%+.2f points, %.2fx the speed\n",
      which.c_str(), n_epochs, f32.accuracy, f32.seconds, b16.accuracy, b16.seconds,
      100 * (b16.accuracy - f32.accuracy), f32.seconds / b16.seconds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_bf16: %s\n", e.what());
  return 1;
}
