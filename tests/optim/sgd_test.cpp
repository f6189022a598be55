// sgd against its formula (PyTorch's torch.optim.SGD), step by step.
#include <kiln/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

namespace {
using kiln::sgd;

// Two steps of the reference recurrence for one scalar.
double reference(double w, double g1, double g2, const sgd& o) {
  double v = 0;
  for (double g : {g1, g2}) {
    const double d = g + o.weight_decay * w;
    v = o.momentum * v + d;
    const double step = o.momentum == 0 ? d : (o.nesterov ? d + o.momentum * v : v);
    w -= o.lr * step;
  }
  return w;
}

TEST(sgd, matches_the_reference_recurrence) {
  for (const sgd& o :
       {sgd{.lr = 0.1f}, sgd{.lr = 0.1f, .momentum = 0.9f}, sgd{.lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.01f},
        sgd{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = true}}) {
    sgd::state<double> s(3);
    std::vector<double> w{1.0, -2.0, 0.5};
    const std::vector<double> g1{0.3, -0.1, 2.0}, g2{-0.2, 0.4, 1.0};
    const std::vector<double> w0 = w;
    s.step(o, w, g1);
    s.step(o, w, g2);
    for (std::size_t i = 0; i < 3; ++i) {
      // The reference runs in double with the float hyper-parameters.
      EXPECT_NEAR(w[i], reference(w0[i], g1[i], g2[i], o), 1e-12) << "scalar " << i;
    }
  }
}

// A buffer longer than two of the blocks the update walks in (with a
// ragged last one): every element follows the recurrence, and the float
// update of the whole buffer gives the bits of updating it in slices of
// whole cache lines (as the replicas of replicate<N> and the layer-by-layer
// update do), whose lengths do not divide the blocks.
TEST(sgd, every_element_of_a_long_buffer_follows_the_recurrence_in_any_slicing_by_cache_lines) {
  const std::size_t n = 2 * kiln::detail::update_block + 37;
  std::vector<double> w0(n), g1(n), g2(n);
  for (std::size_t i = 0; i < n; ++i) {
    w0[i] = std::sin(0.7 * double(i)) + 0.1;
    g1[i] = std::cos(1.3 * double(i));
    g2[i] = std::sin(0.11 * double(i) + 1.0);
  }
  for (const sgd& o : {sgd{.lr = 0.1f}, sgd{.lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.01f},
                       sgd{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = true}}) {
    sgd::state<double> s(n);
    std::vector<double> w = w0;
    s.step(o, w, g1);
    s.step(o, w, g2);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(w[i], reference(w0[i], g1[i], g2[i], o), 1e-12) << "element " << i << " of " << n;

    const std::vector<float> wf0(w0.begin(), w0.end()), gf1(g1.begin(), g1.end()), gf2(g2.begin(), g2.end());
    sgd::state<float> whole(n), single(n);
    std::vector<float> a = wf0, b = wf0;
    for (const auto* g : {&gf1, &gf2}) {
      whole.step(o, a, *g);
      single.prepare(o, 1);
      for (std::size_t i = 0, k = 0; i < n; i += 16 * (1 + k % 37), ++k) {
        const std::size_t m = std::min(n - i, 16 * (1 + k % 37));
        single.update(o, std::span(b).subspan(i, m), std::span(*g).subspan(i, m), i);
      }
    }
    EXPECT_EQ(a, b);
  }
}

TEST(sgd, rejects_settings_that_cannot_train) {
  EXPECT_THROW((sgd{.lr = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .momentum = 1.0f}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .weight_decay = -1}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .nesterov = true}.validate()), std::invalid_argument);
  EXPECT_NO_THROW((sgd{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}.validate()));
}

static_assert(kiln::Optimizer<sgd, float> && kiln::Optimizer<sgd, double>);
}  // namespace
