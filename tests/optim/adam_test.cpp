// adam and adamw against their recurrences (PyTorch's Adam/AdamW; the
// number-by-number PyTorch comparison is in reference/torch_optimizer_steps.py).
#include <kiln/optim/adam.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace {
template <bool Decoupled>
double reference(double w, const std::vector<double>& grads, const kiln::detail::adam_family<Decoupled>& o) {
  double m = 0, v = 0;
  int t = 0;
  for (double g : grads) {
    ++t;
    if (Decoupled) {
      w -= double(o.lr) * o.weight_decay * w;
    } else {
      g += double(o.weight_decay) * w;
    }
    m = o.beta1 * m + (1 - double(o.beta1)) * g;
    v = o.beta2 * v + (1 - double(o.beta2)) * g * g;
    const double mh = m / (1 - std::pow(double(o.beta1), t)), vh = v / (1 - std::pow(double(o.beta2), t));
    w -= o.lr * mh / (std::sqrt(vh) + o.eps);
  }
  return w;
}

template <class O>
void check(const O& o) {
  typename O::template state<double> s(2);
  std::vector<double> w{0.5, -1.5};
  const std::vector<std::vector<double>> g{{0.1, -2.0}, {0.3, 1.0}, {-0.2, 0.5}};
  std::uint64_t t = 0;
  for (const auto& step : g) s.step(o, w, step, ++t);
  EXPECT_NEAR(w[0], reference(0.5, {0.1, 0.3, -0.2}, o), 1e-12);
  EXPECT_NEAR(w[1], reference(-1.5, {-2.0, 1.0, 0.5}, o), 1e-12);
}

TEST(adam, matches_the_reference_recurrence) {
  check(kiln::adam{.lr = 0.01f});
  check(kiln::adam{.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f});
}
TEST(adamw, matches_the_reference_recurrence) {
  check(kiln::adamw{.lr = 0.01f});
  check(kiln::adamw{.lr = 0.05f, .beta1 = 0.5f, .weight_decay = 0.3f});
}

TEST(adam, slices_updated_separately_equal_one_update) {
  const kiln::adamw o{.lr = 0.01f, .weight_decay = 0.1f};
  kiln::adamw::state<float> whole(6), parts(6);
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b = a;
  const std::vector<float> g{0.1f, -0.2f, 0.3f, 0.0f, 1.0f, -1.0f};
  whole.step(o, a, g, 1);
  parts.prepare(o, 1);
  parts.update(o, std::span(b).first(4), std::span(g).first(4), 0);
  parts.update(o, std::span(b).subspan(4), std::span(g).subspan(4), 4);
  EXPECT_EQ(a, b);
}

// A buffer longer than two of the blocks the update walks in (with a
// ragged last one): every element follows the recurrence, and the float
// update of the whole buffer gives the bits of updating it in slices of
// whole cache lines (as the replicas of replicate<N> and the layer-by-layer
// update do), whose lengths do not divide the blocks.
template <class O>
void check_long_buffer(const O& o) {
  const std::size_t n = 2 * kiln::detail::update_block + 37;
  std::vector<double> w0(n);
  std::vector<std::vector<double>> g(3, std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    w0[i] = std::sin(0.7 * double(i)) + 0.1;
    for (std::size_t t = 0; t < 3; ++t) g[t][i] = std::cos(1.3 * double(i) + double(t));
  }
  typename O::template state<double> s(n);
  std::vector<double> w = w0;
  for (std::uint64_t t = 0; t < 3; ++t) s.step(o, w, g[t], t + 1);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(w[i], reference(w0[i], {g[0][i], g[1][i], g[2][i]}, o), 1e-12) << "element " << i << " of " << n;

  typename O::template state<float> whole(n), single(n);
  std::vector<float> a(w0.begin(), w0.end()), b = a;
  for (std::uint64_t t = 0; t < 3; ++t) {
    const std::vector<float> gf(g[t].begin(), g[t].end());
    whole.step(o, a, gf, t + 1);
    single.prepare(o, t + 1);
    for (std::size_t i = 0, k = 0; i < n; i += 16 * (1 + k % 37), ++k) {
      const std::size_t m = std::min(n - i, 16 * (1 + k % 37));
      single.update(o, std::span(b).subspan(i, m), std::span(gf).subspan(i, m), i);
    }
  }
  EXPECT_EQ(a, b);
}
TEST(adam, every_element_of_a_long_buffer_follows_the_recurrence_in_any_slicing_by_cache_lines) {
  check_long_buffer(kiln::adam{.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f});
  check_long_buffer(kiln::adamw{.lr = 0.05f, .beta1 = 0.5f, .weight_decay = 0.3f});
}

TEST(adam, rejects_settings_that_cannot_train) {
  EXPECT_THROW((kiln::adam{.lr = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adam{.beta1 = 1.0f}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adamw{.eps = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adamw{.weight_decay = -0.1f}.validate()), std::invalid_argument);
}

static_assert(kiln::Optimizer<kiln::adam, float> && kiln::Optimizer<kiln::adamw, double>);
}  // namespace
