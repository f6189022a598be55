// kiln/model.hpp — a typed composition of layers.
//
// WHAT IT IS
//   `model<input<D...>, L1, L2, ...>` binds each layer to the output shape of
//   the one before it, at compile time. The model is an empty type; all it
//   knows is constant:
//
//     input_shape, output_shape      values: `mlp::output_shape == shape<10>{}`
//     input_shape_type, output_shape_type
//     layers                         hana::tuple_t of the bound layers
//     layer_count, parameter_count   (a tied weight counts once)
//     parameters                     the flat-buffer layout (offsets per tag)
//     memory_plan<B, T>              activation/gradient bytes for a batch of B
//     summary()                      a printable table (layer, shapes, params)
//
// SHAPE CONTRACT
//   Layer k (1-based) is bound to the output shape of layer k − 1 (layer 0 is
//   the input). A layer that cannot take that shape stops compilation with a
//   message naming the layer, its position and the shape: docs/models.md.
//
// REQUIREMENTS
//   The first entry is kiln::input<...>; at least one layer follows.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include <boost/hana/append.hpp>
#include <boost/hana/at.hpp>
#include <boost/hana/back.hpp>
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/contains.hpp>
#include <boost/hana/flatten.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/transform.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>
#include <fmt/format.h>

#include <kiln/detail/parameter_layout.hpp>
#include <kiln/input.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class Input, std::size_t LayerCount>
inline constexpr bool model_needs_at_least_one_layer_after_its_input = LayerCount > 0;
template <class First>
inline constexpr bool model_must_start_with_kiln_input = kiln::Input<First>;
template <std::size_t Position, class Entry>
inline constexpr bool model_entry_must_be_a_kiln_layer = kiln::Layer<Entry>;
}  // namespace diagnostics

namespace detail {
namespace hana = boost::hana;

/// Binds Specs... in order, each to the output shape of the one before.
/// (A plain recursive struct rather than hana::fold_left: when a layer
/// rejects its input, the compiler's context then lists one short line per
/// layer instead of a screenful of fold internals.)
template <class In, std::size_t Position, class Done, class... Todo>
struct bind_chain;
template <class In, std::size_t Position, class... Done>
struct bind_chain<In, Position, hana::basic_tuple<Done...>> {
  static constexpr auto layers = hana::tuple_t<Done...>;
};
template <class In, std::size_t Position, class... Done, class Spec, class... Rest>
struct bind_chain<In, Position, hana::basic_tuple<Done...>, Spec, Rest...>
    : bind_chain<typename Spec::template bind<In, Position>::output_shape, Position + 1,
                 hana::basic_tuple<Done..., typename Spec::template bind<In, Position>>, Rest...> {};

constexpr int resolve_init(init declared, init hint) {
  return static_cast<int>(declared == init::automatic ? hint : declared);
}

template <class P, init Hint>
using stored_param_of =
    stored_param<typename P::tag, typename P::shape_type,
                 resolve_init(P::initializer, Hint),
                 (P::shape_type::rank >= 2 ? P::shape_type::size / P::shape_type::extent(0) : P::shape_type::size),
                 (P::shape_type::rank >= 2 ? P::shape_type::extent(0) : P::shape_type::size)>;

/// Every parameter of every bound layer, with `init::automatic` resolved from
/// the layer that follows (He before relu, Glorot otherwise).
template <class... Specs, class Bound>
constexpr auto collect_parameters(Bound bound) {
  constexpr std::array<init, sizeof...(Specs) + 1> hints{init_hint_of<Specs>()..., init::glorot_uniform};
  auto per_layer = hana::transform(hana::to_tuple(hana::make_range(hana::size_c<0>, hana::length(bound))),
                                   [&](auto i) {
                                     using B = typename decltype(+hana::at(bound, i))::type;
                                     constexpr init hint = hints[decltype(i)::value + 1];
                                     return hana::transform(B::parameters, [](auto p) {
                                       return hana::type_c<stored_param_of<typename decltype(p)::type, hint>>;
                                     });
                                   });
  return hana::flatten(per_layer);
}

/// Keep the first parameter of each tag: every use of a tag shares it.
template <class Params>
constexpr auto unique_by_tag(Params params) {
  return hana::fold_left(params, hana::tuple_t<>, [](auto acc, auto p) {
    using P = typename decltype(p)::type;
    constexpr bool seen = hana::unpack(acc, [](auto... q) {
      return (std::is_same_v<typename P::tag, typename decltype(q)::type::tag> || ... || false);
    });
    if constexpr (seen) {
      return acc;
    } else {
      return hana::append(acc, p);
    }
  });
}

template <class Params>
constexpr auto layout_of(Params params) {
  return hana::unpack(params, [](auto... p) { return hana::type_c<parameter_layout<typename decltype(p)::type...>>; });
}

/// The shape of an input entry; a stand-in for anything else, so that a
/// model whose first entry is wrong stops with one error, not a cascade.
template <class I> struct input_shape_of { using type = shape<1>; };
template <std::size_t... D> struct input_shape_of<input<D...>> { using type = typename input<D...>::shape_type; };

template <class InShape, class Bound>
constexpr auto last_output_shape(Bound bound) {
  if constexpr (decltype(hana::length(bound))::value == 0) {
    return hana::type_c<InShape>;
  } else {
    return hana::type_c<typename decltype(+hana::back(bound))::type::output_shape>;
  }
}

}  // namespace detail

template <class InputEntry, class... Layers>
struct model {
  static_assert(diagnostics::model_must_start_with_kiln_input<InputEntry>,
                "kiln::model: the first entry must be kiln::input<...>, the shape of one sample");
  static_assert(diagnostics::model_needs_at_least_one_layer_after_its_input<InputEntry, sizeof...(Layers)>,
                "kiln::model: a model needs at least one layer after its input<...>");

  using kiln_model = void;
  using input_type = InputEntry;
  using input_shape_type = typename detail::input_shape_of<InputEntry>::type;
  static constexpr input_shape_type input_shape{};

  /// The bound layers, in order (hana::tuple of hana::type).
  static constexpr auto layers = detail::bind_chain<input_shape_type, 1, boost::hana::basic_tuple<>, Layers...>::layers;
  static constexpr std::size_t layer_count = sizeof...(Layers);

  template <std::size_t I>
  using layer = typename decltype(+boost::hana::at_c<I>(layers))::type;

  using output_shape_type = typename decltype(+detail::last_output_shape<input_shape_type>(layers))::type;
  static constexpr output_shape_type output_shape{};

  /// The flat-buffer layout: `parameters::template offset<Tag>`, `buffer_size`.
  /// One entry per distinct tag (hana::tuple of hana::type), in buffer order.
  static constexpr auto parameter_list = detail::unique_by_tag(detail::collect_parameters<Layers...>(layers));
  using parameters = typename decltype(+detail::layout_of(parameter_list))::type;
  /// Trainable scalars; a tied weight counts once.
  static constexpr std::size_t parameter_count = parameters::count;

  /// Where a batch of B samples of scalar type T lives in the workspace.
  template <std::size_t B, class T = float>
  struct memory_plan {
    static constexpr std::size_t alignment = detail::parameter_alignment;
    /// Element sizes of each slot: slot 0 is the input, slot k the output of
    /// layer k; a view layer (flatten) shares its input's slot.
    static constexpr std::array<std::size_t, layer_count + 1> slot = [] {
      std::array<std::size_t, layer_count + 1> s{};
      std::size_t next = 1;
      std::size_t k = 1;
      boost::hana::for_each(layers, [&](auto t) {
        using L = typename decltype(t)::type;
        s[k] = L::is_view ? s[k - 1] : next++;
        ++k;
      });
      return s;
    }();
    static constexpr std::array<std::size_t, layer_count + 1> activation_offset = [] {
      std::array<std::size_t, layer_count + 1> sizes{input_shape_type::size * B};
      std::size_t k = 1;
      boost::hana::for_each(layers, [&](auto t) { sizes[k++] = decltype(t)::type::output_shape::size * B; });
      std::array<std::size_t, layer_count + 1> off{};
      std::size_t at = 0;
      for (std::size_t i = 0; i <= layer_count; ++i) {
        if (i > 0 && slot[i] == slot[i - 1]) {
          off[i] = off[i - 1];
        } else {
          off[i] = at;
          at = detail::round_up(at + sizes[i], alignment);
        }
      }
      return off;
    }();
    static constexpr std::size_t activation_elements = [] {
      std::size_t at = detail::round_up(input_shape_type::size * B, alignment);
      boost::hana::for_each(layers, [&](auto t) {
        using L = typename decltype(t)::type;
        if (!L::is_view) at += detail::round_up(L::output_shape::size * B, alignment);
      });
      return at;
    }();
    /// Two ping-pong buffers, each as large as the largest activation.
    static constexpr std::size_t gradient_slot_elements = [] {
      std::size_t m = input_shape_type::size;
      boost::hana::for_each(layers, [&](auto t) { m = std::max(m, decltype(t)::type::output_shape::size); });
      return detail::round_up(m * B, alignment);
    }();
    static constexpr std::size_t gradient_elements = 2 * gradient_slot_elements;

    static constexpr std::size_t activation_bytes = activation_elements * sizeof(T);
    static constexpr std::size_t gradient_bytes = gradient_elements * sizeof(T);
    static constexpr std::size_t parameter_bytes = parameters::buffer_size * sizeof(T);
    /// Parameters, their gradients, activations and activation gradients.
    static constexpr std::size_t total_bytes = 2 * parameter_bytes + activation_bytes + gradient_bytes;
  };

  /// The model as a table: one row per layer with its shapes and parameters.
  static std::string summary() {
    std::string out = fmt::format("{:>3}  {:<22} {:<18} {:<18} {:>12}\n", "#", "layer", "input", "output", "parameters");
    out += fmt::format("{:>3}  {:<22} {:<18} {:<18} {:>12}\n", 0, "input", "", to_string(input_shape_type{}), "");
    boost::hana::for_each(layers, [&](auto t) {
      using L = typename decltype(t)::type;
      std::size_t own = 0;
      boost::hana::for_each(L::parameters, [&](auto p) { own += decltype(p)::type::shape_type::size; });
      out += fmt::format("{:>3}  {:<22} {:<18} {:<18} {:>12}\n", L::position, L::spec::name(),
                         to_string(typename L::input_shape{}), to_string(typename L::output_shape{}),
                         group_digits(own));
    });
    out += fmt::format("total parameters: {}\n", group_digits(parameter_count));
    return out;
  }

 private:
  static std::string group_digits(std::size_t n) {
    std::string s = std::to_string(n);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
    return s;
  }
};

/// `Model<M>`: M is a kiln::model (or a struct derived from one).
template <class M>
concept Model = requires { typename M::kiln_model; };

}  // namespace kiln
