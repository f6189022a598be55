// kiln/layers/dense.hpp — fully connected layer.
//
// WHAT IT COMPUTES
//   y = W·x + b for every sample, W of shape<Units, In> (row-major, as
//   PyTorch's nn.Linear.weight), b of shape<Units>.
//
// SHAPE CONTRACT
//   input shape<In>  →  output shape<Units>
//   parameters: weight shape<Units, In> (He before relu, Glorot otherwise),
//               bias shape<Units> (zeros) unless `no_bias` is given.
//   With `tied<Tag>` the weight is the model's parameter Tag (shape<Units, In>);
//   with `tied_transposed<Tag>` it is Tag's transpose (Tag is shape<In, Units>).
//
// REQUIREMENTS
//   Units ≥ 1. The input is a vector (rank 1): put kiln::flatten before a
//   dense layer fed an image. Options: `no_bias`, one `tied<Tag>` or
//   `tied_transposed<Tag>` (kiln/tied.hpp).
//
// THREAD SAFETY
//   Stateless; see kiln/layer.hpp.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/lane_sum.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>
#include <kiln/tied.hpp>

namespace kiln {

/// Option of dense: no bias term (y = W·x).
struct no_bias {};

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool dense_input_must_be_a_vector_use_flatten_first = InputShape::rank == 1;
template <class LayerAt, std::size_t Units>
inline constexpr bool dense_units_must_be_at_least_1 = Units > 0;
template <class Option>
inline constexpr bool dense_option_must_be_no_bias_or_a_tie = std::is_same_v<Option, no_bias> || is_tie<Option>::value;
}  // namespace diagnostics

template <std::size_t Units, class... Options>
struct dense {
  using kiln_layer = void;
  /// Units, or 1 as a stand-in when Units is 0 (so that error comes alone).
  static constexpr std::size_t units = Units > 0 ? Units : 1;
  static constexpr bool has_bias = !(std::is_same_v<Options, no_bias> || ...);

  static std::string name() {
    std::string n = "dense<" + std::to_string(Units) + (has_bias ? "" : ", no_bias");
    using tie = typename detail::tie_of<void, Options...>::type;
    if constexpr (!std::is_void_v<tie>) n += tie::transposed ? ", tied_transposed" : ", tied";
    return n + ">";
  }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<dense, In, Position> {
    using provides = kiln::provides<member::overwrites_gradients, member::bf16_activations, member::reserve>;
    // Its checks (of its arguments too): one error each, and the class stays
    // whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      using at = layer_at<Position, dense>;
      static_assert(diagnostics::dense_units_must_be_at_least_1<at, Units>,
                    "kiln::dense<Units>: Units must be at least 1");
      static_assert((diagnostics::dense_option_must_be_no_bias_or_a_tie<Options> && ...),
                    "kiln::dense<Units, Options...>: the options are kiln::no_bias, kiln::tied<Tag> and "
                    "kiln::tied_transposed<Tag>");
      static_assert(diagnostics::a_layer_takes_at_most_one_tie<Options...>,
                    "kiln::dense<Units, Options...>: a layer has one weight, so at most one tie");
      static_assert(diagnostics::dense_input_must_be_a_vector_use_flatten_first<at, In>,
                    "kiln::dense: the input must be a vector (rank 1); put kiln::flatten before this layer");
      return diagnostics::dense_units_must_be_at_least_1<at, Units> &&
             (diagnostics::dense_option_must_be_no_bias_or_a_tie<Options> && ...) &&
             diagnostics::a_layer_takes_at_most_one_tie<Options...> &&
             diagnostics::dense_input_must_be_a_vector_use_flatten_first<at, In>;
    }();
    static_assert(accepted || true);  // (it reports, once)

    using output_shape = shape<units>;
    static constexpr std::size_t in = In::size;

    using tie = typename detail::tie_of<detail::untied<detail::auto_tag<Position, 0>>, Options...>::type;
    static constexpr bool transposed = tie::transposed;
    /// An untied dense layer owns its parameters: backward may write their
    /// gradients rather than add to zeros (see layer_context).
    static constexpr bool overwrites_gradients = std::is_same_v<tie, detail::untied<detail::auto_tag<Position, 0>>>;
    /// Under precision<bf16> it reads and writes bf16 activations (kiln/layer.hpp).
    static constexpr bool bf16_activations = true;
    using weight_tag = typename tie::tag;
    using bias_tag = detail::auto_tag<Position, 1>;
    using weight_shape = std::conditional_t<transposed, shape<in, units>, shape<units, in>>;
    using weight_param = param<weight_tag, weight_shape, init::automatic>;
    using bias_param = param<bias_tag, shape<units>, init::zeros>;

    using parameters =
        std::conditional_t<has_bias, param_list<weight_param, bias_param>, param_list<weight_param>>;

    template <std::size_t B, class T>
    static void reserve(detail::gemm_scratch<T>& g) {
      g.reserve(Units, B, in);  // forward
      g.reserve(in, B, Units);  // input gradient
      g.reserve(in, Units, B);  // weight gradient
      g.reserve(Units, in, B);  // weight gradient, transposed storage
    }

    // Column-major views: x is in×B, y is Units×B. The stored weight is
    // row-major [Units, in], i.e. the column-major in×Units matrix Wc with
    // y = Wcᵀx; transposed storage is row-major [in, Units], the column-major
    // Units×in matrix M with y = M·x.
    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      constexpr std::size_t B = Ctx::batch;
      const auto* w = c.template gemm_param<weight_tag>();
      // bf16 activations: the product accumulates in f32 (ctx.wide), then
      // the bias is added as it is rounded into y.
      T* y;
      if constexpr (Ctx::bf16_activations) {
        y = c.wide;
      } else {
        y = c.y;
        if constexpr (has_bias) {
          Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> b(c.template param<bias_tag>(), Units);
          Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(y, Units, B).colwise() = b;
        }
      }
      constexpr bool add = has_bias && !Ctx::bf16_activations;
      if constexpr (transposed) {
        c.gemm->template run<false, false>(Units, B, in, w, Units, c.x, in, y, Units, add);
      } else {
        c.gemm->template run<true, false>(Units, B, in, w, in, c.x, in, y, Units, add);
      }
      if constexpr (Ctx::bf16_activations) {
        const T* bias = nullptr;
        if constexpr (has_bias) bias = c.template param<bias_tag>();
        detail::narrow_columns(y, Units, B, bias, c.y);
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      constexpr std::size_t B = Ctx::batch;
      const auto* w = c.template gemm_param<weight_tag>();
      T* dw = c.template grad<weight_tag>();
      const bool add = !c.overwrite_gradients;
      if constexpr (transposed) {
        c.gemm->template run<false, true>(Units, in, B, c.dy, Units, c.x, in, dw, Units, add);  // dM (+)= dy·xᵀ
      } else {
        c.gemm->template run<false, true>(in, Units, B, c.x, in, c.dy, Units, dw, in, add);  // dWc (+)= x·dyᵀ
      }
      // db (+)= Σ over the batch, in one order on every CPU (detail/lane_sum.hpp)
      if constexpr (has_bias) detail::row_sums(c.dy, Units, B, c.template grad<bias_tag>(), add);
      if (c.dx) {
        if constexpr (transposed) {
          c.gemm->template run<true, false>(in, B, Units, w, Units, c.dy, Units, c.dx, in, false);  // dx = Mᵀ·dy
        } else {
          c.gemm->template run<false, false>(in, B, Units, w, in, c.dy, Units, c.dx, in, false);  // dx = Wc·dy
        }
      }
    }
  };
};

}  // namespace kiln
