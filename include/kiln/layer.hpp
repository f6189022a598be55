// kiln/layer.hpp — what a layer is, for those who write one.
//
// WHAT A LAYER IS
//   A layer *spec* (`dense<256>`, `relu`) is an empty type. Bound to the shape
//   of its input and its 1-based position in a model, it yields a *bound
//   layer*: `Spec::bind<InputShape, Position>`, which provides
//
//     input_shape, output_shape     kiln::shape types (one sample each)
//     parameters                    kiln::param_list<kiln::param<Tag, Shape, Init>...>
//     is_view                       true when the output is the input's memory
//                                   reinterpreted (flatten): forward and
//                                   backward are then never called
//   The optional members below are listed, once, in
//   `using provides = kiln::provides<kiln::member::...>;` and kiln reads only
//   those (a member listed but not defined, or defined but not listed, is
//   a compile error naming it: kiln::layer_traits, docs/concepts.md).
//
//     reserve<B>(gemm_scratch&)     (optional) the products a batch of B runs
//     workspace<B>                  (optional) scratch elements it borrows while it
//                                   runs (shared by all layers: ctx.scratch)
//     saved<B>                      (optional) elements it keeps from its forward
//                                   to its backward (its own: ctx.saved)
//     state                         (optional) a param_list<param<...>...>: values
//                                   it keeps but does not train (batch_norm's
//                                   running statistics: ctx.state<Tag>())
//     positions                     (optional) 1 + the positions of the layers it
//                                   contains (residual, a model used as a layer)
//     bf16_activations              (optional) true: under precision<bf16> its
//                                   forward/backward take bf16 ctx.x / ctx.y
//                                   (the program widens them to f32 for the
//                                   layers that do not say so)
//     bf16_input                    (optional) false: the program's input must
//                                   reach it unrounded (a layer made of
//                                   layers whose first is an embedding)
//     forward(ctx), backward(ctx)   over a kiln::detail::layer_context, which
//                                   also says whether the step trains
//                                   (ctx.training) and, for dropout, the seed,
//                                   step and the replica's first sample
//
//   A shape the layer cannot take is a static_assert inside `bind`, whose
//   condition names the layer, its position and the shape (see docs/models.md).
//
// LAWS
//   * output_shape depends only on input_shape and the spec.
//   * The gradient of a parameter has the parameter's shape and lives at the
//     same offset of the gradient buffer; backward *adds* to it (so a weight
//     used twice receives the sum of its uses' gradients).
//   * backward writes ctx.dx (the input gradient) unless it is null.
//   * Parameters, gradients (dy, dx), saved values and state are the
//     program's scalar (f32 under bf16); GEMMs read weights through
//     ctx.gemm_param<Tag>() (the step's bf16 copy under bf16).
//
// THREAD SAFETY
//   Bound layers are stateless; everything they touch comes in the context.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>

#include <kiln/detail/type_list.hpp>
#include <kiln/shape.hpp>

namespace kiln {

/// How a parameter starts. `automatic` lets the model choose from the layer
/// that follows: He (normal, fan-in) before relu, Glorot (uniform) otherwise.
enum class init { automatic, he_normal, glorot_uniform, lecun_normal, zeros, ones };

/// One parameter of a layer: its identity (Tag), its shape and its start.
template <class Tag, Shape S, init Init>
struct param {
  using tag = Tag;
  using shape_type = S;
  static constexpr init initializer = Init;
};

/// The parameters (or state values) of a bound layer, in slot order:
/// `using parameters = kiln::param_list<param<W, shape<10, 4>, init::automatic>>;`
template <class... P>
using param_list = detail::type_list<P...>;

/// Evidence in diagnostics: "the layer `Spec` at position `Position`".
template <std::size_t Position, class Spec>
struct layer_at {};

namespace detail {
/// The tag of a weight nobody named: unique per (layer position, slot).
template <std::size_t Position, std::size_t Slot>
struct auto_tag {};
}  // namespace detail

/// Parameters that layer specs declare by tag whatever their input shape: an
/// `embedding<V, D, tied<T>>` declares T as shape<V, D>, so that a layer that
/// only names the tag (`unembed<tied<T>>`) learns its shape. A spec lists them
/// as `using declared_parameters = kiln::declared_parameters<param<...>...>;`
/// and every bound layer receives the model's whole list as `Declared`.
template <class... P>
struct declared_parameters {
  template <class Tag>
  static constexpr bool has = detail::tag_index<typename P::tag...>::template find<Tag> < sizeof...(P);
};

namespace detail {
/// The declared parameter named Tag (the first, when several layers declare it).
template <class Tag, class Declared>
struct declared_param;
template <class Tag, class P, class... Rest>
struct declared_param<Tag, declared_parameters<P, Rest...>>
    : std::conditional_t<std::is_same_v<Tag, typename P::tag>, std::type_identity<P>,
                         declared_param<Tag, declared_parameters<Rest...>>> {};

/// The shape declared for Tag when Found, else Fallback.
template <bool Found, class Tag, class Declared, class Fallback>
struct declared_shape_or {
  using type = Fallback;
};
template <class Tag, class Declared, class Fallback>
struct declared_shape_or<true, Tag, Declared, Fallback> {
  using type = typename declared_param<Tag, Declared>::type::shape_type;
};
}  // namespace detail

/// What every bound layer says about itself; derive `bind` from it and add
/// `output_shape`, `parameters` and the passes (flatten re-declares is_view).
/// A layer that checks its input or its arguments re-declares `accepted`,
/// computed by a lambda that holds its static_asserts, and adds
/// `static_assert(accepted || true);` so the checks run as it binds. A failed
/// check is then the one error: it is false, the layer binds a stand-in, and
/// a layer that contains it says nothing more about it. (A static_assert that
/// fails directly in the class would, on clang, leave the class unusable and
/// make every later use of it another error.)
template <class Spec, Shape In, std::size_t Position>
struct bound_layer_base {
  using spec = Spec;
  using input_shape = In;
  static constexpr std::size_t position = Position;
  static constexpr bool is_view = false;
  static constexpr bool accepted = true;
};

/// The optional members of a bound layer. A layer that defines any of them
/// lists them, once, in `using provides = kiln::provides<member::...>;`:
/// kiln reads only the members a layer lists, and a member listed but not
/// defined (misspelt, or of another kind than below), or defined but not
/// listed, is a compile error naming it (kiln::layer_traits).
namespace member {
struct state;                 ///< using state = param_list<param<...>...>: values kept, not trained
struct saved;                 ///< template <std::size_t B, class A = float> static constexpr std::size_t saved
struct workspace;             ///< template <std::size_t B, class A = float> static constexpr std::size_t workspace
struct reserve;               ///< template <std::size_t B, class T> static void reserve(kiln::gemm_scratch<T>&)
struct positions;             ///< static constexpr std::size_t positions: 1 + those of the layers inside
struct bf16_activations;      ///< static constexpr bool bf16_activations
struct bf16_input;            ///< static constexpr bool bf16_input
struct overwrites_gradients;  ///< static constexpr bool overwrites_gradients
}  // namespace member

/// The list of optional members a bound layer defines (see kiln::member).
template <class... Members>
struct provides {
  template <class M>
  static constexpr bool has = (std::is_same_v<M, Members> || ...);
};

namespace detail {
template <class L>
struct provided_by {
  using type = provides<>;
};
template <class L>
requires requires { typename L::provides; }
struct provided_by<L> {
  using type = typename L::provides;
};
/// Whether bound layer L lists optional member M.
template <class L, class M>
inline constexpr bool lists = provided_by<L>::type::template has<M>;

/// Whether L defines a member of M's name and kind (only to check the list;
/// the members that depend on the batch are tried at a batch of 64 here, and
/// at the program's own batch where they are read).
template <class L, class M>
inline constexpr bool defines = false;
template <class L>
inline constexpr bool defines<L, member::state> = requires { typename L::state; };
template <class L>
inline constexpr bool defines<L, member::saved> = requires { L::template saved<64>; };
template <class L>
inline constexpr bool defines<L, member::workspace> = requires { L::template workspace<64>; };
template <class L>
inline constexpr bool defines<L, member::reserve> = requires { &L::template reserve<64, float>; };
/// Members read at the program's batch: checked where they are read.
template <class M>
inline constexpr bool batch_dependent =
    std::is_same_v<M, member::saved> || std::is_same_v<M, member::workspace> || std::is_same_v<M, member::reserve>;
template <class L>
inline constexpr bool defines<L, member::positions> = requires { { L::positions } -> std::convertible_to<std::size_t>; };
template <class L>
inline constexpr bool defines<L, member::bf16_activations> = requires { { L::bf16_activations } -> std::convertible_to<bool>; };
template <class L>
inline constexpr bool defines<L, member::bf16_input> = requires { { L::bf16_input } -> std::convertible_to<bool>; };
template <class L>
inline constexpr bool defines<L, member::overwrites_gradients> = requires {
  { L::overwrites_gradients } -> std::convertible_to<bool>;
};
}  // namespace detail

namespace diagnostics {
template <class LayerAt, class Member>
inline constexpr bool a_layer_defines_every_optional_member_it_lists_in_provides = false;
template <class LayerAt, class Member>
inline constexpr bool a_layer_lists_in_provides_every_optional_member_it_defines = false;
}  // namespace diagnostics

namespace detail {
/// A listed member that is not there: one error naming it.
template <class L, class M>
constexpr bool missing_member() {
  static_assert(diagnostics::a_layer_defines_every_optional_member_it_lists_in_provides<
                    layer_at<L::position, typename L::spec>, M>,
                "kiln::provides<...>: this layer lists an optional member it does not define (misspelt, or not "
                "of the form kiln::member documents; see docs/concepts.md)");
  return false;
}
template <class L, class M>
constexpr bool check_member() {
  if constexpr (lists<L, M>) {
    if constexpr (!batch_dependent<M>) {
      if constexpr (!defines<L, M>) return missing_member<L, M>();
    }
    return true;
  } else {
    if constexpr (defines<L, M>) {
      static_assert(diagnostics::a_layer_lists_in_provides_every_optional_member_it_defines<
                        layer_at<L::position, typename L::spec>, M>,
                    "kiln::provides<...>: this layer defines an optional member it does not list; add it to its "
                    "`using provides = kiln::provides<...>` (kiln reads only the members a layer lists)");
      return false;
    }
    return true;
  }
}
}  // namespace detail

/// What kiln reads of a bound layer L: its optional members where it lists
/// them, and the defaults otherwise. `checked` is true when L lists exactly
/// the optional members it defines (else a compile error names the member).
template <class L>
struct layer_traits {
  static constexpr bool checked =
      detail::check_member<L, member::state>() && detail::check_member<L, member::saved>() &&
      detail::check_member<L, member::workspace>() && detail::check_member<L, member::reserve>() &&
      detail::check_member<L, member::positions>() && detail::check_member<L, member::bf16_activations>() &&
      detail::check_member<L, member::bf16_input>() && detail::check_member<L, member::overwrites_gradients>();
  template <class M>
  static constexpr bool has = detail::lists<L, M>;
};

/// `Layer<L>`: L is a layer spec (it can be listed in a kiln::model).
template <class L>
concept Layer = requires {
  typename L::kiln_layer;
  { L::name() } -> std::convertible_to<std::string>;
};

/// `BoundLayer<B>`: the result of binding a layer spec to an input shape.
template <class B>
concept BoundLayer = requires {
  requires Shape<typename B::input_shape>;
  requires Shape<typename B::output_shape>;
  typename B::spec;
  { B::position } -> std::convertible_to<std::size_t>;
  { B::is_view } -> std::convertible_to<bool>;
  typename B::parameters;
};

/// Layer specs whose preceding weight prefers He initialisation say so by
/// declaring `static constexpr init init_hint = init::he_normal;`.
template <class L>
constexpr init init_hint_of() {
  if constexpr (requires { L::init_hint; }) {
    return L::init_hint;
  } else {
    return init::glorot_uniform;
  }
}

}  // namespace kiln
