// kiln/detail/parameter_layout.hpp — compile-time offsets of every parameter
// in the one flat buffer.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

#include <kiln/detail/type_list.hpp>

namespace kiln::detail {

/// Parameters start on 16-element boundaries (64 bytes in f32) so that every
/// weight matrix is aligned for vector loads.
inline constexpr std::size_t parameter_alignment = 16;

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// Where consecutive regions of the given sizes start when each starts
/// aligned, from `start` on; the last entry is where the last region ends.
template <std::size_t N>
constexpr std::array<std::size_t, N + 1> aligned_regions(const std::array<std::size_t, N>& sizes,
                                                         std::size_t start = 0) {
  std::array<std::size_t, N + 1> at{};
  at[0] = start;
  for (std::size_t i = 0; i < N; ++i) at[i + 1] = at[i] + round_up(sizes[i], parameter_alignment);
  return at;
}

/// A parameter as the model stores it: one per tag, with the resolved
/// initialiser and the fan-in/fan-out that initialiser uses.
template <class Tag, class Shape, int Init, std::size_t FanIn, std::size_t FanOut, class Owner>
struct stored_param {
  using tag = Tag;
  using owner = Owner;  ///< kiln::layer_at<Position, Spec> of the first layer that uses it
  using shape_type = Shape;
  static constexpr int initializer = Init;
  static constexpr std::size_t fan_in = FanIn;
  static constexpr std::size_t fan_out = FanOut;
};

template <class... P>
struct parameter_layout {
  static constexpr std::size_t tensor_count = sizeof...(P);
  static constexpr std::array<std::size_t, sizeof...(P)> sizes{P::shape_type::size...};
  /// The parameters, in buffer order.
  using list = type_list<P...>;

  /// Elements that are parameters (excluding alignment padding).
  static constexpr std::size_t count = [] {
    std::size_t n = 0;
    for (std::size_t s : sizes) n += s;
    return n;
  }();

  /// Where each parameter starts; the last entry is the buffer's size.
  static constexpr std::array<std::size_t, sizeof...(P) + 1> offsets = aligned_regions(sizes);

  /// Elements of the flat buffer, padding included.
  static constexpr std::size_t buffer_size = offsets[sizeof...(P)];

  /// Tags are found by hash (O(log N) a lookup), not by comparing with each.
  using tags = tag_index<typename P::tag...>;

  template <class Tag>
  static constexpr std::size_t index_of() {
    return tags::template find<Tag>;
  }

  template <class Tag>
  static constexpr bool contains = tags::template find<Tag> < sizeof...(P);

  template <class Tag>
  requires contains<Tag>
  static constexpr std::size_t offset = offsets[tags::template find<Tag>];
};

/// The layout of a type_list of parameters.
template <class List>
struct layout_of_list;
template <class... P>
struct layout_of_list<type_list<P...>> {
  using type = parameter_layout<P...>;
};
template <class List>
using layout_of_t = typename layout_of_list<List>::type;

}  // namespace kiln::detail
