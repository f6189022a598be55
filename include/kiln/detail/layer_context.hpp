// kiln/detail/layer_context.hpp — what a bound layer's forward/backward sees.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <kiln/bf16.hpp>

#include <kiln/detail/gemm.hpp>
#include <kiln/detail/parameter_layout.hpp>
#include <kiln/detail/type_list.hpp>

namespace kiln::diagnostics {
template <class Tag, bool Listed>
inline constexpr bool a_layer_reaches_only_the_parameters_it_lists = Listed;
template <class Tag, bool Listed>
inline constexpr bool a_layer_reaches_only_the_state_it_lists = Listed;
}  // namespace kiln::diagnostics

namespace kiln::detail {

/// A tag and where it starts in a flat buffer.
template <class Tag, std::size_t Offset>
struct tag_at {};

/// The offsets of one layer's tags (those it lists, or for a layer that
/// contains layers those of its contents), under a name of their own. A
/// layer's passes are compiled for a context that names these, not the
/// model: a name that grows with the model, given to each of a model's N
/// passes, costs the compiler time and memory quadratic in N.
template <class... Entries>
struct local_offsets;
template <class... Tags, std::size_t... Offsets>
struct local_offsets<tag_at<Tags, Offsets>...> {
  static constexpr std::array<std::size_t, sizeof...(Tags) + 1> offsets{Offsets..., 0};
  template <class Tag>
  static constexpr std::size_t index = tag_index<Tags...>::template find<Tag>;
  template <class Tag>
  static constexpr bool contains = index<Tag> < sizeof...(Tags);
  /// (0 for a tag not listed: layer_context reports that, once)
  template <class Tag>
  static constexpr std::size_t offset = offsets[index<Tag>];
};

/// Where each of N groups starts when group k holds counts[k] entries, one
/// after another (and, last, the total).
template <std::size_t N>
constexpr std::array<std::size_t, N + 1> group_begins(const std::array<std::size_t, N>& counts) {
  std::array<std::size_t, N + 1> b{};
  for (std::size_t k = 0; k < N; ++k) b[k + 1] = b[k] + counts[k];
  return b;
}
/// The local offsets of the tags of List (a type_list of parameters), found
/// by index: entry Begin + j of Offsets::offsets belongs to List's j-th
/// parameter. No tag is looked up, so no entity is named after Offsets per
/// tag (which would cost the compiler time quadratic in the model).
template <class List, std::size_t Begin, class Offsets, class Seq = std::make_index_sequence<List::size>>
struct local_by_index;
template <class... P, std::size_t Begin, class Offsets, std::size_t... J>
struct local_by_index<type_list<P...>, Begin, Offsets, std::index_sequence<J...>> {
  using type = local_offsets<tag_at<typename P::tag, Offsets::offsets[Begin + J]>...>;
};

/// The offsets in Layout of the tags of List (a type_list of parameters).
template <class Layout, class List>
struct local_layout;
template <class Layout, class... P>
struct local_layout<Layout, type_list<P...>> {
  using type = local_offsets<tag_at<typename P::tag, Layout::template offset<typename P::tag>>...>;
};
template <class Layout, class List>
using local_layout_t = typename local_layout<Layout, List>::type;

/// Views of one layer's slice of the program for one step. Activations are
/// column-major `features × batch` (one sample per column, contiguous), i.e.
/// the row-major [batch, features] layout of PyTorch.
///
/// A is how activations (x, y) are stored and W how GEMMs read the weights:
/// T and T, except under precision<bf16>, where W is bf16 (the step's copy of
/// the parameters, `gemm_param`) and A is bf16 for the layers that declare
/// `bf16_activations` (kiln/layer.hpp); the program runs the others on f32
/// copies of their input and output.
template <class T, std::size_t B, class Layout, class StateLayout = parameter_layout<>, class A = T, class W = T>
struct layer_context {
  using scalar = T;
  using activation = A;
  using gemm_weight = W;
  using layout = Layout;
  using state_layout = StateLayout;
  static constexpr std::size_t batch = B;
  /// Activations are stored in bf16 (precision<bf16>, a layer that takes them).
  static constexpr bool bf16_activations = std::is_same_v<A, bf16>;

  const A* x = nullptr;   ///< input activations
  A* y = nullptr;         ///< output activations
  const T* dy = nullptr;  ///< gradient of the loss w.r.t. y (backward)
  T* dx = nullptr;        ///< gradient w.r.t. x, or null when nobody needs it
  const T* w = nullptr;   ///< the flat parameter buffer
  T* dw = nullptr;        ///< the flat gradient buffer
  const W* wg = nullptr;  ///< the parameters as GEMMs read them, when W is not T (bf16: rounded once per step)
  gemm_scratch<T>* gemm = nullptr;
  T* scratch = nullptr;  ///< the layer's `workspace<B>` elements, if it declared any
  T* saved = nullptr;    ///< the layer's `saved<B>` elements: kept from its forward to its backward
  T* st = nullptr;       ///< the model's state buffer (running statistics), shared by replicas
  /// With bf16 activations, during forward: room for the layer's output in
  /// f32 (out_size × batch scalars), to accumulate in before rounding into y.
  T* wide = nullptr;

  /// The layer writes its parameters' gradients instead of adding to them:
  /// set by the program, for a layer that declares `overwrites_gradients`,
  /// in place of zeroing them first.
  bool overwrite_gradients = false;
  bool training = true;            ///< train mode (dropout drops, batch_norm uses batch statistics)
  bool keeps_state = true;         ///< this replica updates the state buffer (replica 0 of each process)
  std::uint64_t seed = 0;          ///< the program's seed (dropout masks derive from it)
  std::uint64_t step = 0;          ///< the training step (dropout masks change with it)
  std::uint64_t first_sample = 0;  ///< the global index of this replica's first sample

  template <class Tag>
  const T* param() const {
    static_assert(diagnostics::a_layer_reaches_only_the_parameters_it_lists<Tag, Layout::template contains<Tag>>,
                  "kiln: a layer reads and writes only the parameters it lists in `parameters` (a layer that "
                  "contains layers: those its contents list); add param<Tag, Shape, Init> for this tag there");
    return w + Layout::template offset<Tag>;
  }
  /// Parameter Tag as a GEMM operand: param<Tag>(), or under precision<bf16>
  /// its bf16 copy, made once per step (so no GEMM rounds the weights again).
  template <class Tag>
  const W* gemm_param() const {
    if constexpr (std::is_same_v<W, T>) {
      return param<Tag>();
    } else {
      return (void)param<Tag>(), wg + Layout::template offset<Tag>;
    }
  }
  template <class Tag>
  T* grad() const {
    return (void)param<Tag>(), dw + Layout::template offset<Tag>;
  }
  template <class Tag>
  T* state() const {
    static_assert(diagnostics::a_layer_reaches_only_the_state_it_lists<Tag, StateLayout::template contains<Tag>>,
                  "kiln: a layer reads and writes only the state values it lists in `state`; add "
                  "param<Tag, Shape, Init> for this tag there");
    return st + StateLayout::template offset<Tag>;
  }

  /// The same views for a layer run over `Rows` times as many columns
  /// (kiln::position_wise: every position of every sample is one column).
  template <std::size_t Rows>
  layer_context<T, B * Rows, Layout, StateLayout, A, W> widen() const {
    layer_context<T, B * Rows, Layout, StateLayout, A, W> c;
    copy_all_but_activations(c);
    c.x = x, c.y = y;
    c.first_sample = first_sample * Rows;
    return c;
  }

  /// The same views for a layer whose parameters and state are found
  /// through Layout2 and State2 (the engine's per-layer offsets).
  template <class Layout2, class State2>
  layer_context<T, B, Layout2, State2, A, W> with_layouts() const {
    layer_context<T, B, Layout2, State2, A, W> c;
    copy_all_but_activations(c);
    c.x = x, c.y = y;
    return c;
  }

  /// The same views with activations of type A2 (x and y left null): the
  /// f32 context of a layer that the program runs on widened copies.
  template <class A2>
  layer_context<T, B, Layout, StateLayout, A2, W> with_activation() const {
    layer_context<T, B, Layout, StateLayout, A2, W> c;
    copy_all_but_activations(c);
    return c;
  }

 private:
  template <class C>
  void copy_all_but_activations(C& c) const {
    c.dy = dy, c.dx = dx, c.w = w, c.dw = dw, c.wg = wg, c.gemm = gemm, c.scratch = scratch, c.saved = saved;
    c.st = st, c.wide = wide, c.overwrite_gradients = overwrite_gradients, c.training = training;
    c.keeps_state = keeps_state, c.seed = seed, c.step = step, c.first_sample = first_sample;
  }
};

}  // namespace kiln::detail
