// kiln/layers/dropout.hpp — inverted dropout, seeded and reproducible.
//
// WHAT IT COMPUTES   train mode: y = x · m / (1 − Rate), each m ∈ {0, 1}
//                    drawn with P(m = 0) = Rate; eval mode: y = x.
//                    The mask is a hash of (the program's seed, the training
//                    step, the layer's position, the sample's global index
//                    in the step, the element): nothing is stored, backward
//                    recomputes it, and the same run draws the same masks
//                    however the step is split among replicas and ranks.
// SHAPE CONTRACT     input S (any shape) → output S; no parameters.
// REQUIREMENTS       0 ≤ Rate < 1 (a double template argument: dropout<0.1>).
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <double Rate>
inline constexpr bool dropout_rate_must_be_at_least_0_and_below_1 = Rate >= 0.0 && Rate < 1.0;
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

template <double Rate>
struct dropout {
  static_assert(diagnostics::dropout_rate_must_be_at_least_0_and_below_1<Rate>,
                "kiln::dropout<Rate>: Rate is the probability of dropping a value: 0 <= Rate < 1");
  using kiln_layer = void;
  static constexpr double rate = Rate;
  static std::string name() { return fmt::format("dropout<{}>", Rate); }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<dropout, In, Position> {
    using output_shape = In;
    static constexpr auto parameters = boost::hana::tuple_t<>;
    /// Under precision<bf16> it reads and writes bf16 activations.
    static constexpr bool bf16_activations = true;

    template <class Ctx>
    static std::uint64_t key(const Ctx& c) noexcept {
      return detail::mix64(detail::mix64(detail::mix64(c.seed ^ 0xD50F) ^ c.step) ^ Position);
    }

    /// y = x·mask/(1 − Rate) (forward, from x) or dx = dy·mask/(1 − Rate) (backward, from dy).
    template <class Ctx, class V>
    static void apply(const Ctx& c, const V* in, V* out) {
      using T = typename Ctx::scalar;
      constexpr std::size_t n = In::size * Ctx::batch;
      if (!c.training || Rate == 0.0) {
        std::copy_n(in, n, out);
        return;
      }
      const std::uint64_t k = key(c);
      const std::uint64_t first = c.first_sample * In::size;
      const T scale = static_cast<T>(1.0 / (1.0 - Rate));
      for (std::size_t i = 0; i < n; ++i)
        out[i] =
            detail::dropout_keeps(k, first + i, Rate) ? detail::stored_as<V>(detail::value_of(in[i]) * scale) : V{};
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
