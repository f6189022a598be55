// kiln/detail/elementwise.hpp — the binding shared by element-wise activations.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>

#include <Eigen/Core>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

// GCC 12 reports its own AVX-512 intrinsics' `__Y = __Y` idiom, inlined
// through Eigen's packet code, as maybe uninitialized (GCC bug 105593): a
// user's -Werror build would stop on it. Not kiln's or the user's code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::detail {

/// An activation `Fn` (with static `forward(x, y)` and either
/// `backward(y, dy, dx)` or, declaring `needs_input`, `backward_from_input(x,
/// dy, dx)`, over Eigen arrays) as a layer: any input shape, the same output
/// shape, no parameters. bf16 activations are widened, computed on and
/// rounded back a block at a time (f32 arithmetic, bf16 storage). An `Fn`
/// declaring `needs_input_and_output` as well has its
/// `backward_from_input_and_output(x, y, dy, dx)` called where the output
/// is stored at full precision (not bf16): gelu takes Φ(x) = y / x there.
/// One declaring `tabulates_bf16_values` has, with bf16 activations,
/// `forward_of_bf16_values(x, y)` called instead of `forward`, and (if it
/// declares `needs_input`) `backward_from_bf16_input(x, dy, dx)` instead of
/// `backward_from_input`: the same results, looked up
/// (detail/bf16_value_table.hpp). One declaring `works_on_bf16_bits` true
/// has, with bf16 activations, `forward_of_bf16(x, n, y)` and
/// `backward_from_bf16(v, dy, n, dx)` (v: x with `needs_input`, else y)
/// called on the whole arrays instead, computed on the 16-bit values (relu:
/// detail/relu_bf16.hpp, which says where its bits differ).
template <class Spec, class Fn>
struct elementwise_layer {
  using kiln_layer = void;

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<Spec, In, Position> {
    using provides = kiln::provides<member::bf16_activations>;
    using output_shape = In;
    using parameters = param_list<>;
    static constexpr bool bf16_activations = true;

    template <class Ctx>
    static void forward(const Ctx& c) {
      using A = Eigen::Array<typename Ctx::scalar, Eigen::Dynamic, 1>;
      constexpr auto n = static_cast<Eigen::Index>(In::size * Ctx::batch);
      if constexpr (Ctx::bf16_activations && on_bits) {
        Fn::forward_of_bf16(c.x, static_cast<std::size_t>(n), c.y);
      } else if constexpr (Ctx::bf16_activations) {
        alignas(64) float xs[block], ys[block];
        for (Eigen::Index i = 0; i < n; i += block) {
          const Eigen::Index m = std::min<Eigen::Index>(block, n - i);
          widen(c.x + i, static_cast<std::size_t>(m), xs);
          Eigen::Map<A> y(ys, m);
          if constexpr (tabulated) {
            Fn::forward_of_bf16_values(Eigen::Map<const A>(xs, m), y);
          } else {
            Fn::forward(Eigen::Map<const A>(xs, m), y);
          }
          narrow(ys, static_cast<std::size_t>(m), c.y + i);
        }
      } else {
        Eigen::Map<A> y(c.y, n);
        Fn::forward(Eigen::Map<const A>(c.x, n), y);
      }
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (!c.dx) return;
      using A = Eigen::Array<typename Ctx::scalar, Eigen::Dynamic, 1>;
      constexpr auto n = static_cast<Eigen::Index>(In::size * Ctx::batch);
      constexpr bool from_input = requires { Fn::needs_input; };
      const auto* v = from_input ? c.x : c.y;  // what the derivative is computed from
      if constexpr (!Ctx::bf16_activations && requires { Fn::needs_input_and_output; }) {
        Eigen::Map<A> out(c.dx, n);
        Fn::backward_from_input_and_output(Eigen::Map<const A>(c.x, n), Eigen::Map<const A>(c.y, n),
                                           Eigen::Map<const A>(c.dy, n), out);
      } else if constexpr (Ctx::bf16_activations && on_bits) {
        Fn::backward_from_bf16(v, c.dy, static_cast<std::size_t>(n), c.dx);
      } else if constexpr (Ctx::bf16_activations) {
        alignas(64) float vs[block];
        for (Eigen::Index i = 0; i < n; i += block) {
          const Eigen::Index m = std::min<Eigen::Index>(block, n - i);
          widen(v + i, static_cast<std::size_t>(m), vs);
          if constexpr (tabulated && from_input) {
            Eigen::Map<A> out(c.dx + i, m);
            Fn::backward_from_bf16_input(Eigen::Map<const A>(vs, m), Eigen::Map<const A>(c.dy + i, m), out);
          } else {
            backward_block<from_input>(Eigen::Map<const A>(vs, m), Eigen::Map<const A>(c.dy + i, m), c.dx + i, m);
          }
        }
      } else {
        backward_block<from_input>(Eigen::Map<const A>(v, n), Eigen::Map<const A>(c.dy, n), c.dx, n);
      }
    }

   private:
    static constexpr Eigen::Index block = 256;  ///< bf16: values widened at a time
    static constexpr bool tabulated = requires { Fn::tabulates_bf16_values; };
    static constexpr bool on_bits = [] {
      if constexpr (requires { Fn::works_on_bf16_bits; }) {
        return static_cast<bool>(Fn::works_on_bf16_bits);
      } else {
        return false;
      }
    }();
    template <bool FromInput, class V, class DY, class T>
    static void backward_block(const V& v, const DY& dy, T* dx, Eigen::Index n) {
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> out(dx, n);
      if constexpr (FromInput) {
        Fn::backward_from_input(v, dy, out);
      } else {
        Fn::backward(v, dy, out);
      }
    }
  };
};

}  // namespace kiln::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
