// kiln/layers/unembed.hpp — vectors back to token scores, through the
// embedding's own table.
//
// WHAT IT COMPUTES
//   logits = h · Eᵀ for every row h of the input, where E (shape<Vocab, Dim>)
//   is the table of the `embedding<Vocab, Dim, tied<Tag>>` elsewhere in the
//   model: one storage, so the two layers' gradients add up in one slot.
//
// SHAPE CONTRACT
//   input shape<Dim> → output shape<Vocab>, or shape<L, Dim> → shape<L, Vocab>.
//   parameter: the tied table Tag, shape<Vocab, Dim> (no bias).
//
// REQUIREMENTS
//   Exactly one option, `tied<Tag>`, naming a weight that an embedding of the
//   same model declares; the input's last extent equals that embedding's Dim.
//
// THREAD SAFETY
//   Stateless; see kiln/layer.hpp.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>
#include <type_traits>


#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>
#include <kiln/tied.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class... Options>
inline constexpr bool unembed_takes_one_option_tied_tag = sizeof...(Options) == 1 && (is_tie<Options>::value && ...);
template <class Tag, class LayerAt, class Declared>
inline constexpr bool unembed_needs_an_embedding_tied_to_the_same_tag = [] {
  if constexpr (std::is_void_v<Declared>) {
    return false;
  } else {
    return Declared::template has<Tag>;
  }
}();
template <class LayerAt, class InputShape, class TableShape>
inline constexpr bool unembed_input_width_must_equal_the_embedding_dim =
    InputShape::rank >= 1 && InputShape::rank <= 2 && InputShape::extent(InputShape::rank - 1) == TableShape::extent(1);
}  // namespace diagnostics

template <class... Options>
struct unembed {
  using kiln_layer = void;
  using tag = typename detail::tie_of<detail::untied<void>, Options...>::type::tag;
  static std::string name() { return "unembed<tied>"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<unembed, In, Position> {
    using provides = kiln::provides<member::reserve>;
    static constexpr bool one_tie = diagnostics::unembed_takes_one_option_tied_tag<layer_at<Position, unembed>, Options...>;
    static constexpr bool found =
        diagnostics::unembed_needs_an_embedding_tied_to_the_same_tag<tag, layer_at<Position, unembed>, Declared>;
    // (a stand-in shape when not found, so that the error below comes alone)
    using table_shape =
        typename detail::declared_shape_or<found, tag, Declared, shape<1, In::extent(In::rank - 1)>>::type;
    static constexpr std::size_t vocab = table_shape::extent(0), dim = table_shape::extent(1);
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::unembed_takes_one_option_tied_tag<layer_at<Position, unembed>, Options...>,
                    "kiln::unembed<tied<Tag>>: name the embedding's weight with exactly one tied<Tag>");
      // (Without a tie there is no Tag to look for: the error above comes alone.)
      static_assert(
          !one_tie ||
              diagnostics::unembed_needs_an_embedding_tied_to_the_same_tag<tag, layer_at<Position, unembed>, Declared>,
          "kiln::unembed<tied<Tag>>: no embedding<Vocab, Dim, tied<Tag>> in this model declares Tag");
      static_assert(
          diagnostics::unembed_input_width_must_equal_the_embedding_dim<layer_at<Position, unembed>, In, table_shape>,
          "kiln::unembed: the input's last extent must equal the tied embedding's Dim (rank 1 or 2 input)");
      return one_tie && found &&
             diagnostics::unembed_input_width_must_equal_the_embedding_dim<layer_at<Position, unembed>, In,
                                                                           table_shape>;
    }();
    static_assert(accepted || true);  // (it reports, once)

    static constexpr std::size_t rows = In::size / dim;
    using output_shape = std::conditional_t<In::rank == 1, shape<vocab>, shape<rows, vocab>>;
    using parameters = param_list<param<tag, table_shape, init::lecun_normal>>;

    template <std::size_t B, class T>
    static void reserve(detail::gemm_scratch<T>& g) {
      g.reserve(vocab, rows * B, dim);
      g.reserve(dim, vocab, rows * B);
      g.reserve(dim, rows * B, vocab);
    }

    // E is row-major [vocab, dim]: the column-major dim×vocab matrix Ec, and
    // the input is dim×(rows·B): logits = Ecᵀ·H.
    template <class Ctx>
    static void forward(const Ctx& c) {
      constexpr std::size_t n = rows * Ctx::batch;
      c.gemm->template run<true, false>(vocab, n, dim, c.template gemm_param<tag>(), dim, c.x, dim, c.y, vocab, false);
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      constexpr std::size_t n = rows * Ctx::batch;
      c.gemm->template run<false, true>(dim, vocab, n, c.x, dim, c.dy, vocab, c.template grad<tag>(), dim, true);
      if (c.dx)
        c.gemm->template run<false, false>(dim, n, vocab, c.template gemm_param<tag>(), dim, c.dy, vocab, c.dx, dim,
                                           false);
    }
  };
};

}  // namespace kiln
