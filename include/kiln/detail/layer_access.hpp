// kiln/detail/layer_access.hpp — what the engine reads of a bound layer (its
// listed optional members, with their defaults) and how it runs one layer
// whatever the activations' storage (bf16 or the program's scalar).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <kiln/bf16.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

/// True when a bound layer's forward and backward take bf16 activations (it
/// declares `bf16_activations`); under precision<bf16> the program runs the
/// others on f32 copies of their input and output.
template <class L>
constexpr bool takes_bf16_activations() {
  if constexpr (lists<L, member::bf16_activations>) {
    return L::bf16_activations;
  } else {
    return false;
  }
}

/// Elements a bound layer keeps from forward to backward / borrows while it
/// runs, for a batch of B with activations stored as A. (A layer whose
/// needs depend on how activations are stored declares `saved<B, A>` /
/// `workspace<B, A>`; most declare `saved<B>` / `workspace<B>`.)
template <class L, std::size_t B, class A = float>
constexpr std::size_t saved_of() {
  if constexpr (!lists<L, member::saved>) {
    return 0;
  } else if constexpr (requires { L::template saved<B, A>; }) {
    return L::template saved<B, A>;
  } else if constexpr (requires { L::template saved<B>; }) {
    return L::template saved<B>;
  } else {
    return missing_member<L, member::saved>();
  }
}
template <class L, std::size_t B, class A = float>
constexpr std::size_t workspace_of() {
  if constexpr (!lists<L, member::workspace>) {
    return 0;
  } else if constexpr (requires { L::template workspace<B, A>; }) {
    return L::template workspace<B, A>;
  } else if constexpr (requires { L::template workspace<B>; }) {
    return L::template workspace<B>;
  } else {
    return missing_member<L, member::workspace>();
  }
}

/// Reserves the products bound layer L runs on a batch of B (if it lists reserve).
template <class L, std::size_t B, class T>
void reserve_for(gemm_scratch<T>& g) {
  if constexpr (lists<L, member::reserve>) {
    if constexpr (requires { L::template reserve<B, T>(g); }) {
      L::template reserve<B, T>(g);
    } else {
      missing_member<L, member::reserve>();
    }
  }
}

/// Scalars of the program's type that hold n activations stored as A (bf16:
/// two to an f32).
template <class A>
constexpr std::size_t activation_units(std::size_t n) {
  return std::is_same_v<A, bf16> ? (n + 1) / 2 : n;
}

/// True when bound layer L, fed a program's input, may have it rounded to
/// bf16: L takes bf16 activations, and it does not say otherwise by
/// declaring `bf16_input` false. A layer that passes its input on to
/// layers it contains (a model used as a layer, residual, position_wise)
/// declares what the first of them says, so that an embedding, however
/// deep, gets its token ids exact (ids above 256 are not bf16 values).
template <class L>
constexpr bool takes_bf16_input() {
  if constexpr (lists<L, member::bf16_input>) {
    return takes_bf16_activations<L>() && L::bf16_input;
  } else {
    return takes_bf16_activations<L>();
  }
}

/// The index of the first bound layer of Bound (a type_list) that computes,
/// i.e. is not a view; Bound::size when none does.
template <class... L>
constexpr std::size_t first_computing_index(type_list<L...>) {
  constexpr std::array<bool, sizeof...(L) + 1> view{L::is_view..., false};
  std::size_t k = 0;
  while (k < sizeof...(L) && view[k]) ++k;
  return k;
}

/// f32 room for bound layer L's input and output on a batch of B (what
/// widened_context fills).
template <class L, std::size_t B>
constexpr std::size_t f32_room_of() {
  return round_up(L::input_shape::size * B, parameter_alignment) +
         round_up(L::output_shape::size * B, parameter_alignment);
}
/// The f32 room L needs inside a chain whose activations are stored as A:
/// f32_room_of<L, B> when A is bf16 and L does not take bf16; else 0.
template <class L, std::size_t B, class A>
constexpr std::size_t widened_room_of() {
  if constexpr (!std::is_same_v<A, bf16> || L::is_view || takes_bf16_activations<L>()) {
    return 0;
  } else {
    return f32_room_of<L, B>();
  }
}

/// L's context with f32 activations in `room` (f32_room_of<L> scalars):
/// x widened from c.x, or `f32_input` itself when given (the program's
/// input, which must not be rounded); y widened from c.y when `with_output`.
template <class L, class Ctx>
auto widened_context(const Ctx& c, typename Ctx::scalar* room, const typename Ctx::scalar* f32_input,
                     bool with_output) {
  using T = typename Ctx::scalar;
  constexpr std::size_t in = L::input_shape::size * Ctx::batch, out = L::output_shape::size * Ctx::batch;
  auto f = c.template with_activation<T>();
  if (f32_input) {
    f.x = f32_input;
  } else {
    widen(c.x, in, room);
    f.x = room;
  }
  T* y = room + round_up(in, parameter_alignment);
  if (with_output) widen(c.y, out, y);
  f.y = y;
  return f;
}

/// Runs bound layer L's forward on c, whatever the activations' storage.
/// With bf16 activations, a layer that takes them gets `wide` (f32 room for
/// its output) to accumulate in; any other runs on f32 copies in `room`
/// (widened_room_of<L>) and its output is rounded into c.y. Given
/// `f32_input` (the program's input, kept unrounded: see
/// takes_bf16_input), L runs on it in f32 whatever it takes.
template <class L, class Ctx>
void forward_stored(const Ctx& c, typename Ctx::scalar* room, typename Ctx::scalar* wide,
                    const typename Ctx::scalar* f32_input = nullptr) {
  if constexpr (!Ctx::bf16_activations) {
    L::forward(c);
  } else {
    if constexpr (takes_bf16_activations<L>()) {
      if (!f32_input) {
        Ctx s = c;
        s.wide = wide;
        L::forward(s);
        return;
      }
    }
    const auto f = widened_context<L>(c, room, f32_input, false);
    L::forward(f);
    narrow(f.y, L::output_shape::size * Ctx::batch, c.y);
  }
}
/// Runs L's backward on c (the same storage rules as forward_stored).
template <class L, class Ctx>
void backward_stored(const Ctx& c, typename Ctx::scalar* room, const typename Ctx::scalar* f32_input = nullptr) {
  if constexpr (!Ctx::bf16_activations) {
    L::backward(c);
  } else {
    if constexpr (takes_bf16_activations<L>()) {
      if (!f32_input) {
        L::backward(c);
        return;
      }
    }
    L::backward(widened_context<L>(c, room, f32_input, true));
  }
}

/// Bound layer L's passes, compiled for a context that finds L's
/// parameters through Layout and its state through State (detail::
/// local_offsets: L's own tags only), called with the engine's frame (a
/// context without offsets). Neither type names the model, so neither does
/// the name of any pass: the compiler's work per layer stays the same
/// however deep the model.
template <class L, class Layout, class State>
struct layer_pass {
  template <class Frame>
  static void forward(const Frame& f, typename Frame::scalar* room, typename Frame::scalar* wide,
                      const typename Frame::scalar* f32_input) {
    if constexpr (!L::is_view) forward_stored<L>(f.template with_layouts<Layout, State>(), room, wide, f32_input);
  }
  template <class Frame>
  static void backward(const Frame& f, typename Frame::scalar* room, const typename Frame::scalar* f32_input) {
    if constexpr (!L::is_view) backward_stored<L>(f.template with_layouts<Layout, State>(), room, f32_input);
  }
};

}  // namespace kiln::detail
