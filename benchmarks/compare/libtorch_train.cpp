// libtorch C++ peer for kiln's side-by-side training benchmarks (Debian
// libtorch-dev 1.13: the peer a C++ user would pick, BENCHMARKING.md).
//
// The same three workloads as torch_train.py, layer for layer:
//   mlp          784-256-128-10 ReLU, SGD lr 0.05 momentum 0.9, batch 64
//   cnn          conv 5x5x16 same + ReLU + max-pool 2, conv 5x5x32 same +
//                ReLU + max-pool 2, linear 1568 -> 10; the same SGD
//   transformer  examples/char_transformer.cpp's model: tied 96x64
//                embedding (N(0, 0.02)), learned positions, 3 pre-norm blocks
//                of 4-head causal torch::nn::MultiheadAttention and an
//                exact-GELU MLP of width 256, final LayerNorm, logits = h·Eᵀ;
//                AdamW lr 2e-3 weight decay 0.01, gradient clipping at norm
//                1, 32 synthetic token windows a step
// on the same batches in the same order (compare_common.hpp), cross-entropy
// (mean), gradients set to none before each step as torch_train.py does.
// The transformer runs sequence-first, (L, N, E): C++ MultiheadAttention's
// own layout (Python's batch_first=True transposes to it inside).
//
//   kiln_compare_libtorch --model mlp|cnn|transformer [--threads N] [--warmup 50] [--steps S] [--windows W]
//
// --threads sets at::set_num_threads (intra-op; inter-op is 1). Run it with
// OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=N and OpenBLAS on LD_LIBRARY_PATH,
// as the PyTorch rows are: Debian's libtorch reaches BLAS through
// libblas.so.3 and convolutions go through oneDNN. Prints one JSON line (the
// common fields, and "blas": the BLAS objects mapped into the process).
#include <torch/torch.h>

#include "compare_common.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kWidth = 64, kHeads = 4, kBlocks = 3;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        attention(register_module("attention", torch::nn::MultiheadAttention(kWidth, kHeads))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        up(register_module("up", torch::nn::Linear(kWidth, 4 * kWidth))),
        down(register_module("down", torch::nn::Linear(4 * kWidth, kWidth))) {}

  /// x + attention(norm(x)), then x + mlp(norm(x)); x is (L, N, E).
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& causal) {
    const torch::Tensor h = norm1(x);
    x = x + std::get<0>(attention->forward(h, h, h, /*key_padding_mask=*/{}, /*need_weights=*/false, causal));
    return x + down(torch::gelu(up(norm2(x))));
  }

  torch::nn::LayerNorm norm1;
  torch::nn::MultiheadAttention attention;
  torch::nn::LayerNorm norm2;
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

struct CharTransformerImpl : torch::nn::Module {
  CharTransformerImpl()
      : embedding(register_module("embedding", torch::nn::Embedding(compare::kTokenVocabulary, kWidth))),
        positions(register_parameter("positions", torch::randn({compare::kTokenContext, 1, kWidth}) * 0.02)),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        // −∞ above the diagonal: position i attends to positions <= i only.
        // (libtorch 1.13's C++ attention adds attn_mask to the scores, a
        // bool mask too: True would add 1 and let every position see the
        // future, so the mask is additive, as the Python module makes it.)
        causal(register_buffer("causal", torch::full({compare::kTokenContext, compare::kTokenContext},
                                                     -std::numeric_limits<float>::infinity())
                                             .triu(1))) {
    torch::NoGradGuard no_grad;
    embedding->weight.normal_(0, 0.02);
    for (int b = 0; b < kBlocks; ++b) blocks.push_back(register_module("block" + std::to_string(b), Block()));
  }

  /// tokens (L, N) → logits (L, N, vocabulary).
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor x = embedding(tokens) + positions;
    for (auto& block : blocks) x = block(x, causal);
    return torch::matmul(norm(x), embedding->weight.t());  // tied to the embedding
  }

  torch::nn::Embedding embedding;
  torch::Tensor positions;
  torch::nn::LayerNorm norm;
  torch::Tensor causal;
  std::vector<Block> blocks;
};
TORCH_MODULE(CharTransformer);

using batch_list = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

/// The Fashion-MNIST batches in compare_common.hpp's order, built before
/// any timing: (64 × 784 or 64 × 1 × 28 × 28 pixels, 64 labels).
batch_list image_batches(bool images) {
  const compare::Dataset d = compare::load_fashion_mnist_train();
  const std::vector<int> order = compare::shuffled_indices(d.n);
  batch_list out;
  for (int b = 0; b + compare::kBatch <= d.n; b += compare::kBatch) {
    torch::Tensor x = torch::empty({compare::kBatch, compare::kPixels});
    torch::Tensor y = torch::empty({compare::kBatch}, torch::TensorOptions().dtype(torch::kLong));
    float* xs = x.data_ptr<float>();
    auto* ys = y.data_ptr<std::int64_t>();
    for (int i = 0; i < compare::kBatch; ++i) {
      const auto s = static_cast<std::size_t>(order[static_cast<std::size_t>(b + i)]);
      std::memcpy(xs + i * compare::kPixels, d.images.data() + s * compare::kPixels, sizeof(float) * compare::kPixels);
      ys[i] = d.labels[s];
    }
    out.emplace_back(images ? x.reshape({compare::kBatch, 1, compare::kImageSide, compare::kImageSide}) : x, y);
  }
  return out;
}

/// The synthetic token windows, kTokenBatch a step: (inputs (L, N), targets
/// (L·N), position-major to match the logits' (L, N, V) layout).
batch_list token_batches() {
  const std::vector<std::uint32_t> ids = compare::synthetic_token_windows();
  const std::int64_t L = compare::kTokenContext, N = compare::kTokenBatch;
  torch::Tensor all = torch::empty({compare::kTokenBatches * N, L + 1}, torch::TensorOptions().dtype(torch::kLong));
  auto* a = all.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < ids.size(); ++i) a[i] = ids[i];
  batch_list out;
  for (std::int64_t b = 0; b < compare::kTokenBatches; ++b) {
    const torch::Tensor w = all.slice(0, b * N, (b + 1) * N);
    out.emplace_back(w.slice(1, 0, L).t().contiguous(), w.slice(1, 1, L + 1).t().reshape({-1}).contiguous());
  }
  return out;
}

template <class Net, class Optimizer>
void run(const compare::Args& args, Net& net, Optimizer& opt, const batch_list& batches, double clip, int batch) {
  net->train();
  const std::vector<torch::Tensor> parameters = net->parameters();
  std::size_t k = 0;
  auto step = [&] {
    const auto& [x, y] = batches[k++ % batches.size()];
    for (const auto& p : parameters) p.mutable_grad().reset();  // set_to_none, as torch_train.py
    torch::Tensor out = net->forward(x);
    torch::Tensor loss = torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), y);
    loss.backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(parameters, clip);
    opt.step();
    return loss.item<double>();
  };
  const auto [samples_per_s, final_loss] = compare::timed_windows(args, step, batch);
  compare::print_report("libtorch", args, samples_per_s, final_loss,
                        ",\"blas\":" + compare::json_string(compare::loaded_blas()));
}

}  // namespace

int main(int argc, char** argv) try {
  // --threads is this program's own option; the shared parser takes 1 only.
  int threads = 1;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "%s: --threads must be at least 1\n", argv[0]);
    return 2;
  }
  compare::Args args = compare::parse_args(static_cast<int>(rest.size()), rest.data(), false, /*with_transformer=*/true);
  args.threads = threads;
  at::set_num_interop_threads(1);
  at::set_num_threads(threads);
  torch::manual_seed(0);

  if (args.model == "transformer") {
    CharTransformer net;
    torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-3).weight_decay(0.01));
    run(args, net, opt, token_batches(), 1.0, compare::kTokenBatch);
  } else if (args.model == "mlp") {
    torch::nn::Sequential net(torch::nn::Linear(compare::kPixels, 256), torch::nn::ReLU(), torch::nn::Linear(256, 128),
                              torch::nn::ReLU(), torch::nn::Linear(128, compare::kClasses));
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(compare::kLearningRate).momentum(compare::kMomentum));
    run(args, net, opt, image_batches(false), 0.0, compare::kBatch);
  } else {
    torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)), torch::nn::ReLU(),
                              torch::nn::MaxPool2d(2),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)), torch::nn::ReLU(),
                              torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(32 * 7 * 7, compare::kClasses));
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(compare::kLearningRate).momentum(compare::kMomentum));
    run(args, net, opt, image_batches(true), 0.0, compare::kBatch);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_compare_libtorch: %s\n", e.what());
  return 1;
}
