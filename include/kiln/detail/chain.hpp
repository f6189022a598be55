// kiln/detail/chain.hpp — binding a list of layer specs, one after another.
//
// Used by kiln::model for its layers, and by the layers that contain layers
// (kiln::residual, a model used as a layer, kiln::transformer_block), which
// run a `sub_chain` inside their own forward and backward.
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
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <kiln/bf16.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm.hpp>
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

/// Binds Specs... in order, each to the output shape of the one before.
/// (A plain recursive struct: when a layer rejects its input, the
/// compiler's context lists one short line per layer.)
template <class Declared, class In, std::size_t Position, class Done, class... Todo>
struct bind_chain;
template <class Declared, class In, std::size_t Position, class... Done>
struct bind_chain<Declared, In, Position, type_list<Done...>> {
  using layers = type_list<Done...>;
  static constexpr std::size_t next_position = Position;
  using output_shape = In;
};
template <class Declared, class In, std::size_t Position, class... Done, class Spec, class... Rest>
struct bind_chain<Declared, In, Position, type_list<Done...>, Spec, Rest...>
    : bind_chain<Declared, typename bound_t<Spec, In, Position, Declared>::output_shape,
                 Position + positions_of<bound_t<Spec, In, Position, Declared>>(),
                 type_list<Done..., bound_t<Spec, In, Position, Declared>>, Rest...> {
  // Its optional members are those it lists (else an error names the member).
  static_assert(layer_traits<bound_t<Spec, In, Position, Declared>>::checked || true);  // (it reports, once)
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
/// as a layer, transformer_block).
template <class L>
concept contains_layers = requires { typename L::chain::layers; };

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

/// A model used as a layer of another model: its layers run in place, bound
/// at the positions that follow its own, and its output is its last layer's.
template <class M>
struct submodel {
  using kiln_layer = void;
  using declared_parameters = typename M::declared;
  static std::string name() { return std::string(type_name<M>()); }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<submodel, In, Position>,
                chain_layer<typename M::template chain<Declared, typename M::input_shape_type, Position + 1>> {
    static_assert(diagnostics::a_model_used_as_a_layer_receives_the_input_it_declares<layer_at<Position, M>,
                                                                                      typename M::input_shape_type, In>,
                  "kiln::model used as a layer: it must receive the input<...> shape it declares");
    using output_shape = typename bind::chain::output_shape;
  };
};

}  // namespace kiln::detail
