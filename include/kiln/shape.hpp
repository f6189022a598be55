// kiln/shape.hpp — compile-time extents.
//
// WHAT THIS IS
//   `shape<D...>` names the extents of one sample (the batch is never part of
//   a shape). It is an empty literal type: its extents live in the type, so
//   two shapes are equal exactly when they are the same type, and every size
//   derived from them is a constant expression.
//
//   shape<28, 28>::rank == 2, shape<28, 28>::size == 784
//   flatten_t<shape<28, 28>>              is shape<784>
//   concat_t<shape<2>, shape<3, 4>>       is shape<2, 3, 4>
//   shape<10>{} == shape<10>{}            (and shape<10>{} != shape<5, 2>{})
//
// REQUIREMENTS
//   Every extent is at least 1.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include <kiln/fwd.hpp>

namespace kiln {

namespace diagnostics {
/// True when no extent is zero; printed by the compiler when one is.
template <std::size_t... Extents>
inline constexpr bool every_shape_extent_must_be_at_least_1 = ((Extents > 0) && ...);
}  // namespace diagnostics

template <std::size_t... Extents>
struct shape {
  static_assert(diagnostics::every_shape_extent_must_be_at_least_1<Extents...>,
                "kiln::shape: every extent must be at least 1");

  /// Number of extents (0 for a scalar shape<>).
  static constexpr std::size_t rank = sizeof...(Extents);
  /// Number of elements: the product of the extents.
  static constexpr std::size_t size = (std::size_t{1} * ... * Extents);
  /// The extents, outermost first.
  static constexpr std::array<std::size_t, rank> extents{Extents...};

  /// Extent `i` (0-based, outermost first).
  static constexpr std::size_t extent(std::size_t i) { return extents[i]; }
};

/// Shapes are equal when their extents are (i.e. when they are one type).
template <std::size_t... A, std::size_t... B>
constexpr bool operator==(shape<A...>, shape<B...>) noexcept {
  return std::is_same_v<shape<A...>, shape<B...>>;
}

/// `Shape<S>`: S is some `kiln::shape<...>`.
template <class S>
struct is_shape : std::false_type {};
template <std::size_t... D>
struct is_shape<shape<D...>> : std::true_type {};
template <class S>
concept Shape = is_shape<S>::value;

/// `ShapeOfRank<S, R>`: S is a shape with exactly R extents.
template <class S, std::size_t R>
concept ShapeOfRank = Shape<S> && S::rank == R;

namespace detail {
template <class A, class B>
struct concat;
template <std::size_t... A, std::size_t... B>
struct concat<shape<A...>, shape<B...>> {
  using type = shape<A..., B...>;
};
}  // namespace detail

/// The extents of A followed by those of B.
template <Shape A, Shape B>
using concat_t = typename detail::concat<A, B>::type;

/// A rank-1 shape with as many elements as S.
template <Shape S>
using flatten_t = shape<S::size>;

/// "shape<28, 28>": the spelling used in summaries and error messages.
template <std::size_t... D>
std::string to_string(shape<D...>) {
  std::string s = "shape<";
  bool first = true;
  ((s += (first ? "" : ", ") + std::to_string(D), first = false), ...);
  return s + ">";
}

}  // namespace kiln
