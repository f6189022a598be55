// Fashion-MNIST with a typed MLP — kiln's first tutorial.
//
// Run:  fashion_mnist_mlp [data directory] [epochs]
// (the data directory defaults to where Debian's dataset-fashion-mnist puts it)
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

using namespace kiln;

// 1. The model is a type. Each layer is bound to the output shape of the one
//    before it while this line compiles: a 28×28 image is flattened into 784
//    values, then three dense layers map it to 10 class scores.
using mlp = model<input<28, 28>, flatten, dense<256>, relu, dense<128>, relu, dense<10>>;

// 2. Everything the type knows is a compile-time constant, so you can pin it
//    down: a change to the architecture that alters these fails to compile.
static_assert(mlp::output_shape == shape<10>{});
static_assert(mlp::parameter_count == 235'146);

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : std::string(fashion_mnist::default_directory);
  const std::size_t n_epochs = argc > 2 ? std::stoul(argv[2]) : 10;

  // 3. Data: 60,000 training and 10,000 test images. Standardized pixels
  //    (mean 0, deviation 1 over the training set) make SGD's job easier.
  const fashion_mnist data = fashion_mnist::load(dir, {.normalize = pixel_normalization::standardize});
  std::printf("%s", mlp::summary().c_str());

  // 4. Compiling fixes the batch (64 samples per step) and allocates the one
  //    workspace every step reuses; the seed fixes the initial weights.
  auto program = compile<mlp, batch<64>>(/*seed=*/42);

  // 5. Train with SGD + momentum; evaluate on the test set after each epoch
  //    and log the metrics as JSON lines.
  trainer t{program, sgd{.lr = 0.01f, .momentum = 0.9f}};
  t.fit(data.train, epochs{n_epochs},
        {.validation = &data.test, .seed = 7, .metrics_log = "fashion_mnist_mlp.metrics.jsonl"});

  // 6. The final score: every test sample counts, including the last 16 that
  //    do not fill a batch of 64 (they are padded and masked).
  const evaluation test = t.evaluate(data.test);
  std::printf("test accuracy: %.4f\n", test.accuracy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_mlp: %s\n", e.what());
  return 1;
}
