// kiln/layers/embedding.hpp — token ids to vectors.
//
// WHAT IT COMPUTES
//   For each of the L token ids of a sample, the row of the table E
//   (shape<Vocab, Dim>, row-major as PyTorch's nn.Embedding.weight) that the
//   id names. Backward adds each position's output gradient into its row.
//
// SHAPE CONTRACT
//   input shape<L> (token ids, e.g. from input_tokens<L>) → output shape<L, Dim>
//   parameter: E shape<Vocab, Dim>, normal with deviation 1/√Dim.
//   With `tied<Tag>` the table is the model's parameter Tag, which an
//   `unembed<tied<Tag>>` can then use as its output projection.
//
// REQUIREMENTS
//   Vocab ≥ 1, Dim ≥ 1; the input is rank 1. At run time each id must be an
//   integer in [0, Vocab): otherwise forward throws std::out_of_range naming
//   the layer, the sample, the position and the value.
//
// THREAD SAFETY
//   Stateless; see kiln/layer.hpp.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>
#include <kiln/tied.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool embedding_input_must_be_a_vector_of_token_ids = InputShape::rank == 1;
template <std::size_t Vocab, std::size_t Dim>
inline constexpr bool embedding_vocab_and_dim_must_be_at_least_1 = Vocab > 0 && Dim > 0;
template <class Option>
inline constexpr bool embedding_option_must_be_tied = is_tie<Option>::value && !Option::transposed;
}  // namespace diagnostics

template <std::size_t Vocab, std::size_t Dim, class... Options>
struct embedding {
  static_assert(diagnostics::embedding_vocab_and_dim_must_be_at_least_1<Vocab, Dim>,
                "kiln::embedding<Vocab, Dim>: Vocab and Dim must be at least 1");
  static_assert((diagnostics::embedding_option_must_be_tied<Options> && ...),
                "kiln::embedding<Vocab, Dim, Options...>: the only option is kiln::tied<Tag>");
  static_assert(diagnostics::a_layer_takes_at_most_one_tie<Options...>,
                "kiln::embedding<Vocab, Dim, Options...>: a layer has one weight, so at most one tie");

  using kiln_layer = void;
  static constexpr std::size_t vocab = Vocab, dim = Dim;
  using tie = typename detail::tie_of<void, Options...>::type;

  static std::string name() {
    return fmt::format("embedding<{}, {}{}>", Vocab, Dim, std::is_void_v<tie> ? "" : ", tied");
  }

  /// A tied table is declared by tag, so that unembed<tied<Tag>> finds its shape.
  using declared_parameters = std::conditional_t<
      std::is_void_v<tie>, kiln::declared_parameters<>,
      kiln::declared_parameters<param<typename detail::tie_of<detail::untied<void>, Options...>::type::tag,
                                      shape<Vocab, Dim>, init::lecun_normal>>>;

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<embedding, In, Position> {
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted (false too when its arguments were rejected).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::embedding_input_must_be_a_vector_of_token_ids<layer_at<Position, embedding>, In>,
                    "kiln::embedding: the input must be a vector of token ids (rank 1), e.g. input_tokens<L>");
      return diagnostics::embedding_input_must_be_a_vector_of_token_ids<layer_at<Position, embedding>, In> &&
             diagnostics::embedding_vocab_and_dim_must_be_at_least_1<Vocab, Dim>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    static constexpr std::size_t length = In::size;
    using output_shape = shape<length, Dim>;

    using table_tag = typename detail::tie_of<detail::untied<detail::auto_tag<Position, 0>>, Options...>::type::tag;
    using table_param = param<table_tag, shape<Vocab, Dim>, init::lecun_normal>;
    using parameters = param_list<table_param>;

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      const T* table = c.template param<table_tag>();
      for (std::size_t r = 0; r < length * Ctx::batch; ++r) {
        const std::size_t id = checked_id(c.x[r], r);
        std::copy_n(table + id * Dim, Dim, c.y + r * Dim);
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      T* grad = c.template grad<table_tag>();
      for (std::size_t r = 0; r < length * Ctx::batch; ++r) {
        // Checked again: the input may have changed since forward (or forward threw).
        T* row = grad + checked_id(c.x[r], r) * Dim;
        const T* dy = c.dy + r * Dim;
        for (std::size_t k = 0; k < Dim; ++k) row[k] += dy[k];
      }
    }

   private:
    template <class T>
    static std::size_t checked_id(T v, std::size_t r) {
      if (!(v >= T(0) && v < T(Vocab) && v == std::floor(v))) {
        throw std::out_of_range(
            fmt::format("kiln::{} (layer {}): token {} at position {} of sample {} of the batch "
                        "is not a token id in [0, {})",
                        name(), Position, v, r % length, r / length, Vocab));
      }
      return static_cast<std::size_t>(v);
    }
  };
};

}  // namespace kiln
