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
  static_assert(diagnostics::input_rank_must_be_1_2_or_3<Extents...>,
                "kiln::input<D...>: an input sample has 1 to 3 extents, e.g. input<784> or input<28, 28>");
  using shape_type = shape<Extents...>;
};

template <class T> struct is_input : std::false_type {};
template <std::size_t... D> struct is_input<input<D...>> : std::true_type {};

/// `Input<I>`: I is a kiln::input<...>.
template <class I>
concept Input = is_input<I>::value;

}  // namespace kiln
