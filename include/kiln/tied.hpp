// kiln/tied.hpp — weights shared by type.
//
// WHAT IT IS
//   `tied<Tag>` is an option of any layer that owns a weight: the weight is
//   named by the type `Tag` (declare one: `struct tok_embed;`). Every layer of
//   a model that names the same tag reads and writes ONE parameter in the
//   flat buffer, and backward adds every use's gradient into its one gradient
//   slot. The tie is part of the model's type: copies of the program, its
//   replicas and its checkpoints cannot separate the uses.
//
//   `tied_transposed<Tag>` is the explicit form for a layer that uses the
//   weight transposed (dense<10, tied<A>> stores shape<10, In>; a later
//   dense<In, tied_transposed<A>> reads that same storage as its transpose).
//   kiln never guesses a transposition.
//
// SHAPE CONTRACT
//   Every use of a tag must want the same stored shape (after the declared
//   transposition); otherwise compilation stops naming the tag, both layers
//   with their positions, and both shapes. `parameter_count` counts a tied
//   weight once.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <type_traits>

#include <kiln/layer.hpp>

namespace kiln {

/// Option: this layer's weight is the parameter named by Tag.
template <class Tag>
struct tied {
  using tag = Tag;
  static constexpr bool transposed = false;
};

/// Option: this layer's weight is the transpose of the parameter named by Tag.
template <class Tag>
struct tied_transposed {
  using tag = Tag;
  static constexpr bool transposed = true;
};

template <class T>
struct is_tie : std::false_type {};
template <class Tag>
struct is_tie<tied<Tag>> : std::true_type {};
template <class Tag>
struct is_tie<tied_transposed<Tag>> : std::true_type {};

namespace detail {
/// The tie among Options..., or `Default` (an untied, unique weight).
template <class Default, class... Options>
struct tie_of {
  using type = Default;
};
template <class Default, class First, class... Rest>
struct tie_of<Default, First, Rest...>
    : std::conditional_t<is_tie<First>::value, std::type_identity<First>, tie_of<Default, Rest...>> {};

/// A weight nobody tied: its own, untransposed.
template <class Tag>
struct untied {
  using tag = Tag;
  static constexpr bool transposed = false;
};
}  // namespace detail

namespace diagnostics {
template <class... Options>
inline constexpr bool a_layer_takes_at_most_one_tie = ((is_tie<Options>::value ? 1 : 0) + ... + 0) <= 1;
}  // namespace diagnostics

}  // namespace kiln
