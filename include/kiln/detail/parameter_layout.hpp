// kiln/detail/parameter_layout.hpp — compile-time offsets of every parameter
// in the one flat buffer.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

namespace kiln::detail {

/// Parameters start on 16-element boundaries (64 bytes in f32) so that every
/// weight matrix is aligned for vector loads.
inline constexpr std::size_t parameter_alignment = 16;

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

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

  /// Elements that are parameters (excluding alignment padding).
  static constexpr std::size_t count = (std::size_t{0} + ... + P::shape_type::size);

  static constexpr std::array<std::size_t, sizeof...(P)> offsets = [] {
    std::array<std::size_t, sizeof...(P)> o{};
    std::size_t at = 0;
    for (std::size_t i = 0; i < sizeof...(P); ++i) {
      o[i] = at;
      at = round_up(at + sizes[i], parameter_alignment);
    }
    return o;
  }();

  /// Elements of the flat buffer, padding included.
  static constexpr std::size_t buffer_size = [] {
    std::size_t at = 0;
    for (std::size_t s : sizes) at = round_up(at + s, parameter_alignment);
    return at;
  }();

  template <class Tag>
  static constexpr std::size_t index_of() {
    std::size_t i = 0, found = sizeof...(P);
    ((std::is_same_v<Tag, typename P::tag> ? (found = i, ++i) : ++i), ...);
    return found;
  }

  template <class Tag>
  static constexpr bool contains = index_of<Tag>() < sizeof...(P);

  template <class Tag>
  requires contains<Tag>
  static constexpr std::size_t offset = offsets[index_of<Tag>()];
};

}  // namespace kiln::detail
