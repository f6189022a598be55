// kiln's side of the comparison: the same Fashion-MNIST MLP/CNN, the same
// batches in the same order, the same SGD (lr 0.05, momentum 0.9), timed the
// same way as the peers (see compare_common.hpp). Each step copies its batch
// into the program's input (as kiln::trainer does) and runs train_step.
// --model transformer trains examples/char_transformer.cpp's model on 32
// synthetic token windows a step (compare_common.hpp) with the example's
// AdamW (lr 2e-3, weight decay 0.01) and gradient clipping at norm 1.
//
//   kiln_compare_kiln --model mlp|cnn|transformer [--threads 1|2] [--bf16] [--warmup 50] [--steps S] [--windows W]
//
// --threads 2 runs replicate<2> (two pinned replicas of half the batch: the
// same global batch); --bf16 runs precision<bf16> (one thread).
#include <kiln/kiln.hpp>

#include "compare_common.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {
using namespace kiln;

using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, relu, max_pool<2>, conv2d<32, 5, 1, same>, relu,
                  max_pool<2>, flatten, dense<10>>;
// examples/char_transformer.cpp's model.
struct chars;
using gpt = model<input_tokens<compare::kTokenContext>, embedding<compare::kTokenVocabulary, 64, tied<chars>>,
                  position_embedding, transformer_block<4>, transformer_block<4>, transformer_block<4>, layer_norm,
                  unembed<tied<chars>>>;

// Runs the timed steps of `Model` on `num_batches` batches, batch i's inputs
// at xs[i * input size] and its targets at ys[i * targets per step].
template <class Model, class Optimizer, class... Options>
void run(const compare::Args& args, int threads, const std::vector<float>& xs, const std::vector<std::uint32_t>& ys,
         int num_batches, const Optimizer& opt, step_options options, const char* system = "kiln") {
  auto p = compile<Model, Options...>(/*seed=*/1);
  using P = decltype(p);
  const std::size_t inputs = p.input().size(), targets = P::global_batch * P::targets_per_sample;
  typename Optimizer::template state<float> state(p.parameters().size());
  long k = 0;
  auto step = [&] {
    const auto i = static_cast<std::size_t>(k++ % num_batches);
    std::copy_n(xs.data() + i * inputs, inputs, p.input().data());
    return kiln::train_step(p, std::span<const std::uint32_t>(ys.data() + i * targets, targets), opt, state, options)
        .loss;
  };
  const auto [samples_per_s, final_loss] =
      compare::timed_windows(args, step, static_cast<int>(P::global_batch));
  compare::Args reported = args;
  reported.threads = threads;
  compare::print_report(system, reported, samples_per_s, final_loss);
}

}  // namespace

int main(int argc, char** argv) try {
  // --threads is kiln's own option here (replicate<N>); the shared parser takes 1 only.
  int threads = 1;
  bool bf16_operands = false;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bf16") == 0) {
      bf16_operands = true;
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (threads != 1 && threads != 2) {
    std::fprintf(stderr, "kiln_compare_kiln: --threads must be 1 or 2\n");
    return 2;
  }
  const compare::Args args =
      compare::parse_args(static_cast<int>(rest.size()), rest.data(), /*with_driver=*/false, /*with_transformer=*/true);
  if (args.model == "transformer") {
    const std::vector<std::uint32_t> windows = compare::synthetic_token_windows();
    const auto n = static_cast<std::size_t>(compare::kTokenContext);
    std::vector<float> xs;
    std::vector<std::uint32_t> ys;
    for (std::size_t w = 0; w * (n + 1) < windows.size(); ++w) {
      xs.insert(xs.end(), windows.begin() + static_cast<std::ptrdiff_t>(w * (n + 1)),
                windows.begin() + static_cast<std::ptrdiff_t>(w * (n + 1) + n));
      ys.insert(ys.end(), windows.begin() + static_cast<std::ptrdiff_t>(w * (n + 1) + 1),
                windows.begin() + static_cast<std::ptrdiff_t>((w + 1) * (n + 1)));
    }
    const adamw opt{.lr = 2e-3f, .weight_decay = 0.01f};  // the example's
    const step_options clip{.max_grad_norm = 1.0};
    if (bf16_operands)
      run<gpt, adamw, batch<32>, precision<bf16>>(args, 1, xs, ys, compare::kTokenBatches, opt, clip, "kiln bf16");
    else if (threads == 1)
      run<gpt, adamw, batch<32>>(args, 1, xs, ys, compare::kTokenBatches, opt, clip);
    else
      run<gpt, adamw, batch<16>, replicate<2>>(args, 2, xs, ys, compare::kTokenBatches, opt, clip);
    return 0;
  }
  const sgd opt{.lr = compare::kLearningRate, .momentum = compare::kMomentum};
  const compare::Dataset data = compare::load_fashion_mnist_train();
  const std::vector<int> perm = compare::shuffled_indices(data.n);
  const int num_batches = data.n / compare::kBatch;
  std::vector<float> xs(static_cast<std::size_t>(num_batches) * compare::kBatch * compare::kPixels);
  std::vector<std::uint32_t> ys(static_cast<std::size_t>(num_batches) * compare::kBatch);
  for (std::size_t j = 0; j < ys.size(); ++j) {
    const auto src = static_cast<std::size_t>(perm[j]);
    std::copy_n(data.images.begin() + static_cast<std::ptrdiff_t>(src * compare::kPixels), compare::kPixels,
                xs.begin() + static_cast<std::ptrdiff_t>(j * compare::kPixels));
    ys[j] = static_cast<std::uint32_t>(data.labels[src]);
  }
  if (bf16_operands) {
    if (args.model == "mlp")
      run<mlp, sgd, batch<64>, precision<bf16>>(args, 1, xs, ys, num_batches, opt, {}, "kiln bf16");
    else
      run<cnn, sgd, batch<64>, precision<bf16>>(args, 1, xs, ys, num_batches, opt, {}, "kiln bf16");
  } else if (args.model == "mlp") {
    if (threads == 1)
      run<mlp, sgd, batch<64>>(args, threads, xs, ys, num_batches, opt, {});
    else
      run<mlp, sgd, batch<32>, replicate<2>>(args, threads, xs, ys, num_batches, opt, {});
  } else {
    if (threads == 1)
      run<cnn, sgd, batch<64>>(args, threads, xs, ys, num_batches, opt, {});
    else
      run<cnn, sgd, batch<32>, replicate<2>>(args, threads, xs, ys, num_batches, opt, {});
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_compare_kiln: %s\n", e.what());
  return 1;
}
