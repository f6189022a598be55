// kiln/detail/elementwise.hpp — the binding shared by element-wise activations.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>

#include <Eigen/Core>
#include <boost/hana/tuple.hpp>

#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

/// An activation `Fn` (with static `forward(x, y)` and either
/// `backward(y, dy, dx)` or, declaring `needs_input`, `backward_from_input(x,
/// dy, dx)`, over Eigen arrays) as a layer: any input shape, the same output
/// shape, no parameters.
template <class Spec, class Fn>
struct elementwise_layer {
  using kiln_layer = void;

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<Spec, In, Position> {
    using output_shape = In;
    static constexpr auto parameters = boost::hana::tuple_t<>;

    template <class Ctx>
    static void forward(const Ctx& c) {
      using A = Eigen::Array<typename Ctx::scalar, Eigen::Dynamic, 1>;
      constexpr auto n = static_cast<Eigen::Index>(In::size * Ctx::batch);
      Eigen::Map<A> y(c.y, n);
      Fn::forward(Eigen::Map<const A>(c.x, n), y);
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (!c.dx) return;
      using A = Eigen::Array<typename Ctx::scalar, Eigen::Dynamic, 1>;
      constexpr auto n = static_cast<Eigen::Index>(In::size * Ctx::batch);
      Eigen::Map<A> dx(c.dx, n);
      if constexpr (requires { Fn::needs_input; }) {
        Fn::backward_from_input(Eigen::Map<const A>(c.x, n), Eigen::Map<const A>(c.dy, n), dx);
      } else {
        Fn::backward(Eigen::Map<const A>(c.y, n), Eigen::Map<const A>(c.dy, n), dx);
      }
    }
  };
};

}  // namespace kiln::detail
