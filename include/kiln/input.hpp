// kiln/input.hpp — the first entry of every model.
//
// WHAT IT IS         `input<D...>`: one sample is a tensor of shape<D...> of
//                    real numbers (pixels, features), rank 1 to 3.
// SHAPE CONTRACT     output shape<D...>; no parameters.
#pragma once

#include <cstddef>
#include <type_traits>

#include <kiln/fwd.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <std::size_t... Extents>
inline constexpr bool input_rank_must_be_1_2_or_3 = sizeof...(Extents) >= 1 && sizeof...(Extents) <= 3;
}  // namespace diagnostics

template <std::size_t... Extents>
struct input {
  // Its check: one error, and the class stays whole (kiln::model runs it
  // first, with its own; see bound_layer_base::accepted).
  static constexpr bool accepted = [] {
    static_assert(diagnostics::input_rank_must_be_1_2_or_3<Extents...>,
                  "kiln::input<D...>: an input sample has 1 to 3 extents, e.g. input<784> or input<28, 28>");
    return diagnostics::input_rank_must_be_1_2_or_3<Extents...>;
  }();
  /// shape<D...>, or a vector of as many values as a stand-in when rejected.
  using shape_type = std::conditional_t<diagnostics::input_rank_must_be_1_2_or_3<Extents...>, shape<Extents...>,
                                        shape<(std::size_t{1} * ... * Extents)>>;
};

namespace diagnostics {
template <std::size_t Length>
inline constexpr bool input_tokens_length_must_be_at_least_1 = Length > 0;
}  // namespace diagnostics

/// The first entry of a language model: one sample is `Length` token ids.
/// They travel as exact small integers in the program's (floating-point)
/// input, so a dataset's features hold them as floats; the embedding that
/// reads them checks at run time that each is an integer id in range.
/// SHAPE CONTRACT: output shape<Length>; no parameters.
template <std::size_t Length>
struct input_tokens {
  // Its check: one error, and the class stays whole (kiln::model runs it
  // first, with its own; see bound_layer_base::accepted).
  static constexpr bool accepted = [] {
    static_assert(diagnostics::input_tokens_length_must_be_at_least_1<Length>,
                  "kiln::input_tokens<Length>: a sample holds at least one token");
    return diagnostics::input_tokens_length_must_be_at_least_1<Length>;
  }();
  using shape_type = shape<(Length > 0 ? Length : 1)>;  // (a stand-in of one token when rejected)
  static constexpr bool tokens = true;
};

template <class T>
struct is_input : std::false_type {};
template <std::size_t... D>
struct is_input<input<D...>> : std::true_type {};
template <std::size_t L>
struct is_input<input_tokens<L>> : std::true_type {};

/// `Input<I>`: I is a kiln::input<...>.
template <class I>
concept Input = is_input<I>::value;

}  // namespace kiln
