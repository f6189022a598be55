// kiln/detail/gradient_zeroing.hpp — which parts of a model's gradient
// buffer backward zeroes first: layers add their gradients into it (a tied
// weight gets the sum of its uses), except the layers that declare
// `overwrites_gradients` and own their parameters alone, whose gradients are
// written, not added to, and so need no zeroing.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/layer.hpp>

namespace kiln::diagnostics {
template <class LayerAt, bool OwnsItsParameters>
inline constexpr bool a_layer_that_overwrites_gradients_must_own_its_parameters_alone = OwnsItsParameters;
}  // namespace kiln::diagnostics

namespace kiln::detail {

template <class Model>
struct gradient_zeroing {
  using layout = typename Model::parameters;

  /// True when the (top-level) layer L writes its parameters' gradients
  /// instead of adding to them (it declares `overwrites_gradients`). Such a
  /// layer must own its parameters alone: every tag is its own automatic
  /// one, so no other layer adds to the same gradient (checked here).
  template <class L>
  static constexpr bool overwrites_gradients() {
    if constexpr (lists<L, member::overwrites_gradients>) {
      static_assert(diagnostics::a_layer_that_overwrites_gradients_must_own_its_parameters_alone <
                        layer_at<L::position, typename L::spec>,
                    !L::overwrites_gradients || owns_its_parameters<L>() >,
                    "kiln: a layer that declares overwrites_gradients writes its parameters' gradients instead of "
                    "adding to them, so its parameters must be its own alone: no tied<Tag>, no tag another layer "
                    "names (declare it false when the layer is tied)");
      return L::overwrites_gradients;
    } else {
      return false;
    }
  }

  template <class Tag, std::size_t Position>
  struct is_own_tag : std::false_type {};
  template <std::size_t Position, std::size_t Slot>
  struct is_own_tag<auto_tag<Position, Slot>, Position> : std::true_type {};
  template <class L>
  static constexpr bool owns_its_parameters() {
    return []<class... P>(type_list<P...>) {
      constexpr std::array<bool, sizeof...(P) + 1> own{is_own_tag<typename P::tag, L::position>::value..., true};
      return std::find(own.begin(), own.end(), false) == own.end();
    }(typename L::parameters{});
  }
  template <class Owner>
  struct position_of_owner;
  template <std::size_t P, class Spec>
  struct position_of_owner<layer_at<P, Spec>> {
    static constexpr std::size_t value = P;
  };

  /// overwrites[k]: top-level layer k writes its parameters' gradients.
  static constexpr auto overwrites = []<class... L>(type_list<L...>) {
    return std::array<bool, sizeof...(L)>{overwrites_gradients<L>()...};
  }(typename Model::layer_types{});

  /// written[i]: parameter i's gradient is written (not added to) by the
  /// top-level layer that owns it. One table per model: which top-level
  /// layer sits at each position, and whether it overwrites.
  static constexpr auto written_by_their_layer = []<class... L, class... P>(type_list<L...>, type_list<P...>) {
    constexpr std::size_t positions = Model::bound_chain::next_position;
    constexpr std::array<std::size_t, sizeof...(L) + 1> at{L::position..., 0};
    std::array<bool, positions + 1> by_position{};
    for (std::size_t k = 0; k < sizeof...(L); ++k) by_position[at[k]] = overwrites[k];
    return std::array<bool, sizeof...(P)>{by_position[position_of_owner<typename P::owner>::value]...};
  }(typename Model::layer_types{}, typename Model::parameter_types{});

  /// The ranges [begin, end) of the gradient buffer that backward zeroes
  /// before the layers add into them: all of it (padding included) but the
  /// parameters of top-level layers that overwrite their gradients.
  static constexpr auto zeroed_ranges = [] {
    constexpr auto written = written_by_their_layer;
    std::array<std::pair<std::size_t, std::size_t>, layout::tensor_count + 1> ranges{};
    std::size_t n = 0, at = 0;
    for (std::size_t i = 0; i < layout::tensor_count; ++i) {
      if (!written[i]) continue;
      if (layout::offsets[i] > at) ranges[n++] = {at, layout::offsets[i]};
      at = layout::offsets[i] + layout::sizes[i];
    }
    if (layout::buffer_size > at) ranges[n++] = {at, layout::buffer_size};
    return std::pair{ranges, n};
  }();
};

}  // namespace kiln::detail
