// kiln/detail/sequence.hpp — THE engine: one memory plan and one executor
// for any list of bound layers. A model's top level (each replica of a
// program: detail/replica_engine.hpp), a model used as a layer, residual's
// branch, transformer_block's body and position_wise's contents all run
// through sequence_plan and sequence_engine (detail/chain.hpp for the
// layers that contain layers).
//
// MEMORY of a sequence of bound layers L... fed In, for a batch of B, with
// scalars T and activations stored as A (bf16 under precision<bf16>: two to
// a scalar), in two regions the caller provides:
//   saved     = [output of each computing layer | each layer's own saved]
//               (kept from forward to backward)
//   workspace = [two gradient slots | the largest workspace of a layer |
//                under bf16, f32 room for the layers that compute in f32]
//               (borrowed while the sequence runs; the gradient slots are
//               free during forward: bf16 layers accumulate there)
// A view layer (flatten) stores nothing: its output is its input's.
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

/// The plan: every table is one pack expansion and one loop. InputExact:
/// under bf16, the sequence's input is the program's own (f32, not
/// rounded) and the first layer that computes may not take it rounded
/// (detail::takes_bf16_input: token ids must stay exact), so that layer
/// runs in f32 on it.
template <class Layers, Shape In, std::size_t B, class A, bool InputExact = false>
struct sequence_plan;
template <class... L, Shape In, std::size_t B, class A, bool InputExact>
struct sequence_plan<type_list<L...>, In, B, A, InputExact> {
  /// Parameters, gradients, workspace and saved values: f32 under bf16.
  using scalar = std::conditional_t<std::is_same_v<A, bf16>, float, A>;
  using T = scalar;
  static constexpr std::size_t count = sizeof...(L);
  static constexpr std::size_t input_size = In::size;
  static constexpr std::size_t alignment = parameter_alignment;
  static constexpr bool bf16_activations = std::is_same_v<A, bf16>;
  static constexpr std::array<bool, count + 1> view{L::is_view..., false};
  /// The first layer that computes (count when none does).
  static constexpr std::size_t first_computing = first_computing_index(type_list<L...>{});
  /// bf16: layer k computes in f32 on widened copies of its input and
  /// output (it does not take bf16, or it is the first layer and its input
  /// stays exact).
  static constexpr std::array<bool, count + 1> widened = [] {
    constexpr std::array<bool, count + 1> takes{takes_bf16_activations<L>()..., false};
    std::array<bool, count + 1> w{};
    for (std::size_t k = 0; k < count; ++k)
      w[k] = bf16_activations && !view[k] && (!takes[k] || (k == first_computing && InputExact));
    return w;
  }();
  /// Layer k's output is stored at index store[k] (its own, or that of the
  /// layer it views; −1: the sequence's input).
  static constexpr std::array<int, count + 1> store = [] {
    std::array<int, count + 1> s{};
    for (std::size_t k = 0; k < count; ++k)
      s[k] = view[k] ? (k == 0 ? -1 : s[k - 1]) : static_cast<int>(k);
    return s;
  }();
  /// Where each computing layer's output starts in `saved` (scalars).
  static constexpr std::array<std::size_t, count + 1> output_offset = [] {
    constexpr std::array<std::size_t, count + 1> size{L::output_shape::size..., 0};
    std::array<std::size_t, count + 1> o{};
    std::size_t at = 0;
    for (std::size_t k = 0; k < count; ++k) {
      o[k] = at;
      if (!view[k]) at += round_up(activation_units<A>(size[k] * B), alignment);
    }
    o[count] = at;
    return o;
  }();
  static constexpr std::size_t activation_elements = output_offset[count];
  /// A layer's saved and workspace elements as it runs (in f32 when widened).
  static constexpr std::array<std::size_t, count> as_run(const std::array<std::size_t, count>& f32,
                                                         const std::array<std::size_t, count>& as_stored) {
    std::array<std::size_t, count> s{};
    for (std::size_t k = 0; k < count; ++k) s[k] = widened[k] ? f32[k] : as_stored[k];
    return s;
  }
  static constexpr std::array<std::size_t, count> saved_each =
      as_run({saved_of<L, B, T>()...}, {saved_of<L, B, A>()...});
  static constexpr std::array<std::size_t, count> workspace_each =
      as_run({workspace_of<L, B, T>()...}, {workspace_of<L, B, A>()...});
  /// Where each layer's own saved values start in `saved`, after the outputs.
  static constexpr auto saved_offset = aligned_regions(saved_each, activation_elements);
  static constexpr std::size_t saved_elements = saved_offset[count];

  /// One gradient slot: as large as the largest activation.
  static constexpr std::size_t slot_elements = round_up(std::max({In::size, L::output_shape::size...}) * B, alignment);
  static constexpr std::size_t layer_workspace_elements = [] {
    std::size_t m = 0;
    for (std::size_t w : workspace_each) m = std::max(m, w);
    return round_up(m, alignment);
  }();
  /// bf16: f32 room for the input and output of the widest widened layer.
  static constexpr std::size_t widened_elements = [] {
    constexpr std::array<std::size_t, count + 1> room{f32_room_of<L, B>()..., 0};
    std::size_t m = 0;
    for (std::size_t k = 0; k < count; ++k)
      if (widened[k]) m = std::max(m, room[k]);
    return m;
  }();
  static constexpr std::size_t workspace_elements = 2 * slot_elements + layer_workspace_elements + widened_elements;
};

/// The executor: runs the layers of Plan over a context c whose x is the
/// sequence's input (as stored), saved and scratch its two regions (see
/// above), dy the gradient of its output (backward; never inside its
/// workspace) and dx where its input gradient goes (or null). Each layer
/// runs through a table entry (a function per layer, made by the caller:
/// the top level compiles each for the layer's own parameter offsets;
/// contained layers for their container's context), called by index in a
/// loop: no recursion, no instantiation per pair of layers.
template <class Plan, class Ctx>
struct sequence_engine {
  using T = typename Ctx::scalar;
  using A = typename Ctx::activation;
  using forward_fn = void (*)(const Ctx&, T* room, T* wide, const T* f32_input);
  using backward_fn = void (*)(const Ctx&, T* room, const T* f32_input);
  static constexpr std::size_t count = Plan::count;

  /// Layer k's own output, inside c.saved.
  static A* stored_output(const Ctx& c, std::size_t k) noexcept {
    T* at = c.saved + Plan::output_offset[k];
    if constexpr (std::is_same_v<A, T>) {
      return at;
    } else {
      return reinterpret_cast<A*>(at);
    }
  }
  /// Where the input of layer k is (its predecessor's output, or c.x).
  static const A* input_of(const Ctx& c, std::size_t k) noexcept {
    const int s = k == 0 ? -1 : Plan::store[k - 1];
    return s < 0 ? c.x : stored_output(c, static_cast<std::size_t>(s));
  }
  /// The sequence's output (its last layer's, or c.x when all are views).
  static const A* output(const Ctx& c) noexcept { return input_of(c, count); }

  /// Layer k's context: its input and output, its saved values, its workspace.
  static Ctx layer(const Ctx& c, std::size_t k) noexcept {
    Ctx s = c;
    s.x = input_of(c, k);
    s.y = stored_output(c, k);
    s.saved = c.saved + Plan::saved_offset[k];
    s.scratch = c.scratch + 2 * Plan::slot_elements;
    return s;
  }
  /// bf16: the f32 room in which widened layers run.
  static T* widened_room(const Ctx& c) noexcept {
    return c.scratch + 2 * Plan::slot_elements + Plan::layer_workspace_elements;
  }
  /// `exact`: the sequence's input unrounded, for the layer that reads it
  /// (Plan's InputExact); null otherwise.
  static const T* f32_input(std::size_t k, const T* exact) noexcept {
    return k == 0 || Plan::store[k - 1] < 0 ? exact : nullptr;
  }

  static void forward(const Ctx& c, const std::array<forward_fn, count>& pass, const T* exact = nullptr) {
    for (std::size_t k = 0; k < count; ++k)
      if (!Plan::view[k]) pass[k](layer(c, k), widened_room(c), /*wide: the free gradient slots*/ c.scratch,
                                  f32_input(k, exact));
  }

  /// What runs after each layer's backward when nothing does.
  struct no_hook {
    constexpr void operator()(std::size_t) const noexcept {}
  };

  /// Last to first, the gradient passed between layers in the two slots.
  /// `overwrites`: per layer, it writes its parameters' gradients instead
  /// of adding to them (the top level's; null: none does). `after(k)` runs
  /// once layer k's backward has (for a view, in its turn).
  template <class After = no_hook>
  static void backward(const Ctx& c, const std::array<backward_fn, count>& pass, const T* exact = nullptr,
                       const bool* overwrites = nullptr, After&& after = {}) {
    const T* g = c.dy;
    int current = -1;
    bool reached_input = false;
    for (std::size_t k = count; k-- > 0;) {
      if (Plan::view[k]) {
        after(k);
        continue;
      }
      Ctx s = layer(c, k);
      s.dy = g;
      if (overwrites) s.overwrite_gradients = overwrites[k];
      if (k == Plan::first_computing) {
        s.dx = c.dx;
        reached_input = true;
      } else {
        current = current == 0 ? 1 : 0;
        s.dx = c.scratch + static_cast<std::size_t>(current) * Plan::slot_elements;
      }
      pass[k](s, widened_room(c), f32_input(k, exact));
      g = s.dx;
      after(k);
    }
    if (!reached_input && c.dx) std::copy_n(g, Plan::input_size * Ctx::batch, c.dx);
  }
};

}  // namespace kiln::detail
