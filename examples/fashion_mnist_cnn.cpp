// Fashion-MNIST with a small CNN: two convolution + batch-norm + pooling
// blocks and a dense head, trained on both cores.
//
// Run:  fashion_mnist_cnn [data directory] [epochs]
#include <kiln/kiln.hpp>

#include <cstdio>
#include <exception>
#include <string>

using namespace kiln;

// Samples are channels × height × width: one channel of 28 × 28 pixels.
// `same` padding keeps 28 × 28 through the 5 × 5 kernels; each pool halves it.
// batch_norm normalises each channel over the batch while training and with
// its running statistics when the trainer evaluates; dropout drops a quarter
// of the hidden units while training only.
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, batch_norm, relu, max_pool<2>,  // → shape<16, 14, 14>
                  conv2d<32, 5, 1, same>, batch_norm, relu, max_pool<2>,                    // → shape<32, 7, 7>
                  flatten, dense<128>, relu, dropout<1, 4>,                                 // → shape<128>
                  dense<10>>;                                                               // → shape<10>
static_assert(cnn::output_shape == shape<10>{});
static_assert(cnn::parameter_count == 215'466);

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : std::string(fashion_mnist::default_directory);
  const std::size_t n_epochs = argc > 2 ? std::stoul(argv[2]) : 10;
  // The files hold 28 × 28 samples; the model takes one channel of 28 × 28:
  // the same 784 values, which the datasets are told explicitly.
  fashion_mnist data = fashion_mnist::load(dir, {.normalize = pixel_normalization::standardize});
  data.train.reshape({1, 28, 28});
  data.test.reshape({1, 28, 28});
  std::printf("%s", cnn::summary().c_str());

  auto program = compile<cnn, batch<32>, replicate<2>>(/*seed=*/42);  // 64 samples per step
  trainer t{program, sgd{.lr = 0.05f, .momentum = 0.9f}};
  t.fit(data.train, epochs{n_epochs},
        {.validation = &data.test,
         .seed = 7,
         .metrics_log = "fashion_mnist_cnn.metrics.jsonl",
         .schedule = cosine{.steps = n_epochs * (60'000 / 64), .floor = 0.05}});
  std::printf("test accuracy: %.4f\n", t.evaluate(data.test).accuracy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_cnn: %s\n", e.what());
  return 1;
}
