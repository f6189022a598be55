// adam and adamw against their recurrences (PyTorch's Adam/AdamW; the
// number-by-number PyTorch comparison is in reference/torch_optimizer_steps.py).
#include <kiln/optim/adam.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

TEST(adam, rejects_settings_that_cannot_train) {
  EXPECT_THROW((kiln::adam{.lr = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adam{.beta1 = 1.0f}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adamw{.eps = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((kiln::adamw{.weight_decay = -0.1f}.validate()), std::invalid_argument);
}

static_assert(kiln::Optimizer<kiln::adam, float> && kiln::Optimizer<kiln::adamw, double>);
}  // namespace
