// examples/custom_layer.hpp — a layer of your own, written with kiln's public
// names only (docs/concepts.md walks through it).
//
//   scaled_tanh:  y = tanh(g ⊙ x + b), per feature
//   input shape<D...> → the same shape; parameters g (ones) and b (zeros), each
//   of the input's shape; it keeps the pre-activation z = g ⊙ x + b from
//   forward to backward (an optional member: `saved`).
//
//   project<Units>:  y = W·x, a vector to Units features through kiln's
//   matrix product (kiln/gemm.hpp; an optional member: `reserve`).
#pragma once

#include <kiln/gemm.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

#include <cmath>
#include <cstddef>
#include <string>

// 1. The tags that name the layer's weights. Templated on the layer's
//    position, so that two scaled_tanh layers in one model have their own.
template <std::size_t Position>
struct scaled_tanh_gain {};
template <std::size_t Position>
struct scaled_tanh_bias {};

// 2. The spec: what you list in a model.
struct scaled_tanh {
  using kiln_layer = void;
  static std::string name() { return "scaled_tanh"; }

  // 3. Bound to the shape of its input and its position in the model.
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<scaled_tanh, In, Position> {
    using output_shape = In;
    using gain = scaled_tanh_gain<Position>;
    using bias = scaled_tanh_bias<Position>;
    using parameters = kiln::param_list<kiln::param<gain, In, kiln::init::ones>,  //
                                        kiln::param<bias, In, kiln::init::zeros>>;

    // 4. Optional members are listed once; kiln reads only these.
    using provides = kiln::provides<kiln::member::saved>;
    template <std::size_t B>
    static constexpr std::size_t saved = In::size * B;  // z, kept for backward

    // 5. Activations are features × batch, one sample per column.
    template <class Ctx>
    static void forward(const Ctx& c) {
      const auto* g = c.template param<gain>();
      const auto* b = c.template param<bias>();
      for (std::size_t s = 0; s < Ctx::batch; ++s)
        for (std::size_t i = 0; i < In::size; ++i) {
          const std::size_t k = s * In::size + i;
          c.saved[k] = g[i] * c.x[k] + b[i];
          c.y[k] = std::tanh(c.saved[k]);
        }
    }

    // 6. Backward adds to the parameters' gradients (a weight used twice
    //    gets the sum) and writes the input gradient unless it is null.
    template <class Ctx>
    static void backward(const Ctx& c) {
      const auto* g = c.template param<gain>();
      auto* dg = c.template grad<gain>();
      auto* db = c.template grad<bias>();
      for (std::size_t s = 0; s < Ctx::batch; ++s)
        for (std::size_t i = 0; i < In::size; ++i) {
          const std::size_t k = s * In::size + i;
          const auto y = std::tanh(c.saved[k]);
          const auto dz = c.dy[k] * (1 - y * y);
          dg[i] += dz * c.x[k];
          db[i] += dz;
          if (c.dx) c.dx[k] = dz * g[i];
        }
    }
  };
};

// A layer whose work is a matrix product: it runs kiln's GEMM through the
// context (ctx.gemm), after reserving each product's shape.
template <std::size_t Position>
struct projection {};

template <std::size_t Units>
struct project {
  using kiln_layer = void;
  static std::string name() { return "project<" + std::to_string(Units) + ">"; }

  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<project, In, Position> {
    static_assert(In::rank == 1, "project: the input must be a vector (put kiln::flatten before it)");
    static constexpr std::size_t in = In::size;
    using output_shape = kiln::shape<Units>;
    // Stored row-major [Units, in] (PyTorch's Linear.weight): column-major, the
    // in × Units matrix Wc with y = Wcᵀ·x.
    using weight = projection<Position>;
    using parameters = kiln::param_list<kiln::param<weight, kiln::shape<Units, in>, kiln::init::glorot_uniform>>;

    using provides = kiln::provides<kiln::member::reserve>;
    template <std::size_t B, class T>
    static void reserve(kiln::gemm_scratch<T>& g) {
      g.reserve(Units, B, in);  // y = Wcᵀ·x
      g.reserve(in, Units, B);  // dWc += x·dyᵀ
      g.reserve(in, B, Units);  // dx = Wc·dy
    }

    template <class Ctx>
    static void forward(const Ctx& c) {
      c.gemm->template run<true, false>(Units, Ctx::batch, in, c.template gemm_param<weight>(), in, c.x, in, c.y,
                                        Units, /*accumulate=*/false);
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      // Add to the weight's gradient (it may be shared), write dx if asked for.
      c.gemm->template run<false, true>(in, Units, Ctx::batch, c.x, in, c.dy, Units, c.template grad<weight>(), in,
                                        /*accumulate=*/true);
      if (c.dx)
        c.gemm->template run<false, false>(in, Ctx::batch, Units, c.template gemm_param<weight>(), in, c.dy, Units,
                                           c.dx, in, /*accumulate=*/false);
    }
  };
};
