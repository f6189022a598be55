// examples/custom_layer.cpp — train a model with a layer of your own.
//
// scaled_tanh (examples/custom_layer.hpp) is written with kiln's public names
// only; here it takes relu's place in the Fashion-MNIST MLP.
//   custom_layer [epochs]     (default 2)
//   custom_layer --smoke      (5,000 training images, 1 epoch: a quick check)
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstring>
#include <exception>

#include "custom_layer.hpp"

using namespace kiln;

using net = model<input<28, 28>, flatten, dense<128>, scaled_tanh, dense<10>>;
static_assert(net::parameter_count == 784 * 128 + 128 + 2 * 128 + 128 * 10 + 10);

int main(int argc, char** argv) try {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const std::size_t n_epochs = smoke ? 1 : argc > 1 ? std::stoul(argv[1]) : 2;
  fashion_mnist data = fashion_mnist::load(fashion_mnist::default_directory,
                                           {.normalize = pixel_normalization::standardize});
  if (smoke) {
    data.train.features.resize(5000 * 784);
    data.train.labels.resize(5000);
  }
  std::printf("%s", net::summary().c_str());
  auto program = compile<net, batch<64>>(/*seed=*/3);
  trainer t{program, sgd{.lr = 0.01f, .momentum = 0.9f}};
  t.fit(data.train, epochs{n_epochs}, {.seed = 5, .progress = progress_mode::lines});
  std::printf("test accuracy: %.4f\n", t.evaluate(data.test).accuracy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_layer: %s\n", e.what());
  return 1;
}
