// kiln/detail/model_plan.hpp — what a model's batch costs, as
// kiln::model::memory_plan shows it: the one engine's plan for the model's
// layers (detail/sequence.hpp), and the names and sizes a reader asks for.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

#include <kiln/bf16.hpp>
#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/sequence.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

/// Under bf16 the program's input is rounded to bf16 when the first layer
/// that computes may have it rounded (detail::takes_bf16_input); otherwise
/// that layer runs in f32 on the input as it is (token ids stay exact, even
/// for an embedding inside a model used as a layer).
template <class Layers, class T>
struct rounds_input;
template <class... L, class T>
struct rounds_input<type_list<L...>, T> {
  static constexpr bool value = [] {
    constexpr std::array<bool, sizeof...(L) + 1> takes{takes_bf16_input<L>()..., true};
    return std::is_same_v<T, bf16> && takes[first_computing_index(type_list<L...>{})];
  }();
};

/// A model's batch of B with activations stored as T (float, double, bf16).
template <class Layers, Shape In, std::size_t B, class T>
struct model_plan {
  static constexpr bool input_in_bf16 = rounds_input<Layers, T>::value;
  /// The engine's plan: what each replica of a program allocates and runs.
  using sequence = sequence_plan<Layers, In, B, T, /*InputExact=*/std::is_same_v<T, bf16> && !input_in_bf16>;
  /// Parameters, gradients, scratch and saved values: f32 under bf16.
  using scalar = typename sequence::scalar;
  static constexpr bool bf16_activations = sequence::bf16_activations;
  static constexpr std::size_t layer_count = sequence::count;
  static constexpr std::size_t alignment = parameter_alignment;
  static constexpr auto view = sequence::view;
  static constexpr std::size_t first_computing = sequence::first_computing;
  /// bf16: layer k (0-based) computes in f32 on widened copies of its input and output.
  static constexpr auto widened = sequence::widened;

  /// Activations, in elements of T: the input (B samples) and the output of
  /// each layer that computes (a view layer shares its input's).
  static constexpr std::size_t per_scalar = sizeof(scalar) / sizeof(T);
  static constexpr std::size_t input_elements = round_up(In::size * B, alignment);
  static constexpr std::size_t activation_elements = input_elements + sequence::activation_elements * per_scalar;
  /// Where activation k starts (0: the input; k: the output of layer k).
  static constexpr std::array<std::size_t, layer_count + 1> activation_offset = [] {
    std::array<std::size_t, layer_count + 1> off{};
    for (std::size_t k = 1; k <= layer_count; ++k) {
      const int s = sequence::store[k - 1];
      off[k] = s < 0 ? 0 : input_elements + sequence::output_offset[static_cast<std::size_t>(s)] * per_scalar;
    }
    return off;
  }();
  /// Gradients of activations: two buffers, each as large as the largest.
  static constexpr std::size_t gradient_slot_elements = sequence::slot_elements;
  static constexpr std::size_t gradient_elements = 2 * gradient_slot_elements;
  /// Working memory a layer borrows while it runs (a convolution's unfolded
  /// input): the largest any layer asks for, shared.
  static constexpr std::size_t scratch_elements = sequence::layer_workspace_elements;
  /// What the layers keep from forward to backward (the activations inside a
  /// residual, attention probabilities), one region each.
  static constexpr std::size_t saved_elements = sequence::saved_elements - sequence::activation_elements;
  /// Under bf16: f32 room for the input and output of the widest layer that
  /// computes in f32 on widened copies; 0 when none does.
  static constexpr std::size_t widened_elements = sequence::widened_elements;

  static constexpr std::size_t activation_bytes = activation_elements * sizeof(T);
  static constexpr std::size_t gradient_bytes = gradient_elements * sizeof(scalar);
  static constexpr std::size_t scratch_bytes = scratch_elements * sizeof(scalar);
  static constexpr std::size_t saved_bytes = saved_elements * sizeof(scalar);
  static constexpr std::size_t widened_bytes = widened_elements * sizeof(scalar);
};

}  // namespace kiln::detail
