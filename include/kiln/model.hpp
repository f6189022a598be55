// kiln/model.hpp — a typed composition of layers.
//
// WHAT IT IS
//   `model<input<D...>, L1, L2, ...>` binds each layer to the output shape of
//   the one before it, at compile time. The model is an empty type; all it
//   knows is constant:
//
//     input_shape, output_shape      values: `mlp::output_shape == shape<10>{}`
//     input_shape_type, output_shape_type
//     layer_types, layer<I>          the bound layers (a type list), layer I
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

#include <kiln/bf16.hpp>
#include <kiln/detail/chain.hpp>
#include <kiln/detail/model_plan.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/signature.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/detail/type_name.hpp>
#include <kiln/input.hpp>
#include <kiln/layer.hpp>
#include <kiln/layers/flatten.hpp>
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
template <class... Entries>
inline constexpr bool model_lists_its_input_then_at_least_one_layer = sizeof...(Entries) >= 2;
}  // namespace diagnostics

namespace detail {

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

/// The first parameter of each tag (every use of a tag shares it), each
/// later use checked against it. Tags are matched by hash (detail::tag_index):
/// O(N log N), no comparison of every pair.
template <class All, class Seq = std::make_index_sequence<All::size>>
struct unique_params;
/// The uses at Kept::indices (all of them when each is its own parameter).
template <bool All, class List, class Kept>
struct kept_uses {
  using type = List;
};
template <class List, class Kept>
struct kept_uses<false, List, Kept> : pick_by<List, Kept> {};

template <class... P, std::size_t... I>
struct unique_params<type_list<P...>, std::index_sequence<I...>> {
  using index = tag_index<typename P::tag...>;
  static_assert(!index::collision, "kiln: two different parameter tags have the same name hash; rename one of them");
  static constexpr std::size_t total = sizeof...(P);
  static constexpr std::size_t unique_count = [] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < total; ++i) n += index::first[i] == i;
    return n;
  }();
  struct kept {
    static constexpr std::array<std::size_t, unique_count> indices = [] {
      std::array<std::size_t, unique_count> k{};
      for (std::size_t i = 0, n = 0; i < total; ++i)
        if (index::first[i] == i) k[n++] = i;
      return k;
    }();
  };
  struct repeated {
    static constexpr std::array<std::size_t, total - unique_count> indices = [] {
      std::array<std::size_t, total - unique_count> k{};
      for (std::size_t i = 0, n = 0; i < total; ++i)
        if (index::first[i] != i) k[n++] = i;
      return k;
    }();
  };
  /// (Every use its own parameter, the usual case: the list as it is.)
  using type = typename kept_uses<unique_count == total, type_list<P...>, kept>::type;
  /// slot[u]: the index in `type` (buffer order) of the parameter that use u stores in.
  static constexpr std::array<std::size_t, total> slot = [] {
    std::array<std::size_t, total> s{};
    for (std::size_t i = 0, n = 0; i < total; ++i) s[i] = index::first[i] == i ? n++ : s[index::first[i]];
    return s;
  }();

  template <class Seq>
  struct checks;
  template <std::size_t... J>
  struct checks<std::index_sequence<J...>> {
    using type = type_list<typename check_tie<list_at_t<index::first[repeated::indices[J]], type_list<P...>>,
                                              list_at_t<repeated::indices[J], type_list<P...>>>::type...>;
  };
  /// Instantiating this checks every tie.
  using checked = typename checks<std::make_index_sequence<total - unique_count>>::type;
};

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

}  // namespace detail

template <class InputEntry, class... Layers>
struct model<InputEntry, Layers...> {
  // Its checks: one error, and the class stays whole (see bound_layer_base::accepted).
  static constexpr bool entries_accepted = [] {
    if constexpr (!diagnostics::model_must_start_with_kiln_input<InputEntry>) {
      static_assert(diagnostics::model_must_start_with_kiln_input<InputEntry>,
                    "kiln::model: the first entry must be kiln::input<...>, the shape of one sample");
      return false;
    } else {
      static_assert(diagnostics::model_needs_at_least_one_layer_after_its_input<InputEntry, sizeof...(Layers)>,
                    "kiln::model: a model needs at least one layer after its input<...>");
      return InputEntry::accepted &&  // (runs the input's own check)
             diagnostics::model_needs_at_least_one_layer_after_its_input<InputEntry, sizeof...(Layers)>;
    }
  }();
  static_assert(entries_accepted || true);  // (it reports, once)

  using kiln_model = void;
  using input_type = InputEntry;
  using input_shape_type = typename detail::input_shape_of<InputEntry>::type;
  static constexpr input_shape_type input_shape{};

  /// Parameters that layers declare whatever their input (by tag).
  using declared = detail::declared_of<Layers...>;
  /// The model's layers as the body of a layer (a model used inside another).
  template <class Declared, class In, std::size_t Position>
  using chain = detail::sub_chain<Declared, In, Position, Layers...>;

  using bound_chain = detail::bind_chain<declared, input_shape_type, 1, detail::type_list<Layers...>>;
  /// The bound layers, in order (a kiln::param_list-like type list); a
  /// layer that contains layers (residual, a model used as a layer) is one entry.
  using layer_types = typename bound_chain::layers;
  static constexpr std::size_t layer_count = sizeof...(Layers);

  template <std::size_t I>
  using layer = detail::list_at_t<I, layer_types>;

  using output_shape_type = typename bound_chain::output_shape;
  static constexpr output_shape_type output_shape{};
  /// False when the entries or a layer were rejected (that error is out).
  static constexpr bool accepted = entries_accepted && detail::all_accepted<layer_types>::value;

  /// Every parameter of every layer (a tied weight once per use), with its initialiser resolved.
  using parameter_uses = detail::collect_parameters_t<layer_types, detail::type_list<detail::as_layer_t<Layers>...>>;
  using unique = detail::unique_params<parameter_uses>;
  static_assert(sizeof(typename unique::checked) > 0);  // (instantiates the check of every tie)

  /// One stored parameter per distinct tag (a type list), in buffer order.
  using parameter_types = typename unique::type;
  /// The flat-buffer layout: `parameters::template offset<Tag>`, `buffer_size`.
  using parameters = detail::layout_of_t<parameter_types>;
  /// Trainable scalars; a tied weight counts once.
  static constexpr std::size_t parameter_count = parameters::count;

  /// Values that layers keep but do not train (batch_norm's running
  /// statistics): their own buffer, in this layout, saved in checkpoints.
  using state_types = detail::collect_state_t<layer_types>;
  using state_layout = detail::layout_of_t<state_types>;

  /// Where a batch of B samples of precision T (float, double or kiln::bf16)
  /// lives in the workspace. Sizes are in elements (activations: of T; the
  /// rest: of `scalar`, f32 for bf16) and in bytes.
  template <std::size_t B, class T = float>
  struct memory_plan : detail::model_plan<layer_types, input_shape_type, B, T> {
    using base = detail::model_plan<layer_types, input_shape_type, B, T>;
    static constexpr std::size_t parameter_bytes = parameters::buffer_size * sizeof(typename base::scalar);
    /// Under bf16 on a CPU with AVX512-BF16: the step's bf16 copy of the
    /// parameters, which GEMMs read (elsewhere they read the f32 ones).
    static constexpr std::size_t gemm_weight_bytes =
        base::bf16_activations && native_bf16_products ? parameters::buffer_size * sizeof(bf16) : 0;
    /// Parameters, their gradients, activations, activation gradients,
    /// scratch, saved values, and under bf16 the weights' copy and the
    /// widened room.
    static constexpr std::size_t total_bytes = 2 * parameter_bytes + base::activation_bytes + base::gradient_bytes +
                                               base::scratch_bytes + base::saved_bytes + gemm_weight_bytes +
                                               base::widened_bytes;
  };

  /// The model as a table: one row per layer with its shapes, the
  /// parameters it owns and the weights it shares with other layers; the
  /// layers inside a residual or a model used as a layer follow it, indented.
  static std::string summary() {
    std::string out = fmt::format("{:>3}  {:<34} {:<16} {:<16} {:>12}  {}\n", "#", "layer", "input", "output",
                                  "parameters", "shares");
    out += fmt::format("{:>3}  {:<34} {:<16} {:<16} {:>12}\n", 0, "input", "", to_string(input_shape_type{}), "");
    const auto param_users = value_users().first;
    detail::for_each_nested(layer_types{}, [&](auto* l, int depth) {
      using L = std::remove_pointer_t<decltype(l)>;
      std::size_t own = 0;
      std::string shares;
      if constexpr (!detail::contains_layers<L>) {
        detail::for_each_type(typename L::parameters{}, [&](auto* p) {
          using P = std::remove_pointer_t<decltype(p)>;
          const auto& users = param_users[parameters::template index_of<typename P::tag>()];
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
      if (name.size() > 34) name = name.substr(0, 31) + "...";
      out += fmt::format(
          "{:>3}  {:<34} {:<16} {:<16} {:>12}  {}\n", L::position, name, to_string(typename L::input_shape{}),
          to_string(typename L::output_shape{}), detail::contains_layers<L> ? std::string() : group_digits(own),
          shares);
    });
    out += fmt::format("total parameters: {}\n", group_digits(parameter_count));
    return out;
  }

  /// The model's identity as text, derived from its type alone and spelt
  /// the same by every compiler and every flag (no type's name appears in
  /// it): the input shape; every layer's position, kind (its hand-written
  /// name; a model used as a layer is "model") and shapes, nested layers
  /// included; every parameter's index, shape, offset in the flat buffer
  /// and the positions of the layers that use it (a tied weight: several);
  /// every state value's likewise. Checkpoints carry it:
  ///
  ///   input shape<4>
  ///   layer 1 dense<3, tied> shape<4> -> shape<3>
  ///   layer 2 dense<4, tied_transposed> shape<3> -> shape<4>
  ///   param 0 shape<3, 4> at 0 used by 1, 2
  ///   param 1 shape<3> at 16 used by 1
  ///   param 2 shape<4> at 32 used by 2
  static std::string signature() {
    const auto users = value_users();
    return fmt::format("input {}\n", to_string(input_shape_type{})) +
           detail::layer_lines(detail::flatten_nested_t<layer_types>{}) +
           detail::value_lines<parameters>("param", parameter_types{}, users.first) +
           detail::value_lines<state_layout>("state", state_types{}, users.second);
  }

  /// The 1-based positions of the layers that use the parameter Tag (layers
  /// inside others included; not the layers that contain them).
  template <class Tag>
  static std::vector<std::size_t> positions_using() {
    if constexpr (parameters::template contains<Tag>) {
      return value_users().first[parameters::template index_of<Tag>()];
    } else {
      return {};
    }
  }

 private:
  /// The positions of the layers that use each parameter and each state
  /// value (by index in parameter_types, state_types).
  static std::pair<std::vector<std::vector<std::size_t>>, std::vector<std::vector<std::size_t>>> value_users() {
    using uses = detail::value_uses<detail::flatten_nested_t<layer_types>>;
    return {detail::users_by_index<parameters>(typename uses::parameters{}),
            detail::users_by_index<state_layout>(typename uses::state{})};
  }

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


/// `model<>` (the primary template, used only without entries): one error,
/// and a stand-in model after it (so no cascade).
template <class... Entries>
struct model : model<input<1>, flatten> {
  // Its check: one error, and the class stays whole (see bound_layer_base::accepted).
  static constexpr bool accepted = [] {
    static_assert(diagnostics::model_lists_its_input_then_at_least_one_layer<Entries...>,
                  "kiln::model<>: a model lists its input<...> first, then at least one layer, e.g. "
                  "model<input<784>, dense<10>>");
    return diagnostics::model_lists_its_input_then_at_least_one_layer<Entries...>;
  }();
  static_assert(accepted || true);  // (it reports, once)
};

/// `Model<M>`: M is a kiln::model (or a struct derived from one).
template <class M>
concept Model = requires {
  typename M::kiln_model;
};

}  // namespace kiln
