// kiln/detail/chain.hpp — a list of bound layers run as one: the body of a
// layer that contains layers (kiln::residual, a model used as a layer,
// kiln::transformer_block), on the one engine of detail/sequence.hpp
// (binding: detail/binding.hpp; one layer's run: detail/layer_access.hpp).
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
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/sequence.hpp>
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

/// Specs... bound one after another from input In, run as one: the body of
/// a layer that contains layers. Its memory is sequence_plan's (all inside
/// the containing layer's `saved` and `workspace` elements) and its passes
/// sequence_engine's (detail/sequence.hpp): the engine every sequence of
/// layers, the model's top level included, runs on.
/// (The specs come as one type_list, as bind_chain's do: the chain's
/// members made per contained layer do not copy the list. sub_chain names
/// it with the specs spelled out.)
template <class Declared, Shape In, std::size_t Position, class Specs>
struct chain_of;
template <class Declared, Shape In, std::size_t Position, class... Specs>
using sub_chain = chain_of<Declared, In, Position, type_list<Specs...>>;
template <class Declared, Shape In, std::size_t Position, class... Specs>
struct chain_of<Declared, In, Position, type_list<Specs...>> {
  using bound = bind_chain<Declared, In, Position, type_list<Specs...>>;
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

  /// For a batch of B with activations stored as A (its input too: the
  /// container's activation).
  template <std::size_t B, class A = float>
  using plan = sequence_plan<layers, In, B, A>;

  template <std::size_t B, class T>
  static void reserve(gemm_scratch<T>& g) {
    for_each_type(layers{}, [&](auto* l) { reserve_for<std::remove_pointer_t<decltype(l)>, B, T>(g); });
  }

  /// The contents run on the chain's context with its parameter and state
  /// offsets taken off (a frame whose type does not grow with the chain);
  /// each content's passes are compiled for its own offsets, found by index:
  /// the container's layout lists the chain's parameter uses in order (the
  /// contents' `parameters`, one after another), and so does its state's.
  /// No function's name spells out the chain, and no tag is looked up in
  /// it: the compiler's work per contained layer does not grow with the
  /// chain's length.
  template <class Ctx>
  using frame_of = decltype(std::declval<const Ctx&>().template with_layouts<parameter_layout<>, parameter_layout<>>());
  template <class Ctx>
  static frame_of<Ctx> frame(const Ctx& c) {
    return c.template with_layouts<parameter_layout<>, parameter_layout<>>();
  }
  template <class Ctx>
  using engine = sequence_engine<plan<Ctx::batch, typename Ctx::activation>, frame_of<Ctx>>;
  /// The contents' passes, as table entries of the chain's frame.
  template <class Ctx>
  struct passes {
    using F = frame_of<Ctx>;
    using E = engine<Ctx>;
    static constexpr auto params_begin = []<class... L>(type_list<L...>) {
      return group_begins<sizeof...(L)>({L::parameters::size...});
    }(layers{});
    static constexpr auto state_begin = []<class... L>(type_list<L...>) {
      return group_begins<sizeof...(L)>({state_of_t<L>::size...});
    }(layers{});
    template <class L, std::size_t K>
    using pass =
        layer_pass<L, typename local_by_index<typename L::parameters, params_begin[K], typename Ctx::layout>::type,
                   typename local_by_index<state_of_t<L>, state_begin[K], typename Ctx::state_layout>::type>;
    static constexpr std::array<typename E::forward_fn, count> forward =
        []<class... L, std::size_t... K>(type_list<L...>, std::index_sequence<K...>) {
          return std::array<typename E::forward_fn, count>{&pass<L, K>::template forward<F>...};
        }(layers{}, std::make_index_sequence<count>{});
    static constexpr std::array<typename E::backward_fn, count> backward =
        []<class... L, std::size_t... K>(type_list<L...>, std::index_sequence<K...>) {
          return std::array<typename E::backward_fn, count>{&pass<L, K>::template backward<F>...};
        }(layers{}, std::make_index_sequence<count>{});
  };

  /// The chain's output (inside the caller's saved elements).
  template <class Ctx>
  static const typename Ctx::activation* output(const Ctx& c) {
    return engine<Ctx>::output(frame(c));
  }
  /// Runs the contents on c.x; c.saved and c.scratch are the chain's.
  template <class Ctx>
  static void forward(const Ctx& c) {
    engine<Ctx>::forward(frame(c), passes<Ctx>::forward);
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
    engine<Ctx>::backward(frame(c), passes<Ctx>::backward);
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
