// Finite-difference gradient checks for kiln programs (instantiate in double).
#pragma once

#include <kiln/compile.hpp>
#include <kiln/random.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace kiln::testing {

/// The vocabulary of a token model: the first layer's (an embedding's).
template <class M>
constexpr std::size_t vocabulary_of() {
  return M::template layer<0>::spec::vocab;
}

/// Random inputs and targets for one batch of `P`.
template <class P>
std::vector<typename P::target_type> random_batch(P& p, std::uint64_t seed) {
  rng g(seed, 99);
  using input_entry = typename P::model_type::input_type;
  for (auto& x : p.input()) {
    if constexpr (requires { input_entry::tokens; }) {
      x = static_cast<typename P::scalar_type>(g.below(vocabulary_of<typename P::model_type>()));
    } else {
      x = static_cast<typename P::scalar_type>(g.uniform(-1.5, 1.5));
    }
  }
  std::vector<typename P::target_type> t(P::batch_size * P::targets_per_sample);
  for (auto& v : t) {
    if constexpr (std::is_same_v<typename P::target_type, std::uint32_t>) {
      v = static_cast<std::uint32_t>(g.below(P::bound_loss::class_count));
    } else {
      v = static_cast<float>(g.uniform(-1, 1));
    }
  }
  return t;
}

/// Central differences of the loss against the analytic gradient, for every
/// scalar of the flat parameter buffer. Returns the number of scalars checked.
template <class P>
std::size_t expect_gradients_match_finite_differences(P& p, const std::vector<typename P::target_type>& targets,
                                                      std::size_t valid = P::batch_size, double h = 1e-6,
                                                      double tolerance = 1e-6) {
  static_assert(std::is_same_v<typename P::scalar_type, double>, "check gradients in double");
  p.forward();
  p.backward(targets, valid);
  const std::vector<double> analytic(p.gradients().begin(), p.gradients().end());
  auto w = p.parameters();
  std::size_t checked = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double saved = w[i];
    w[i] = saved + h;
    p.forward();
    const double up = p.evaluate(targets, valid).loss;
    w[i] = saved - h;
    p.forward();
    const double down = p.evaluate(targets, valid).loss;
    w[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, tolerance * std::max(1.0, std::abs(numeric)))
        << "parameter scalar " << i << " of " << w.size();
    ++checked;
  }
  return checked;
}

/// A model and the loss it is trained with: one entry of a typed gradient test.
template <class M, class L>
struct case_ {
  using model = M;
  using loss = L;
};

/// Compiles Case in double at batch B, moves every parameter off its
/// initial value (biases start at zero, which would hide their gradients)
/// and checks every parameter's gradient against central differences.
template <class Case, std::size_t B>
void expect_case_gradients_match(std::uint64_t seed, double tolerance = 1e-6) {
  auto p = compile<typename Case::model, batch<B>, precision<double>, typename Case::loss>(seed);
  rng g(seed, 5);
  for (auto& w : p.parameters()) w += 0.1 * g.uniform(-1, 1);
  const auto targets = random_batch(p, seed + 1);
  const std::size_t checked = expect_gradients_match_finite_differences(p, targets, B, 1e-6, tolerance);
  EXPECT_GE(checked, Case::model::parameter_count);
}

}  // namespace kiln::testing
