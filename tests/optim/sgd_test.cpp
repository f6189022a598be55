// sgd against its formula (PyTorch's torch.optim.SGD), step by step.
#include <kiln/optim/sgd.hpp>

#include <gtest/gtest.h>

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

TEST(sgd, rejects_settings_that_cannot_train) {
  EXPECT_THROW((sgd{.lr = 0}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .momentum = 1.0f}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .weight_decay = -1}.validate()), std::invalid_argument);
  EXPECT_THROW((sgd{.lr = 0.1f, .nesterov = true}.validate()), std::invalid_argument);
  EXPECT_NO_THROW((sgd{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}.validate()));
}

static_assert(kiln::Optimizer<sgd, float> && kiln::Optimizer<sgd, double>);
}  // namespace
