// A training step allocates nothing. This binary counts every allocation
// (operator new and the C allocator that Eigen uses) and runs steps between
// two readings of the counter.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

// These replacements pair malloc with free on purpose.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<long> allocations{0};
}

void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  ++allocations;
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

#if defined(__GLIBC__)
// Eigen allocates through malloc directly: count that too.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) {
  ++allocations;
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t s) {
  ++allocations;
  return __libc_calloc(n, s);
}
void* realloc(void* p, std::size_t n) {
  ++allocations;
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  ++allocations;
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) {
  ++allocations;
  *out = __libc_memalign(a, n);
  return *out ? 0 : 12;
}
}
#endif

namespace {
using namespace kiln;

TEST(allocation, the_counter_sees_allocations) {
  const long before = allocations;
  std::vector<float> v(1000);
  void* p = std::malloc(64);
  std::free(p);
  EXPECT_GE(allocations - before, 2);
}

template <class Model, class... Options>
void expect_allocation_free_steps() {
  auto p = compile<Model, Options...>(1);
  using P = decltype(p);
  sgd o{.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true};
  sgd::state<typename P::scalar_type> s(p.parameters().size());
  std::vector<std::uint32_t> t(P::batch_size * P::targets_per_sample, 1);
  for (auto& x : p.input()) x = requires {
      Model::input_type::tokens;
    }
  ? 3.0f : 0.25f;  // a token id, or a value
  const long before = allocations;
  for (int step = 0; step < 5; ++step) {
    p.forward();
    p.backward(t);
    s.step(o, p.parameters(), p.gradients());
    p.forward();
    p.evaluate(t, P::batch_size - 1);
  }
  EXPECT_EQ(allocations - before, 0) << "allocations during 5 training steps";
}

TEST(allocation, fashion_mnist_mlp_step_allocates_nothing) {
  expect_allocation_free_steps<model<input<28, 28>, flatten, dense<256>, relu, dense<128>, relu, dense<10>>,
                               batch<64>>();
}
TEST(allocation, wide_layers_step_allocates_nothing) {
  // Large enough that Eigen's own product API would allocate packing space.
  expect_allocation_free_steps<model<input<2048>, dense<1024>, kiln::tanh, dense<10, no_bias>>, batch<256>>();
}
template <class... Precision>
void expect_allocation_free_replicated_steps() {
  auto p = compile<model<input<784>, dense<256>, relu, dense<10>>, batch<32>, replicate<2>, Precision...>(1);
  sgd o{.lr = 0.01f, .momentum = 0.9f};
  sgd::state<float> s(p.parameters().size());
  std::vector<std::uint32_t> t(64, 3);
  for (auto& x : p.input()) x = 0.5f;
  kiln::train_step(p, t, o, s);  // the threads are up and have run once
  const long before = allocations;
  for (int step = 0; step < 5; ++step) {
    kiln::train_step(p, t, o, s);
    p.forward();
    p.evaluate(t, 40);
  }
  EXPECT_EQ(allocations - before, 0) << "allocations during 5 replicated steps";
}
TEST(allocation, replicated_train_step_allocates_nothing) { expect_allocation_free_replicated_steps<>(); }
TEST(allocation, bf16_steps_allocate_nothing) {
  // bf16 activations, the step's weight copy, and the widened room of the
  // layers that compute in f32 (embeddings, layer_norm, attention) are all
  // planned ahead.
  expect_allocation_free_steps<model<input<28, 28>, flatten, dense<256>, relu, dense<128>, relu, dense<10>>, batch<64>,
                               precision<bf16>>();
  expect_allocation_free_steps<
      model<input<1, 12, 12>, conv2d<4, 3, 1, same>, batch_norm, relu, max_pool<2>, flatten, dropout<1, 4>, dense<10>>,
      batch<16>, precision<bf16>>();
  expect_allocation_free_replicated_steps<precision<bf16>>();
}
TEST(allocation, cnn_with_batch_norm_and_dropout_step_allocates_nothing) {
  expect_allocation_free_steps<
      model<input<1, 12, 12>, conv2d<4, 3, 1, same>, batch_norm, relu, max_pool<2>, flatten, dropout<1, 4>, dense<10>>,
      batch<16>>();
}
struct tokens;
TEST(allocation, transformer_step_allocates_nothing) {
  expect_allocation_free_steps<model<input_tokens<16>, embedding<10, 32, tied<tokens>>, position_embedding,
                                     transformer_block<4>, layer_norm, unembed<tied<tokens>>>,
                               batch<8>>();
}
TEST(allocation, bf16_transformer_step_allocates_nothing) {
  expect_allocation_free_steps<model<input_tokens<16>, embedding<10, 32, tied<tokens>>, position_embedding,
                                     transformer_block<4>, layer_norm, unembed<tied<tokens>>>,
                               batch<8>, precision<bf16>>();
}
TEST(allocation, double_precision_step_allocates_nothing) {
  expect_allocation_free_steps<model<input<300>, dense<200>, sigmoid, dense<10>>, batch<32>, precision<double>>();
}

TEST(allocation, metrics_add_allocates_nothing) {
  classification_metrics c(10);
  regression_metrics r(3);
  const std::vector<float> scores(64 * 10, 0.5f), y(63, 1.0f), t(63, 2.0f);
  const std::vector<std::uint32_t> labels(64, 7);
  const long before = allocations;
  for (int batch = 0; batch < 5; ++batch) {
    c.add(std::span<const float>(scores), std::span<const std::uint32_t>(labels));
    c.add(std::uint32_t{1}, std::uint32_t{2});
    r.add(std::span<const float>(y), std::span<const float>(t));
  }
  EXPECT_EQ(allocations - before, 0) << "allocations while adding 5 batches";
  EXPECT_EQ(c.count(), 5u * 65);
}
TEST(allocation, evaluate_with_metrics_allocates_the_same_for_any_number_of_batches) {
  auto p = compile<model<input<4>, dense<8>, relu, dense<5>>, batch<8>>(1);
  trainer t{p, sgd{}};
  const auto data = [](std::size_t n) {
    dataset d{"allocation", {4}, std::vector<float>(n * 4, 0.5f), std::vector<std::uint32_t>(n, 2), {}, 0};
    return d;
  };
  const dataset few = data(8 * 2), many = data(8 * 40 + 3);
  const metric_options all{.top_k = 3, .per_class = true, .confusion = true};
  const auto count = [&](const dataset& d) {
    const long before = allocations;
    const evaluation e = t.evaluate(d, all);
    EXPECT_EQ(e.classification->count(), d.size());
    return allocations - before;
  };
  count(few);  // once, for anything a first call sets up
  EXPECT_EQ(count(few), count(many)) << "evaluate allocates per batch";
}
}  // namespace

// fit gathers each batch through a sample source (kiln/data/sample_source.hpp):
// steps 3 to 10 of an epoch allocate nothing, from a dataset_view, through
// augmentation, and into a double-precision program (one float row, made
// before the first step).
template <class Program, class Source>
void expect_allocation_free_fit_steps(const Source& data) {
  Program p(1);
  trainer t{p, sgd{.lr = 0.01f, .momentum = 0.9f}};
  long at_2 = -1, at_10 = -1;
  t.fit(data, epochs{1}, {.progress = progress_mode::none, .on_step_end = [&](const step_report& s) {
                            if (s.step_in_epoch == 2) at_2 = allocations;
                            if (s.step_in_epoch == 10) at_10 = allocations;
                          }});
  ASSERT_GE(at_2, 0);
  EXPECT_EQ(at_10 - at_2, 0) << "allocations during 8 steps of fit";
}

TEST(allocation, fit_steps_from_a_sample_source_allocate_nothing) {
  using net = model<input<4, 4>, flatten, dense<8>, relu, dense<3>>;
  std::vector<float> x(256 * 16);
  std::vector<std::uint32_t> y(256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) / 7;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::uint32_t>(i % 3);
  const dataset_view v{.name = "mine", .sample_shape = {4, 4}, .features = x, .labels = y};
  expect_allocation_free_fit_steps<decltype(compile<net, batch<16>>())>(v);
  expect_allocation_free_fit_steps<decltype(compile<net, batch<16>>())>(
      augmented{v, {.crop_padding = 1, .horizontal_flip = true, .seed = 3}});
  expect_allocation_free_fit_steps<decltype(compile<net, batch<16>, precision<double>>())>(v);
}
