// kiln/detail/chain.hpp — a list of bound layers run as one: the body of a
// layer that contains layers (kiln::residual, a model used as a layer,
// kiln::transformer_block), its memory plan and its passes (binding:
// detail/binding.hpp; one layer's run: detail/layer_access.hpp).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <kiln/bf16.hpp>
#include <kiln/detail/binding.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/detail/type_name.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln::diagnostics {
template <class LayerAt, class DeclaredInput, class ReceivedInput>
inline constexpr bool a_model_used_as_a_layer_receives_the_input_it_declares =
    std::is_same_v<DeclaredInput, ReceivedInput>;
}  // namespace kiln::diagnostics

namespace kiln::detail {

/// The memory of a chain of bound layers L... fed In, for a batch of B with
/// activations stored as A (see sub_chain): every table is one pack
/// expansion and one loop.
template <class Layers, Shape In, std::size_t B, class A>
struct chain_plan;
template <class... L, Shape In, std::size_t B, class A>
struct chain_plan<type_list<L...>, In, B, A> {
  static constexpr std::size_t count = sizeof...(L);
  static constexpr std::array<bool, count + 1> view{L::is_view..., false};
  static constexpr std::array<std::size_t, count + 1> output_size{L::output_shape::size..., 0};
  /// Layer k's output is stored at index store[k] (its own, or that of the
  /// layer it views; −1: the chain's input).
  static constexpr std::array<int, count + 1> store = [] {
    std::array<int, count + 1> s{};
    for (std::size_t k = 0; k < count; ++k)
      s[k] = view[k] ? (k == 0 ? -1 : s[k - 1]) : static_cast<int>(k);
    return s;
  }();
  static constexpr std::array<std::size_t, count + 1> output_offset = [] {
    std::array<std::size_t, count + 1> o{};
    std::size_t at = 0;
    for (std::size_t k = 0; k < count; ++k) {
      o[k] = at;
      if (!view[k]) at += round_up(activation_units<A>(output_size[k] * B), parameter_alignment);
    }
    o[count] = at;
    return o;
  }();
  static constexpr std::size_t activation_elements = output_offset[count];
  static constexpr auto saved_offset =
      aligned_regions(std::array<std::size_t, count>{saved_of<L, B, A>()...}, activation_elements);
  static constexpr std::size_t saved_elements = saved_offset[count];
  static constexpr std::size_t slot_elements =
      round_up(std::max({In::size, L::output_shape::size...}) * B, parameter_alignment);
  /// The largest workspace of a contained layer, then the widened room.
  static constexpr std::size_t layer_workspace_elements =
      round_up(std::max({std::size_t{0}, workspace_of<L, B, A>()...}), parameter_alignment);
  static constexpr std::size_t widened_elements = std::max({std::size_t{0}, widened_room_of<L, B, A>()...});
  static constexpr std::size_t workspace_elements = 2 * slot_elements + layer_workspace_elements + widened_elements;
};

/// Specs... bound one after another from input In, run as one: the body of
/// a layer that contains layers. Its memory, all inside the containing
/// layer's `saved` (kept) and `workspace` (borrowed) elements, for
/// activations stored as A (bf16 outputs take half the room):
///   saved     = [output of each computing layer | each layer's own saved]
///   workspace = [two gradient buffers | the largest workspace of a layer |
///                under bf16, the widened room of the layers that compute
///                in f32]
/// During forward the gradient buffers are free: the layers that take bf16
/// accumulate their outputs there (ctx.wide).
template <class Declared, Shape In, std::size_t Position, class... Specs>
struct sub_chain {
  using bound = bind_chain<Declared, In, Position, type_list<>, Specs...>;
  /// The bound layers, in order (a type_list).
  using layers = typename bound::layers;
  static constexpr std::size_t count = sizeof...(Specs);
  /// Positions taken by the contents.
  static constexpr std::size_t positions = bound::next_position - Position;
  using output_shape = typename bound::output_shape;
  /// False when one of the layers rejected its input (its error is out).
  static constexpr bool accepted = all_accepted<layers>::value;
  template <std::size_t I>
  using layer = list_at_t<I, layers>;

  using parameters = collect_parameters_t<layers, type_list<as_layer_t<Specs>...>>;
  using state = collect_state_t<layers>;

  template <std::size_t B, class A = float>
  using plan = chain_plan<layers, In, B, A>;

  template <std::size_t B, class T>
  static void reserve(gemm_scratch<T>& g) {
    for_each_type(layers{}, [&](auto* l) { reserve_for<std::remove_pointer_t<decltype(l)>, B, T>(g); });
  }

  template <class Ctx>
  using plan_of = plan<Ctx::batch, typename Ctx::activation>;

  /// Layer I's output, inside the chain's saved elements.
  template <std::size_t I, class Ctx>
  static typename Ctx::activation* stored_output(const Ctx& c) {
    using A = typename Ctx::activation;
    typename Ctx::scalar* at = c.saved + plan_of<Ctx>::output_offset[I];
    if constexpr (std::is_same_v<A, typename Ctx::scalar>) {
      return at;
    } else {
      return reinterpret_cast<A*>(at);
    }
  }
  /// Where layer I's output is (I = −1: the chain's input, c.x).
  template <int I, class Ctx>
  static const typename Ctx::activation* output_of(const Ctx& c) {
    if constexpr (I < 0) {
      return c.x;
    } else {
      constexpr int s = plan_of<Ctx>::store[I];
      if constexpr (s < 0) {
        return c.x;
      } else {
        return stored_output<static_cast<std::size_t>(s)>(c);
      }
    }
  }
  /// The chain's output (inside the caller's saved elements).
  template <class Ctx>
  static const typename Ctx::activation* output(const Ctx& c) {
    return output_of<static_cast<int>(count) - 1>(c);
  }

  template <std::size_t I, class Ctx>
  static Ctx context_of(const Ctx& c) {
    using P = plan_of<Ctx>;
    Ctx s = c;
    s.x = output_of<static_cast<int>(I) - 1>(c);
    s.y = stored_output<I>(c);
    s.saved = c.saved + P::saved_offset[I];
    s.scratch = c.scratch + 2 * P::slot_elements;
    return s;
  }
  /// bf16: the room in which contained layers that compute in f32 run.
  template <class Ctx>
  static typename Ctx::scalar* widened_room(const Ctx& c) {
    using P = plan_of<Ctx>;
    return c.scratch + 2 * P::slot_elements + P::layer_workspace_elements;
  }

  /// Runs the contents on c.x; c.saved and c.scratch are the chain's.
  template <class Ctx>
  static void forward(const Ctx& c) {
    for_each_index<count>([&](auto i) {
      using L = layer<decltype(i)::value>;
      if constexpr (!L::is_view)
        forward_stored<L>(context_of<decltype(i)::value>(c), widened_room(c),
                          /*wide: the free gradient buffers*/ c.scratch);
    });
  }

  /// The first contained layer that computes (count when none does).
  static constexpr std::size_t first_computing = first_computing_index(layers{});
  /// The chain's input may be rounded to bf16 (see takes_bf16_input).
  static constexpr bool bf16_input = [] {
    if constexpr (first_computing == count) {
      return true;
    } else {
      return takes_bf16_input<layer<first_computing>>();
    }
  }();

  /// Gradients of the contents' parameters from c.dy (the gradient of the
  /// chain's output), and the input gradient into c.dx unless it is null.
  template <class Ctx>
  static void backward(const Ctx& c) {
    using T = typename Ctx::scalar;
    const T* g = c.dy;
    int current = -1;
    bool reached_input = false;
    for_each_index<count>([&](auto i) {
      constexpr std::size_t k = count - 1 - decltype(i)::value;
      using L = layer<k>;
      if constexpr (!L::is_view) {
        Ctx s = context_of<k>(c);
        s.dy = g;
        if constexpr (k == first_computing) {
          s.dx = c.dx;
          reached_input = true;
        } else {
          current = current == 0 ? 1 : 0;
          s.dx = c.scratch + static_cast<std::size_t>(current) * plan_of<Ctx>::slot_elements;
        }
        backward_stored<L>(s, widened_room(c));
        g = s.dx;
      }
    });
    if (!reached_input && c.dx) std::copy_n(g, In::size * Ctx::batch, c.dx);
  }
};

/// The members of a layer whose body is a sub_chain (residual, a model used
/// as a layer, transformer_block): its positions, parameters, state and
/// memory, and the passes of a layer whose output is its body's (residual
/// replaces them with its own).
template <class Chain>
struct chain_layer {
  using chain = Chain;
  using provides = kiln::provides<member::positions, member::state, member::saved, member::workspace,
                                  member::bf16_activations, member::bf16_input, member::reserve>;
  static constexpr std::size_t positions = 1 + Chain::positions;
  using parameters = typename Chain::parameters;
  using state = typename Chain::state;
  template <std::size_t B, class A = float>
  static constexpr std::size_t saved = Chain::template plan<B, A>::saved_elements;
  template <std::size_t B, class A = float>
  static constexpr std::size_t workspace = Chain::template plan<B, A>::workspace_elements;
  /// Its contents' activations are stored as the program's are (bf16 under
  /// precision<bf16>); those that compute in f32 run on widened copies.
  static constexpr bool bf16_activations = true;
  /// Its input may be rounded when its first computing layer's may.
  static constexpr bool bf16_input = Chain::bf16_input;
  template <std::size_t B, class T>
  static void reserve(gemm_scratch<T>& g) {
    Chain::template reserve<B, T>(g);
  }

  template <class Ctx>
  static void forward(const Ctx& c) {
    Chain::forward(c);
    std::copy_n(Chain::output(c), Chain::output_shape::size * Ctx::batch, c.y);
  }
  template <class Ctx>
  static void backward(const Ctx& c) {
    Chain::backward(c);
  }
};

/// Stands in for the layers of a model used as a layer when one of them
/// rejected its input (the model said so when it was defined): it takes
/// their positions and gives their output shape, and holds and does nothing,
/// so that the outer model does not bind the mistake, and report it, again.
template <Shape Out, std::size_t Positions>
struct stand_in_for_rejected_layers {
  using kiln_layer = void;
  static std::string name() { return "(rejected layers)"; }
  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<stand_in_for_rejected_layers, In, Position> {
    using provides = kiln::provides<member::positions>;
    static constexpr std::size_t positions = Positions;
    static constexpr bool accepted = false;
    using output_shape = Out;
    using parameters = param_list<>;
    template <class Ctx>
    static void forward(const Ctx&) {}
    template <class Ctx>
    static void backward(const Ctx&) {}
  };
};

/// The layers of model M bound at Position, or their stand-in when one of
/// them rejected its input.
template <class M, class Declared, std::size_t Position>
using submodel_body_t =
    std::conditional_t<M::accepted, typename M::template chain<Declared, typename M::input_shape_type, Position>,
                       sub_chain<Declared, typename M::input_shape_type, Position,
                                 stand_in_for_rejected_layers<typename M::output_shape_type,
                                                              M::bound_chain::next_position - 1>>>;

/// A model used as a layer of another model: its layers run in place, bound
/// at the positions that follow its own, and its output is its last layer's.
template <class M>
struct submodel {
  using kiln_layer = void;
  using declared_parameters = typename M::declared;
  static std::string name() { return std::string(type_name<M>()); }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<submodel, In, Position>, chain_layer<submodel_body_t<M, Declared, Position + 1>> {
    // Its check: one error, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::a_model_used_as_a_layer_receives_the_input_it_declares<
                        layer_at<Position, M>, typename M::input_shape_type, In>,
                    "kiln::model used as a layer: it must receive the input<...> shape it declares");
      return std::is_same_v<typename M::input_shape_type, In> && bind::chain::accepted;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = typename bind::chain::output_shape;
  };
};

}  // namespace kiln::detail
