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
#include <utility>
#include <vector>

#include <fmt/format.h>
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

#include <kiln/bf16.hpp>
#include <kiln/detail/chain.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_name.hpp>
#include <kiln/input.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class Tag, class FirstLayer, class FirstShape, class SecondLayer, class SecondShape>
inline constexpr bool tied_uses_of_a_weight_must_agree_on_its_shape = std::is_same_v<FirstShape, SecondShape>;
template <class Input, std::size_t LayerCount>
inline constexpr bool model_needs_at_least_one_layer_after_its_input = LayerCount > 0;
template <class First>
inline constexpr bool model_must_start_with_kiln_input = kiln::Input<First>;
template <std::size_t Position, class Entry>
inline constexpr bool model_entry_must_be_a_kiln_layer = kiln::Layer<Entry>;
}  // namespace diagnostics

namespace detail {
namespace hana = boost::hana;

/// Every use of a tag after the first must want the first's stored shape.
template <class First, class Again>
struct check_tie {
  static_assert(diagnostics::tied_uses_of_a_weight_must_agree_on_its_shape<
                    typename First::tag, typename First::owner, typename First::shape_type, typename Again::owner,
                    typename Again::shape_type>,
                "kiln::tied<Tag>: the layers that share a weight must agree on its shape; a layer that uses it "
                "transposed says so with kiln::tied_transposed<Tag>");
  using type = First;
};

template <bool SameTag, class First, class Again>
struct check_if_same_tag : std::true_type {};
template <class First, class Again>
struct check_if_same_tag<true, First, Again> : std::bool_constant<sizeof(typename check_tie<First, Again>::type) != 0> {
};

/// Keeps the first parameter of each tag (every use of a tag shares it),
/// checking each later use against it. Recursive, like bind_chain, so that a
/// tie error comes with a short context.
template <class Done, class... Todo>
struct unique_params;
template <class... Done>
struct unique_params<hana::basic_tuple<Done...>> {
  static constexpr auto list = hana::tuple_t<Done...>;
};
template <class... Done, class P, class... Rest>
struct unique_params<hana::basic_tuple<Done...>, P, Rest...>
    : std::conditional_t<(std::is_same_v<typename Done::tag, typename P::tag> || ...),
                         unique_params<hana::basic_tuple<Done...>, Rest...>,
                         unique_params<hana::basic_tuple<Done..., P>, Rest...>> {
  static_assert((check_if_same_tag<std::is_same_v<typename Done::tag, typename P::tag>, Done, P>::value && ...));
};

template <class Params>
constexpr auto unique_by_tag(Params params) {
  return hana::unpack(
      params, [](auto... p) { return unique_params<hana::basic_tuple<>, typename decltype(p)::type...>::list; });
}

template <class Params>
constexpr auto layout_of(Params params) {
  return hana::unpack(params, [](auto... p) { return hana::type_c<parameter_layout<typename decltype(p)::type...>>; });
}

/// The shape of an input entry; a stand-in for anything else, so that a
/// model whose first entry is wrong stops with one error, not a cascade.
template <class I>
struct input_shape_of {
  using type = shape<1>;
};
template <kiln::Input I>
struct input_shape_of<I> {
  using type = typename I::shape_type;
};

/// Calls f(bound layer, depth) for every layer, the contents of a layer that
/// contains layers right after it (depth + 1).
template <class Bound, class F>
void for_each_nested(Bound bound, F&& f, int depth = 0) {
  hana::for_each(bound, [&](auto t) {
    using L = typename decltype(t)::type;
    f(t, depth);
    if constexpr (requires { L::chain::layers; }) for_each_nested(L::chain::layers, f, depth + 1);
  });
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

  /// Parameters that layers declare whatever their input (by tag).
  using declared = detail::declared_of<Layers...>;
  /// The model's layers as the body of a layer (a model used inside another).
  template <class Declared, class In, std::size_t Position>
  using chain = detail::sub_chain<Declared, In, Position, Layers...>;

  using bound_chain = detail::bind_chain<declared, input_shape_type, 1, boost::hana::basic_tuple<>, Layers...>;
  /// The bound layers, in order (hana::tuple of hana::type); a layer that
  /// contains layers (residual, a model used as a layer) is one entry.
  static constexpr auto layers = bound_chain::layers;
  static constexpr std::size_t layer_count = sizeof...(Layers);

  template <std::size_t I>
  using layer = typename decltype(+boost::hana::at_c<I>(layers))::type;

  using output_shape_type = typename bound_chain::output_shape;
  static constexpr output_shape_type output_shape{};

  /// The flat-buffer layout: `parameters::template offset<Tag>`, `buffer_size`.
  /// One entry per distinct tag (hana::tuple of hana::type), in buffer order.
  static constexpr auto parameter_list =
      detail::unique_by_tag(detail::collect_parameters<detail::as_layer_t<Layers>...>(layers));
  using parameters = typename decltype(+detail::layout_of(parameter_list))::type;
  /// Trainable scalars; a tied weight counts once.
  static constexpr std::size_t parameter_count = parameters::count;

  /// Values that layers keep but do not train (batch_norm's running
  /// statistics): their own buffer, in this layout, saved in checkpoints.
  static constexpr auto state_list = detail::collect_state(layers);
  using state_layout = typename decltype(+detail::layout_of(state_list))::type;

  /// Where a batch of B samples of precision T (float, double or kiln::bf16)
  /// lives in the workspace. Sizes are in elements (activations: of T; the
  /// rest: of `scalar`, f32 for bf16) and in bytes.
  template <std::size_t B, class T = float>
  struct memory_plan {
    static constexpr std::size_t alignment = detail::parameter_alignment;
    /// Parameters, gradients, scratch and saved values: f32 under bf16.
    using scalar = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
    static constexpr bool bf16_activations = std::is_same_v<T, bf16>;
    /// The first layer that computes (layer_count when none does).
    static constexpr std::size_t first_computing = detail::first_computing_index(layers);
    /// bf16: the input is rounded into slot 0 when the first layer that
    /// computes may have it rounded (detail::takes_bf16_input); otherwise
    /// that layer runs in f32 on the input as it is (token ids must stay
    /// exact, even for an embedding inside a model used as a layer).
    static constexpr bool input_in_bf16 = [] {
      if constexpr (!bf16_activations) {
        return false;
      } else if constexpr (first_computing == layer_count) {
        return true;
      } else {
        return detail::takes_bf16_input<layer<first_computing>>();
      }
    }();
    /// bf16: layer k (0-based) computes in f32 on widened copies of its
    /// input and output (it does not take bf16, or it is the first layer and
    /// the input stays f32).
    static constexpr std::array<bool, layer_count + 1> widened = [] {
      std::array<bool, layer_count + 1> w{};
      std::size_t k = 0;
      boost::hana::for_each(layers, [&](auto t) {
        using L = typename decltype(t)::type;
        w[k] = bf16_activations && !L::is_view &&
               (!detail::takes_bf16_activations<L>() || (k == first_computing && !input_in_bf16));
        ++k;
      });
      return w;
    }();
    /// A layer's saved and workspace elements, as it runs (in f32 when widened).
    template <class L>
    static constexpr std::size_t saved_of(bool in_f32) {
      return in_f32 ? detail::saved_of<L, B, scalar>() : detail::saved_of<L, B, T>();
    }
    template <class L>
    static constexpr std::size_t workspace_of(bool in_f32) {
      return in_f32 ? detail::workspace_of<L, B, scalar>() : detail::workspace_of<L, B, T>();
    }

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
    /// Working memory a layer borrows during its forward or backward (a
    /// convolution's unfolded input): the largest any layer asks for, shared
    /// since layers run one after another.
    static constexpr std::size_t scratch_elements = [] {
      std::size_t m = 0, k = 0;
      boost::hana::for_each(layers, [&](auto t) {
        m = std::max(m, workspace_of<typename decltype(t)::type>(widened[k]));
        ++k;
      });
      return detail::round_up(m, alignment);
    }();
    static constexpr std::size_t scratch_bytes = scratch_elements * sizeof(scalar);
    /// What each layer keeps from its forward to its backward (the
    /// activations inside a residual, attention probabilities), one region each.
    static constexpr std::array<std::size_t, layer_count + 1> saved_offset = [] {
      std::array<std::size_t, layer_count + 1> off{};
      std::size_t at = 0, k = 0;
      boost::hana::for_each(layers, [&](auto t) {
        off[k] = at;
        at += detail::round_up(saved_of<typename decltype(t)::type>(widened[k]), alignment);
        ++k;
      });
      off[layer_count] = at;
      return off;
    }();
    static constexpr std::size_t saved_elements = saved_offset[layer_count];
    static constexpr std::size_t saved_bytes = saved_elements * sizeof(scalar);

    /// Under bf16: f32 room for the input and output of the widest layer
    /// that computes in f32 on widened copies (`widened`); 0 when none does.
    static constexpr std::size_t widened_elements = [] {
      std::size_t m = 0, k = 0;
      boost::hana::for_each(layers, [&](auto t) {
        if (widened[k]) m = std::max(m, detail::f32_room_of<typename decltype(t)::type, B>());
        ++k;
      });
      return m;
    }();
    static constexpr std::size_t widened_bytes = widened_elements * sizeof(scalar);

    static constexpr std::size_t activation_bytes = activation_elements * sizeof(T);
    static constexpr std::size_t gradient_bytes = gradient_elements * sizeof(scalar);
    static constexpr std::size_t parameter_bytes = parameters::buffer_size * sizeof(scalar);
    /// Under bf16: the step's bf16 copy of the parameters, which GEMMs read.
    static constexpr std::size_t gemm_weight_bytes = bf16_activations ? parameters::buffer_size * sizeof(bf16) : 0;
    /// Parameters, their gradients, activations, activation gradients,
    /// scratch, saved values, and under bf16 the weights' copy and the
    /// widened room.
    static constexpr std::size_t total_bytes = 2 * parameter_bytes + activation_bytes + gradient_bytes + scratch_bytes +
                                               saved_bytes + gemm_weight_bytes + widened_bytes;
  };

  /// The model as a table: one row per layer with its shapes, the
  /// parameters it owns and the weights it shares with other layers; the
  /// layers inside a residual or a model used as a layer follow it, indented.
  static std::string summary() {
    namespace hana = boost::hana;
    std::string out = fmt::format("{:>3}  {:<34} {:<16} {:<16} {:>12}  {}\n", "#", "layer", "input", "output",
                                  "parameters", "shares");
    out += fmt::format("{:>3}  {:<34} {:<16} {:<16} {:>12}\n", 0, "input", "", to_string(input_shape_type{}), "");
    detail::for_each_nested(layers, [&](auto t, int depth) {
      using L = typename decltype(t)::type;
      std::size_t own = 0;
      std::string shares;
      if constexpr (!requires { L::chain::layers; }) {
        hana::for_each(L::parameters, [&](auto p) {
          using P = typename decltype(p)::type;
          const auto users = positions_using<typename P::tag>();
          if (users.front() == L::position) own += P::shape_type::size;
          if (users.size() > 1) {
            shares += fmt::format("{}{} with layer{} ", shares.empty() ? "" : "; ",
                                  detail::type_name<typename P::tag>(), users.size() > 2 ? "s" : "");
            bool first = true;
            for (std::size_t u : users)
              if (u != L::position) shares += fmt::format("{}{}", std::exchange(first, false) ? "" : ", ", u);
          }
        });
      }
      std::string name = std::string(2 * static_cast<std::size_t>(depth), ' ') + L::spec::name();
      if (name.size() > 34) name = name.substr(0, 31) + "...";  // the full name is in signature()
      out += fmt::format(
          "{:>3}  {:<34} {:<16} {:<16} {:>12}  {}\n", L::position, name, to_string(typename L::input_shape{}),
          to_string(typename L::output_shape{}), requires { L::chain::layers; } ? std::string() : group_digits(own),
          shares);
    });
    out += fmt::format("total parameters: {}\n", group_digits(parameter_count));
    return out;
  }

  /// The model's identity as text: every layer's kind and shapes, every
  /// parameter's (and state value's) tag and shape, in order. Derived from
  /// the type alone, so two builds of one model agree; checkpoints carry it.
  static std::string signature() {
    namespace hana = boost::hana;
    std::string s = fmt::format("input {}\n", to_string(input_shape_type{}));
    detail::for_each_nested(layers, [&](auto t, int) {
      using L = typename decltype(t)::type;
      s += fmt::format("{} {} {} -> {}\n", L::position, L::spec::name(), to_string(typename L::input_shape{}),
                       to_string(typename L::output_shape{}));
    });
    hana::for_each(parameter_list, [&](auto p) {
      using P = typename decltype(p)::type;
      s += fmt::format("param {} {}\n", detail::type_name<typename P::tag>(), to_string(typename P::shape_type{}));
    });
    hana::for_each(state_list, [&](auto p) {
      using P = typename decltype(p)::type;
      s += fmt::format("state {} {}\n", detail::type_name<typename P::tag>(), to_string(typename P::shape_type{}));
    });
    return s;
  }

  /// The 1-based positions of the layers that use the parameter Tag (layers
  /// inside others included; not the layers that contain them).
  template <class Tag>
  static std::vector<std::size_t> positions_using() {
    std::vector<std::size_t> users;
    detail::for_each_nested(layers, [&](auto t, int) {
      using L = typename decltype(t)::type;
      if constexpr (!requires { L::chain::layers; }) {
        bool uses = false;
        boost::hana::for_each(L::parameters,
                              [&](auto p) { uses = uses || std::is_same_v<typename decltype(p)::type::tag, Tag>; });
        if (uses) users.push_back(L::position);
      }
    });
    return users;
  }

 private:
  static std::string group_digits(std::size_t n) {
    const std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  }
};

/// `Model<M>`: M is a kiln::model (or a struct derived from one).
template <class M>
concept Model = requires {
  typename M::kiln_model;
};

}  // namespace kiln
