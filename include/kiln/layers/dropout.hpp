// kiln/layers/dropout.hpp — inverted dropout, seeded and reproducible.
//
// WHAT IT COMPUTES   train mode: y = x · m / (1 − rate), each m ∈ {0, 1}
//                    drawn with P(m = 0) = rate = Drop/OutOf; eval mode: y = x.
//                    The mask is a hash of (the program's seed, the training
//                    step, the layer's position, the sample's global index
//                    in the step, the element): nothing is stored, backward
//                    recomputes it, and the same run draws the same masks
//                    however the step is split among replicas and ranks.
// SHAPE CONTRACT     input S (any shape) → output S; no parameters.
// REQUIREMENTS       the rate is Drop / Out of: 0 ≤ Drop < OutOf
//                    (`dropout<1, 4>` drops a quarter; `dropout<1, 10>` a
//                    tenth). Two integers, not a double, so that every
//                    C++20 compiler accepts it as a template argument.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, std::intmax_t Drop, std::intmax_t OutOf>
inline constexpr bool dropout_rate_must_be_at_least_0_and_below_1 = Drop >= 0 && OutOf > 0 && Drop < OutOf;
}  // namespace diagnostics

namespace detail {
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// True when element `index` of a dropout layer is kept (probability
/// 1 − rate), for the layer's `key` (from seed, step and position).
constexpr bool dropout_keeps(std::uint64_t key, std::uint64_t index, double rate) noexcept {
  const std::uint64_t h = mix64(key + 0x9E3779B97F4A7C15ull * (index + 1));
  return static_cast<double>(h >> 11) * 0x1.0p-53 >= rate;
}
}  // namespace detail

template <std::intmax_t Drop, std::intmax_t OutOf>
struct dropout {
  using kiln_layer = void;
  /// The probability of dropping a value (a stand-in of 0 when invalid, so that error comes alone).
  static constexpr double rate = Drop >= 0 && OutOf > 0 && Drop < OutOf ? double(Drop) / double(OutOf) : 0.0;
  static std::string name() { return fmt::format("dropout<{}, {}>", Drop, OutOf); }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<dropout, In, Position> {
    // Its check: one error, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::dropout_rate_must_be_at_least_0_and_below_1<layer_at<Position, dropout>, Drop, OutOf>,
                    "kiln::dropout<Drop, OutOf>: drops Drop values in OutOf (the rate Drop/OutOf), so 0 <= Drop < "
                    "OutOf; e.g. dropout<1, 4> drops a quarter");
      return diagnostics::dropout_rate_must_be_at_least_0_and_below_1<layer_at<Position, dropout>, Drop, OutOf>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using provides = kiln::provides<member::bf16_activations>;
    using output_shape = In;
    using parameters = param_list<>;
    /// Under precision<bf16> it reads and writes bf16 activations.
    static constexpr bool bf16_activations = true;

    template <class Ctx>
    static std::uint64_t key(const Ctx& c) noexcept {
      return detail::mix64(detail::mix64(detail::mix64(c.seed ^ 0xD50F) ^ c.step) ^ Position);
    }

    /// y = x·mask/(1 − rate) (forward, from x) or dx = dy·mask/(1 − rate) (backward, from dy).
    template <class Ctx, class V>
    static void apply(const Ctx& c, const V* in, V* out) {
      using T = typename Ctx::scalar;
      constexpr std::size_t n = In::size * Ctx::batch;
      if (!c.training || rate == 0.0) {
        std::copy_n(in, n, out);
        return;
      }
      const std::uint64_t k = key(c);
      const std::uint64_t first = c.first_sample * In::size;
      const T scale = static_cast<T>(1.0 / (1.0 - rate));
      for (std::size_t i = 0; i < n; ++i)
        out[i] =
            detail::dropout_keeps(k, first + i, rate) ? detail::stored_as<V>(detail::value_of(in[i]) * scale) : V{};
    }

    template <class Ctx>
    static void forward(const Ctx& c) {
      apply(c, c.x, c.y);
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (c.dx) apply(c, c.dy, c.dx);
    }
  };
};

}  // namespace kiln
