// kiln/detail/binding.hpp — binding a list of layer specs, one after another,
// and what the bound list declares: parameters (with their initialisers
// resolved), state, and the layers nested inside others.
//
// POSITIONS
//   Layers are numbered 1, 2, … in the order they appear, nested layers
//   included: a layer that contains others takes its own position and those
//   of its contents (`positions`), so every layer, however deep, has one
//   number (used in diagnostics, in the summary and in automatic tags).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

template <class M>
struct submodel;

/// The layer spec of a model entry: the entry itself, or, for a model used as
/// a layer (`struct encoder : model<...> {}`), its adapter.
template <class Spec>
struct as_layer {
  using type = Spec;
};
template <class Spec>
requires requires { typename Spec::kiln_model; }
struct as_layer<Spec> {
  using type = submodel<Spec>;
};
template <class Spec>
using as_layer_t = typename as_layer<Spec>::type;

/// How many positions a bound layer takes: 1, plus those of its contents.
template <class Bound>
constexpr std::size_t positions_of() {
  if constexpr (lists<Bound, member::positions>) {
    return Bound::positions;
  } else {
    return 1;
  }
}

template <class Spec, class In, std::size_t Position, class Declared>
using bound_t = typename as_layer_t<Spec>::template bind<In, Position, Declared>;

/// Whether a bound layer accepted its input and arguments (see
/// bound_layer_base::accepted; true for a layer that does not say).
template <class Bound>
constexpr bool accepted_of() {
  if constexpr (requires { { Bound::accepted } -> std::convertible_to<bool>; }) {
    return Bound::accepted;
  } else {
    return true;
  }
}
template <class Bound>
struct all_accepted;
template <class... B>
struct all_accepted<type_list<B...>> : std::bool_constant<(accepted_of<B>() && ...)> {};

/// Binds Specs... in order, each to the output shape of the one before.
/// Step K (the first K specs bound) is a small type named by the chain and
/// K alone, and one pack expansion makes the steps in order, each from the
/// one before it (already made): no type carries a growing list of the
/// layers bound so far, and the nesting does not deepen with the model, so
/// the compiler's work is linear in the number of layers.
template <class Chain, std::size_t K>
struct bind_step {
  using before = bind_step<Chain, K - 1>;
  using layer = bound_t<typename Chain::template binding_spec<K - 1>, typename before::output_shape,
                        before::next_position, typename Chain::binding_declared>;
  using output_shape = typename layer::output_shape;
  static constexpr std::size_t next_position = before::next_position + positions_of<layer>();
  // Its optional members are those it lists (else an error names the member).
  static_assert(layer_traits<layer>::checked || true);  // (it reports, once)
};
template <class Chain>
struct bind_step<Chain, 0> {
  using output_shape = typename Chain::binding_input;
  static constexpr std::size_t next_position = Chain::binding_position;
};
template <class Chain, class Seq>
struct bind_steps;
template <class Chain, std::size_t... K>
struct bind_steps<Chain, std::index_sequence<K...>> {
  using layers = type_list<typename bind_step<Chain, K + 1>::layer...>;  // (in order: 1, 2, …)
};

///
/// The specs come as one type_list: the steps, made per layer, name the
/// chain, and a chain named by its whole list of specs as separate
/// arguments would make the compiler copy that list for every step.
template <class Declared, class In, std::size_t Position, class Specs>
struct bind_chain;
template <class Declared, class In, std::size_t Position, class... Specs>
struct bind_chain<Declared, In, Position, type_list<Specs...>> {
  // (names a layer that derives from its chain, as residual does, does not use)
  using binding_declared = Declared;
  using binding_input = In;
  static constexpr std::size_t binding_position = Position;
  using binding_specs = type_list<Specs...>;
  template <std::size_t K>
  using binding_spec = list_at_t<K, binding_specs>;
  /// The bound layers, in order (made first: each step from the one before).
  using layers = typename bind_steps<bind_chain, std::index_sequence_for<Specs...>>::layers;
  static constexpr std::size_t next_position = bind_step<bind_chain, sizeof...(Specs)>::next_position;
  using output_shape = typename bind_step<bind_chain, sizeof...(Specs)>::output_shape;
};

template <class Spec>
struct declared_by {
  using type = declared_parameters<>;
};
template <class Spec>
requires requires { typename as_layer_t<Spec>::declared_parameters; }
struct declared_by<Spec> {
  using type = typename as_layer_t<Spec>::declared_parameters;
};
template <class List>
struct as_declared;
template <class... P>
struct as_declared<type_list<P...>> {
  using type = declared_parameters<P...>;
};
template <class Declared>
struct declared_list;
template <class... P>
struct declared_list<declared_parameters<P...>> {
  using type = type_list<P...>;
};
/// Every parameter that Specs... (and what they contain) declare by tag.
template <class... Specs>
using declared_of =
    typename as_declared<join_t<typename declared_list<typename declared_by<Specs>::type>::type...>>::type;

constexpr int resolve_init(init declared, init hint) {
  return static_cast<int>(declared == init::automatic ? hint : declared);
}

template <class P, init Hint, class Owner>
struct stored_param_for {
  using type =
      stored_param<typename P::tag, typename P::shape_type, resolve_init(P::initializer, Hint),
                   (P::shape_type::rank >= 2 ? P::shape_type::size / P::shape_type::extent(0) : P::shape_type::size),
                   (P::shape_type::rank >= 2 ? P::shape_type::extent(0) : P::shape_type::size), Owner>;
};
/// A parameter a contained layer already resolved keeps its initialiser and owner.
template <class P, init Hint, class Owner>
requires requires { typename P::owner; }
struct stored_param_for<P, Hint, Owner> {
  using type = P;
};

/// A bound layer's parameters as the model stores them (owner: the layer).
template <class B, init Hint, class List = typename B::parameters>
struct stored_params_of;
template <class B, init Hint, class... P>
struct stored_params_of<B, Hint, type_list<P...>> {
  using type = type_list<typename stored_param_for<P, Hint, layer_at<B::position, typename B::spec>>::type...>;
};

/// The initialisation hint of the spec after each of Specs... (Glorot after the last).
template <class... Specs>
inline constexpr std::array<init, sizeof...(Specs) + 1> hints_after{init_hint_of<Specs>()..., init::glorot_uniform};

/// Every parameter of every bound layer of Bound (a type_list, bound from
/// Specs), with `init::automatic` resolved from the layer that follows (He
/// before relu, Glorot otherwise): one pack expansion, no walk.
template <class Bound, class Specs, class Seq = std::make_index_sequence<Bound::size>>
struct collect_parameters;
template <class... B, class... S, std::size_t... I>
struct collect_parameters<type_list<B...>, type_list<S...>, std::index_sequence<I...>> {
  using type = join_t<typename stored_params_of<B, hints_after<S...>[I + 1]>::type...>;
};
template <class Bound, class Specs>
using collect_parameters_t = typename collect_parameters<Bound, Specs>::type;

/// The state (non-trained values such as running statistics) of a bound layer.
template <class B>
struct state_of {
  using type = type_list<>;
};
template <class B>
requires lists<B, member::state>
struct state_of<B> {
  using type = typename B::state;
};
template <class B>
using state_of_t = typename state_of<B>::type;

template <class B, class List = state_of_t<B>>
struct stored_state_of;
template <class B, class... P>
struct stored_state_of<B, type_list<P...>> {
  using type = type_list<typename stored_param_for<P, init::zeros, layer_at<B::position, typename B::spec>>::type...>;
};
template <class Bound>
struct collect_state;
template <class... B>
struct collect_state<type_list<B...>> {
  using type = join_t<typename stored_state_of<B>::type...>;
};
template <class Bound>
using collect_state_t = typename collect_state<Bound>::type;

/// True for a layer whose body is a chain of layers (residual, a model used
/// as a layer, transformer_block; position_wise of one of them).
template <class L>
concept contains_layers = requires { typename L::chain::layers; };

/// A base for a layer that runs one bound layer L as its whole body
/// (position_wise): L's chain when L contains layers (a model, a residual),
/// so that the layers inside are listed after it, as residual's are (the
/// model's signature and summary; the values are used by those layers);
/// nothing otherwise.
template <class L>
struct contents_of {};
template <contains_layers L>
struct contents_of<L> {
  using chain = typename L::chain;
};

/// Every bound layer, those inside others right after the layer that holds them.
template <class L>
struct nested_layers {
  using type = type_list<L>;
};
template <class Bound>
struct flatten_nested;
template <class... B>
struct flatten_nested<type_list<B...>> {
  using type = join_t<typename nested_layers<B>::type...>;
};
template <contains_layers L>
struct nested_layers<L> {
  using type = join_t<type_list<L>, typename flatten_nested<typename L::chain::layers>::type>;
};
template <class Bound>
using flatten_nested_t = typename flatten_nested<Bound>::type;

/// Calls f(L*, depth) for every bound layer of Bound, the contents of a layer
/// that contains layers right after it (depth + 1).
template <class Bound, class F>
void for_each_nested(Bound bound, F&& f, int depth = 0) {
  for_each_type(bound, [&](auto* l) {
    using L = std::remove_pointer_t<decltype(l)>;
    f(l, depth);
    if constexpr (contains_layers<L>) for_each_nested(typename L::chain::layers{}, f, depth + 1);
  });
}

}  // namespace kiln::detail
