// kiln/detail/replica_engine.hpp — one replica of a program: its workspace
// (gradients, two gradient slots, scratch, saved values, activations, GEMM
// packing space) and the forward and backward passes of the model's layers
// over it. kiln::program owns one per replica and the buffers they share.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <kiln/bf16.hpp>
#include <kiln/detail/aligned_buffer.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/gradient_zeroing.hpp>
#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/type_list.hpp>

namespace kiln::detail {

/// The buffers a replica reads and writes but does not own (the program
/// does; they never move while it lives).
template <class T, class A>
struct replica_buffers {
  const T* params = nullptr;        ///< the one flat parameter buffer
  const A* gemm_weights = nullptr;  ///< bf16: the step's rounded copy of it
  T* state = nullptr;               ///< running statistics (replica 0 of each process updates them)
  T* input = nullptr;               ///< this replica's B input samples
  T* output = nullptr;              ///< bf16: where this replica's output is widened to
};

/// What changes from step to step.
struct step_mode {
  bool training = true;
  std::uint64_t seed = 0, step = 0;
  std::uint64_t first_sample = 0;  ///< the global index of this replica's first sample
};

template <class Model, std::size_t B, class T, bool Bf16Gemm>
class replica_engine {
 public:
  using activation_type = std::conditional_t<Bf16Gemm, bf16, T>;
  using layout = typename Model::parameters;
  using plan = typename Model::template memory_plan<B, activation_type>;
  using buffers = replica_buffers<T, activation_type>;
  /// A layer's context: activations as the program stores them (bf16 under
  /// precision<bf16>; detail::forward_stored runs a layer that computes in
  /// f32 on widened copies), weights as GEMMs read them.
  using context = layer_context<T, B, parameters_of<Model>, state_of_model<Model>, activation_type, activation_type>;
  static constexpr std::size_t layer_count = Model::layer_count;
  static constexpr std::size_t input_size = Model::input_shape_type::size;
  static constexpr std::size_t output_size = Model::output_shape_type::size;

  /// Allocates the workspace (once, before the first step; the engine
  /// does not move afterwards: layers keep no pointers, but the GEMMs'
  /// packing space is handed out by address). `keeps_state`: this replica
  /// updates the state buffer.
  void allocate(const buffers& shared, bool keeps_state) {
    // (checks, when the program is made, that layers that overwrite their gradients own them)
    static_assert(gradient_zeroing<Model>::zeroed_ranges.second <= layout::tensor_count + 1);
    shared_ = shared;
    keeps_state_ = keeps_state;
    block_ = make_aligned<T>(block_elements);
    activations_ = make_aligned<activation_type>(plan::activation_elements);
    scratch_.use_bf16_operands(Bf16Gemm);
    for_each_type(typename Model::layer_types{}, [&](auto* l) {
      reserve_for<std::remove_pointer_t<decltype(l)>, B, T>(scratch_);
    });
  }

  /// This replica's gradient of the parameters, in their layout.
  T* gradients() const noexcept { return block_.get(); }
  /// The output of the last forward, as stored (bf16 under precision<bf16>).
  activation_type* output() const noexcept { return activation(layer_count); }
  /// Where the loss writes the gradient of the output before backward().
  T* output_gradient() const noexcept { return grad_slot(0); }

  void forward(const step_mode& m) {
    if constexpr (plan::input_in_bf16) narrow(shared_.input, B * input_size, activation(0));
    for_each_index<layer_count>([&](auto i) {
      constexpr std::size_t I = decltype(i)::value;
      using L = typename Model::template layer<I>;
      // (bf16: a layer that takes bf16 accumulates in gradient slot 0, free during forward)
      if constexpr (!L::is_view)
        forward_stored<L>(context_at(I + 1, m), widened_room(), grad_slot(0), f32_input<I>());
    });
    if constexpr (Bf16Gemm) widen(activation(layer_count), B * output_size, shared_.output);
  }

  /// Zeroes what the layers add their gradients into (all of gradients()
  /// but what layers that overwrite their gradients write).
  void clear_gradients() noexcept {
    const auto& [ranges, count] = gradient_zeroing<Model>::zeroed_ranges;
    for (std::size_t i = 0; i < count; ++i)
      std::fill(gradients() + ranges[i].first, gradients() + ranges[i].second, T(0));
  }

  /// The layers' backward passes from output_gradient(), last to first,
  /// after clear_gradients().
  void backward(const step_mode& m) {
    int current = 0;
    for_each_index<layer_count>([&](auto i) {
      constexpr std::size_t I = layer_count - 1 - decltype(i)::value;
      using L = typename Model::template layer<I>;
      if constexpr (!L::is_view) {
        context c = context_at(I + 1, m);
        c.overwrite_gradients = gradient_zeroing<Model>::template overwrites_gradients<L>();
        c.dy = grad_slot(current);
        if constexpr (I > plan::first_computing) {  // some layer before I computes: it needs I's input gradient
          c.dx = grad_slot(1 - current);
          current = 1 - current;
        }
        backward_stored<L>(c, widened_room(), f32_input<I>());
      }
    });
  }

 private:
  /// gradients, two gradient slots, scratch, saved values and (bf16) the
  /// widened room, in one block.
  static constexpr std::size_t block_elements = layout::buffer_size + plan::gradient_elements +
                                                plan::scratch_elements + plan::saved_elements +
                                                plan::widened_elements;

  /// Activation slot of layer k (0 = the input).
  activation_type* activation(std::size_t k) const noexcept {
    if constexpr (!Bf16Gemm) {
      if (plan::slot[k] == plan::slot[0]) return shared_.input;
    }
    return activations_.get() + plan::activation_offset[k];
  }
  T* grad_slot(int i) const noexcept {
    return block_.get() + layout::buffer_size + static_cast<std::size_t>(i) * plan::gradient_slot_elements;
  }
  /// bf16: the f32 room in which a layer that computes in f32 runs.
  T* widened_room() const noexcept { return grad_slot(2) + plan::scratch_elements + plan::saved_elements; }

  /// bf16: the f32 input itself, for a first layer that computes in f32
  /// (it reads the input unrounded); null otherwise.
  template <std::size_t I>
  const T* f32_input() const noexcept {
    if constexpr (Bf16Gemm && !plan::input_in_bf16) {
      if (plan::slot[I] == plan::slot[0]) return shared_.input;
    }
    return nullptr;
  }

  context context_at(std::size_t k, const step_mode& m) const noexcept {
    context c;
    if constexpr (Bf16Gemm) c.wg = shared_.gemm_weights;
    c.x = activation(k - 1);
    c.y = activation(k);
    c.w = shared_.params;
    c.dw = gradients();
    c.gemm = &scratch_;
    c.scratch = grad_slot(2);  // after the two gradient slots
    c.saved = grad_slot(2) + plan::scratch_elements + plan::saved_offset[k - 1];
    c.st = shared_.state;
    c.training = m.training;
    c.keeps_state = keeps_state_;
    c.seed = m.seed;
    c.step = m.step;
    c.first_sample = m.first_sample;
    return c;
  }

  buffers shared_{};
  bool keeps_state_ = false;
  aligned_buffer<T> block_;
  aligned_buffer<activation_type> activations_;
  mutable gemm_scratch<T> scratch_;
};

}  // namespace kiln::detail
