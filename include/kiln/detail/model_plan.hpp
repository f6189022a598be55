// kiln/detail/model_plan.hpp — where a model's batch lives: the activation
// slots, saved and scratch regions, and under bf16 which layers run on
// widened f32 copies (kiln::model::memory_plan derives from it).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

#include <kiln/bf16.hpp>
#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

/// Where a model's batch of B lives (kiln::model::memory_plan): tables
/// made by one pack expansion each.
template <class Layers, Shape In, std::size_t B, class T>
struct model_plan;
template <class... L, Shape In, std::size_t B, class T>
struct model_plan<type_list<L...>, In, B, T> {
  static constexpr std::size_t layer_count = sizeof...(L);
  static constexpr std::size_t alignment = parameter_alignment;
  /// Parameters, gradients, scratch and saved values: f32 under bf16.
  using scalar = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
  static constexpr bool bf16_activations = std::is_same_v<T, bf16>;
  static constexpr std::array<bool, layer_count + 1> view{L::is_view..., false};
  /// The first layer that computes (layer_count when none does).
  static constexpr std::size_t first_computing = first_computing_index(type_list<L...>{});
  /// bf16: the input is rounded into slot 0 when the first layer that
  /// computes may have it rounded (detail::takes_bf16_input); otherwise
  /// that layer runs in f32 on the input as it is (token ids must stay
  /// exact, even for an embedding inside a model used as a layer).
  static constexpr bool input_in_bf16 = [] {
    constexpr std::array<bool, layer_count + 1> takes{takes_bf16_input<L>()..., true};
    return bf16_activations && takes[first_computing];
  }();
  /// bf16: layer k (0-based) computes in f32 on widened copies of its
  /// input and output (it does not take bf16, or it is the first layer and
  /// the input stays f32).
  static constexpr std::array<bool, layer_count + 1> widened = [] {
    constexpr std::array<bool, layer_count + 1> takes{takes_bf16_activations<L>()..., false};
    std::array<bool, layer_count + 1> w{};
    for (std::size_t k = 0; k < layer_count; ++k)
      w[k] = bf16_activations && !view[k] && (!takes[k] || (k == first_computing && !input_in_bf16));
    return w;
  }();
  /// Per layer, `f32[k]` where it runs widened, else `as_stored[k]`.
  static constexpr std::array<std::size_t, layer_count> as_run(const std::array<std::size_t, layer_count>& f32,
                                                               const std::array<std::size_t, layer_count>& as_stored) {
    std::array<std::size_t, layer_count> s{};
    for (std::size_t k = 0; k < layer_count; ++k) s[k] = widened[k] ? f32[k] : as_stored[k];
    return s;
  }
  /// A layer's saved and workspace elements, as it runs (in f32 when widened).
  static constexpr std::array<std::size_t, layer_count> saved_each =
      as_run({saved_of<L, B, scalar>()...}, {saved_of<L, B, T>()...});
  static constexpr std::array<std::size_t, layer_count> workspace_each =
      as_run({workspace_of<L, B, scalar>()...}, {workspace_of<L, B, T>()...});
  /// Element sizes of each slot: slot 0 is the input, slot k the output of
  /// layer k; a view layer (flatten) shares its input's slot.
  static constexpr std::array<std::size_t, layer_count + 1> slot = [] {
    std::array<std::size_t, layer_count + 1> s{};
    std::size_t next = 1;
    for (std::size_t k = 1; k <= layer_count; ++k) s[k] = view[k - 1] ? s[k - 1] : next++;
    return s;
  }();
  static constexpr std::array<std::size_t, layer_count + 1> activation_offset = [] {
    constexpr std::array<std::size_t, layer_count + 1> sizes{In::size * B, L::output_shape::size * B...};
    std::array<std::size_t, layer_count + 1> off{};
    std::size_t at = 0;
    for (std::size_t i = 0; i <= layer_count; ++i) {
      if (i > 0 && slot[i] == slot[i - 1]) {
        off[i] = off[i - 1];
      } else {
        off[i] = at;
        at = round_up(at + sizes[i], alignment);
      }
    }
    return off;
  }();
  static constexpr std::size_t activation_elements = [] {
    constexpr std::array<std::size_t, layer_count + 1> sizes{L::output_shape::size * B..., 0};
    std::size_t at = round_up(In::size * B, alignment);
    for (std::size_t k = 0; k < layer_count; ++k)
      if (!view[k]) at += round_up(sizes[k], alignment);
    return at;
  }();
  /// Two ping-pong buffers, each as large as the largest activation.
  static constexpr std::size_t gradient_slot_elements =
      round_up(std::max({In::size, L::output_shape::size...}) * B, alignment);
  static constexpr std::size_t gradient_elements = 2 * gradient_slot_elements;
  /// Working memory a layer borrows during its forward or backward (a
  /// convolution's unfolded input): the largest any layer asks for, shared
  /// since layers run one after another.
  static constexpr std::size_t scratch_elements = [] {
    std::size_t m = 0;
    for (std::size_t w : workspace_each) m = std::max(m, w);
    return round_up(m, alignment);
  }();
  static constexpr std::size_t scratch_bytes = scratch_elements * sizeof(scalar);
  /// What each layer keeps from its forward to its backward (the
  /// activations inside a residual, attention probabilities), one region each.
  static constexpr auto saved_offset = aligned_regions(saved_each);
  static constexpr std::size_t saved_elements = saved_offset[layer_count];
  static constexpr std::size_t saved_bytes = saved_elements * sizeof(scalar);

  /// Under bf16: f32 room for the input and output of the widest layer
  /// that computes in f32 on widened copies (`widened`); 0 when none does.
  static constexpr std::size_t widened_elements = [] {
    constexpr std::array<std::size_t, layer_count + 1> room{f32_room_of<L, B>()..., 0};
    std::size_t m = 0;
    for (std::size_t k = 0; k < layer_count; ++k)
      if (widened[k]) m = std::max(m, room[k]);
    return m;
  }();
  static constexpr std::size_t widened_bytes = widened_elements * sizeof(scalar);

  static constexpr std::size_t activation_bytes = activation_elements * sizeof(T);
  static constexpr std::size_t gradient_bytes = gradient_elements * sizeof(scalar);
};

}  // namespace kiln::detail
