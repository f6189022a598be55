// Trains three models a few steps and prints, for each, the loss of every
// step (as hexadecimal floats) and a digest of the parameters' bits. The
// test suite builds this program for this CPU (-march=native: AVX-512 where
// it has it), for AVX2 + FMA alone (x86-64-v3) and for this CPU without
// AVX512-BF16, runs them, and requires the same output:
//
//   cross_cpu_bits [f32]  f32 programs: the same bits on an AVX-512 CPU as
//                         on an AVX2 one (kiln's two GEMM kernels sum in one
//                         order, detail/gemm_blocking.hpp; its element-wise
//                         functions and row sums are fixed-order too,
//                         detail/vector_math.hpp and detail/lane_sum.hpp);
//   cross_cpu_bits bf16   precision<bf16> programs: the same bits on every
//                         CPU without AVX512-BF16, AVX-512 or AVX2 (each
//                         product is that of the f32 kernel over the
//                         operands' bf16 values; with AVX512-BF16 the dot
//                         products add pairs before rounding: other bits).
//
// The models cover every kind of product and pass: the Fashion-MNIST MLP's
// shapes at batch 64 (depths beyond one packed panel), a small CNN (padded
// and unpadded convolutions: unfolding and folding back), and a
// transformer block with attention, layer_norm and gelu; under SGD with
// momentum, Adam and AdamW.
#include <kiln/kiln.hpp>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace {
using namespace kiln;

std::uint64_t digest(std::span<const float> values) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over each value's bits
  for (float v : values) {
    h ^= std::bit_cast<std::uint32_t>(v);
    h *= 1099511628211ull;
  }
  return h;
}

template <class Model, std::size_t Batch, class Precision, class Opt>
void train(const char* name, const Opt& opt, std::uint64_t seed) {
  auto p = compile<Model, batch<Batch>, precision<Precision>, softmax_cross_entropy<>>(seed);
  using P = decltype(p);
  typename Opt::template state<float> state(p.parameters().size());
  rng g(seed, 7);
  std::vector<std::uint32_t> t(P::batch_size * P::targets_per_sample);
  std::printf("%s:", name);
  for (int step = 1; step <= 5; ++step) {
    for (auto& x : p.input()) x = static_cast<float>(g.uniform(-1, 1));
    for (auto& v : t) v = static_cast<std::uint32_t>(g.below(P::bound_loss::class_count));
    p.forward();
    const float loss = static_cast<float>(p.backward(t).loss);
    std::printf(" %a", static_cast<double>(loss));
    state.step(opt, p.parameters(), p.gradients(), static_cast<std::uint64_t>(step));
  }
  std::printf(" parameters %016llx\n", static_cast<unsigned long long>(digest(p.parameters())));
}

template <class Precision>
void train_all() {
  using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
  using cnn = model<input<1, 12, 12>, conv2d<8, 3, 1, same>, relu, max_pool<2>, conv2d<16, 3>, relu, flatten, dense<10>>;
  using transformer = model<input<16, 32>, position_embedding, transformer_block<4, 64>, position_wise<dense<10>>>;
  train<mlp, 64, Precision>("mlp", sgd{.lr = 0.05f, .momentum = 0.9f}, 1);
  train<cnn, 16, Precision>("cnn", adam{.lr = 0.01f}, 2);
  train<transformer, 8, Precision>("transformer", adamw{.lr = 0.01f, .weight_decay = 0.1f}, 3);
}

}  // namespace

int main(int argc, char** argv) {
  const bool bf16_programs = argc > 1 && std::strcmp(argv[1], "bf16") == 0;
  if (argc > 1 && !bf16_programs && std::strcmp(argv[1], "f32") != 0) {
    std::fprintf(stderr, "usage: cross_cpu_bits [f32|bf16]\n");
    return 2;
  }
  if (bf16_programs)
    train_all<bf16>();
  else
    train_all<float>();
  std::printf("gemm kernel: %s\n", detail::gemm_scratch<float>::own_kernel ? "kiln's" : "Eigen's");
}
