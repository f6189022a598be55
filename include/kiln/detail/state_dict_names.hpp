// kiln/detail/state_dict_names.hpp — the names and shapes a model's values
// have in the state_dict of the equivalent PyTorch module, and where each
// lives in kiln's buffers (what kiln/safetensors.hpp writes and reads).
//
// THE EQUIVALENT MODULE
//   model<input<...>, L...>  nn.Sequential: layer k (0-based, every layer
//                            counted, relu and flatten too) is "k"
//   a model used as a layer  nn.Sequential: "k.j" for its layer j
//   residual<L...>           a module whose `body` is nn.Sequential: "k.body.j"
//   transformer_block        nn.Sequential(Residual(LN, attention),
//                            Residual(LN, Linear, GELU, Linear)): "k.0.body.1..."
//   position_wise<L>         L itself (nn.Linear acts on the last dimension)
//   a leaf                   "k." + the names below, in its parameter order
//
// TIED WEIGHTS   one tensor, named after the first layer that uses it; each
//                other (untransposed) use is an alias: its name and the
//                tensor's, which the file's __metadata__ records, as the
//                safetensors library's save_model does.
// ORDER          as PyTorch's state_dict: module by module, parameters then
//                buffers; batch_norm's num_batches_tracked (an I64 scalar,
//                kiln's step count) after its running statistics.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/detail/binding.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/layers/attention.hpp>
#include <kiln/layers/batch_norm.hpp>
#include <kiln/layers/conv2d.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/embedding.hpp>
#include <kiln/layers/layer_norm.hpp>
#include <kiln/layers/position_embedding.hpp>
#include <kiln/layers/position_wise.hpp>
#include <kiln/layers/residual.hpp>
#include <kiln/layers/transformer_block.hpp>
#include <kiln/layers/unembed.hpp>

namespace kiln {

/// What a layer spec's values are called in PyTorch's state_dict: its
/// parameters and state values in the order the layer lists them (a value
/// beyond the list is "param_I" / "state_I"), a batch counter after them
/// (batch_norm's num_batches_tracked), and what comes between a container's
/// name and the index of a layer inside it. Specialise it for your own
/// layer to name its values as your PyTorch module does.
template <class Spec>
struct state_dict_names {
  static constexpr std::array<std::string_view, 0> parameters{};
  static constexpr std::array<std::string_view, 0> state{};
  static constexpr std::string_view batch_counter{};
  static constexpr std::string_view contents = ".";
};

namespace detail {
struct weight_and_bias {
  static constexpr std::array<std::string_view, 2> parameters{"weight", "bias"};
  static constexpr std::array<std::string_view, 0> state{};
  static constexpr std::string_view batch_counter{};
  static constexpr std::string_view contents = ".";
};
}  // namespace detail

template <std::size_t Units, class... Options>
struct state_dict_names<dense<Units, Options...>> : detail::weight_and_bias {};  // nn.Linear
template <std::size_t F, std::size_t K, std::size_t S, int P>
struct state_dict_names<conv2d<F, K, S, P>> : detail::weight_and_bias {};  // nn.Conv2d
template <>
struct state_dict_names<layer_norm> : detail::weight_and_bias {};  // nn.LayerNorm
template <>
struct state_dict_names<batch_norm> : detail::weight_and_bias {  // nn.BatchNorm1d / 2d
  static constexpr std::array<std::string_view, 2> state{"running_mean", "running_var"};
  static constexpr std::string_view batch_counter = "num_batches_tracked";
};
template <std::size_t V, std::size_t D, class... Options>
struct state_dict_names<embedding<V, D, Options...>> : detail::weight_and_bias {};  // nn.Embedding (weight)
template <class... Options>
struct state_dict_names<unembed<Options...>> : detail::weight_and_bias {};  // nn.Linear(bias=False), tied
template <>
struct state_dict_names<position_embedding> : detail::weight_and_bias {  // a Parameter `table` [L, D]
  static constexpr std::array<std::string_view, 1> parameters{"table"};
};
template <std::size_t Heads>
struct state_dict_names<causal_self_attention<Heads>> : detail::weight_and_bias {  // `mha`: nn.MultiheadAttention
  static constexpr std::array<std::string_view, 4> parameters{"mha.in_proj_weight", "mha.in_proj_bias",
                                                              "mha.out_proj.weight", "mha.out_proj.bias"};
};
template <class... Layers>
struct state_dict_names<residual<Layers...>> : state_dict_names<void> {
  static constexpr std::string_view contents = ".body.";
};
template <class Layer>
struct state_dict_names<position_wise<Layer>> : state_dict_names<detail::as_layer_t<Layer>> {};

namespace detail {

/// One tensor of the state_dict and where its values live in kiln's buffers.
struct state_dict_tensor {
  enum class role : unsigned char { parameter, state, batch_counter };
  std::string name;
  std::vector<std::uint64_t> shape;
  role kind = role::parameter;
  std::size_t offset = 0, size = 0;  ///< in the parameter or state buffer
};

/// A model's state_dict: its tensors in order, and the names of the tied
/// weights' other uses, each with the name of the tensor it is.
struct state_dict_layout {
  std::vector<state_dict_tensor> tensors;
  std::vector<std::pair<std::string, std::string>> aliases;
};

/// Name `index` of `names`, or "<fallback>_<index>" past its end.
template <std::size_t N>
std::string slot_name(const std::array<std::string_view, N>& names, std::size_t index, std::string_view fallback) {
  return index < N ? std::string(names[index]) : std::string(fallback) + "_" + std::to_string(index);
}

/// Whether bound layer B uses its weight transposed (dense<N, tied_transposed<T>>, also inside a position_wise).
template <class B>
constexpr bool uses_transposed() {
  if constexpr (requires { B::transposed; }) {
    return B::transposed;
  } else if constexpr (requires { typename B::inner; }) {
    return uses_transposed<typename B::inner>();
  } else {
    return false;
  }
}

template <class Model>
class state_dict_walk {
  using layout = typename Model::parameters;
  using state_layout = typename Model::state_layout;

 public:
  state_dict_layout run() {
    list(typename Model::layer_types{}, "");
    return std::move(out_);
  }

 private:
  template <class... B>
  void list(type_list<B...>, const std::string& prefix) {
    std::size_t k = 0;
    (layer<B>(prefix + std::to_string(k++)), ...);
  }

  template <class S>
  static std::vector<std::uint64_t> extents() {
    return {S::extents.begin(), S::extents.end()};
  }

  template <class B>
  void layer(const std::string& path) {
    using names = state_dict_names<typename B::spec>;
    if constexpr (contains_layers<B>) {
      list(typename B::chain::layers{}, path + std::string(names::contents));
    } else {
      std::size_t slot = 0;
      for_each_type(typename B::parameters{}, [&](auto* p) {
        using P = std::remove_pointer_t<decltype(p)>;
        constexpr std::size_t i = layout::tags::template find<typename P::tag>;
        std::string name = path + "." + slot_name(names::parameters, slot++, "param");
        if (stored_[i].empty()) {
          stored_[i] = name;
          out_.tensors.push_back({std::move(name), extents<typename P::shape_type>(),
                                  state_dict_tensor::role::parameter, layout::offsets[i], layout::sizes[i]});
        } else if (!uses_transposed<B>()) {
          out_.aliases.emplace_back(std::move(name), stored_[i]);
        }
      });
      slot = 0;
      for_each_type(state_of_t<B>{}, [&](auto* p) {
        using P = std::remove_pointer_t<decltype(p)>;
        constexpr std::size_t i = state_layout::tags::template find<typename P::tag>;
        out_.tensors.push_back({path + "." + slot_name(names::state, slot++, "state"),
                                extents<typename P::shape_type>(), state_dict_tensor::role::state,
                                state_layout::offsets[i], state_layout::sizes[i]});
      });
      if constexpr (!names::batch_counter.empty())
        out_.tensors.push_back({path + "." + std::string(names::batch_counter), {},
                                state_dict_tensor::role::batch_counter, 0, 1});
    }
  }

  std::vector<std::string> stored_ = std::vector<std::string>(layout::tensor_count);
  state_dict_layout out_;
};

/// Model's state_dict: names, shapes, places (see the top of this file).
template <class Model>
state_dict_layout state_dict_of() {
  return state_dict_walk<Model>().run();
}

}  // namespace detail

}  // namespace kiln
