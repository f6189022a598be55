// kiln/detail/initialize.hpp — a model's parameters and state set from a
// seed: He-normal before relu, Glorot-uniform otherwise, biases zero (each
// parameter says which), state values zero or one. The same seed gives the
// same bits on every machine (kiln::rng).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <kiln/detail/type_list.hpp>
#include <kiln/layer.hpp>
#include <kiln/random.hpp>

namespace kiln::detail {

template <class P, class T>
void initialize_parameter(T* p, rng& g) {
  constexpr std::size_t n = P::shape_type::size;
  switch (static_cast<init>(P::initializer)) {
    case init::he_normal: {
      const double sd = std::sqrt(2.0 / static_cast<double>(P::fan_in));
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(sd * g.normal());
      break;
    }
    case init::glorot_uniform:
    case init::automatic: {
      const double limit = std::sqrt(6.0 / static_cast<double>(P::fan_in + P::fan_out));
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(g.uniform(-limit, limit));
      break;
    }
    case init::lecun_normal: {
      const double sd = std::sqrt(1.0 / static_cast<double>(P::fan_in));
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(sd * g.normal());
      break;
    }
    case init::zeros:
      std::fill_n(p, n, T(0));
      break;
    case init::ones:
      std::fill_n(p, n, T(1));
      break;
  }
}

/// Model's parameters (its flat layout, padding zero) and state from seed.
template <class Model, class T>
void initialize_model(T* params, T* state, std::uint64_t seed) {
  using layout = typename Model::parameters;
  using state_layout = typename Model::state_layout;
  rng g(seed, /*stream=*/0x1417);
  std::fill_n(params, layout::buffer_size, T(0));
  // One braced list, not a loop body per parameter: no function here is
  // instantiated once per parameter under a name that spells the model.
  [&]<class... P>(type_list<P...>) {
    std::size_t i = 0;  // (parameter_types is in buffer order)
    [[maybe_unused]] const int order[] = {0, (initialize_parameter<P>(params + layout::offsets[i++], g), 0)...};
  }(typename Model::parameter_types{});
  std::fill_n(state, state_layout::buffer_size, T(0));
  [&]<class... P>(type_list<P...>) {
    std::size_t i = 0;
    [[maybe_unused]] const int order[] = {
        0, (std::fill_n(state + state_layout::offsets[i++], P::shape_type::size,
                        static_cast<init>(P::initializer) == init::ones ? T(1) : T(0)),
            0)...};
  }(typename Model::state_types{});
}

}  // namespace kiln::detail
