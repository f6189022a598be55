// kiln/detail/replica_engine.hpp — one replica of a program: its memory
// (gradients, the output's gradient, the sequence's workspace and saved
// region, GEMM packing space) and the model's layers run over it by the one
// engine (detail/sequence.hpp), each layer's passes compiled for its own
// parameter offsets. kiln::program owns one per replica and the buffers
// they share.
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
#include <kiln/detail/binding.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/gradient_zeroing.hpp>
#include <kiln/detail/layer_access.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/sequence.hpp>
#include <kiln/detail/type_list.hpp>

namespace kiln::detail {

/// The buffers a replica reads and writes but does not own (the program
/// does; they never move while it lives).
template <class T, class A, class W>
struct replica_buffers {
  const T* params = nullptr;        ///< the one flat parameter buffer
  const W* gemm_weights = nullptr;  ///< bf16 GEMM weights: the step's rounded copy of it
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
  /// How the GEMMs read the weights: under precision<bf16>, a bf16 copy
  /// made once per step where the CPU multiplies bf16 (AVX512-BF16);
  /// elsewhere the f32 parameters themselves, which the product rounds to
  /// bf16 as it packs them, or into a copy for a product that skips
  /// packing (same bits; for the products that pack, a copy per step would
  /// only add a pass, but a narrow one rounds its weight on every call:
  /// docs/precision.md).
  using gemm_weight_type = std::conditional_t<Bf16Gemm && gemm_scratch<T>::native_bf16, bf16, T>;
  using layout = typename Model::parameters;
  using plan = typename Model::template memory_plan<B, activation_type>;
  using sequence = typename plan::sequence;
  using buffers = replica_buffers<T, activation_type, gemm_weight_type>;
  /// What the engine hands a layer's pass: the views of the step, with no
  /// parameter offsets of its own (so its type does not name the model).
  using frame = layer_context<T, B, parameter_layout<>, parameter_layout<>, activation_type, gemm_weight_type>;
  using run = sequence_engine<sequence, frame>;
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
    scratch_.use_bf16_operands(Bf16Gemm);
    [this]<class... L>(type_list<L...>) {
      [[maybe_unused]] const int order[] = {0, (reserve_for<L, B, T>(scratch_), 0)...};
    }(typename Model::layer_types{});
  }

  /// This replica's gradient of the parameters, in their layout.
  T* gradients() const noexcept { return block_.get(); }
  /// The output of the last forward, as stored (bf16 under precision<bf16>).
  const activation_type* output() const noexcept { return run::output(base({})); }
  /// Where the loss writes the gradient of the output before backward().
  T* output_gradient() const noexcept { return block_.get() + layout::buffer_size; }

  void forward(const step_mode& m) {
    if constexpr (plan::input_in_bf16) narrow(shared_.input, B * input_size, rounded_input());
    run::forward(base(m), passes::forward, exact_input());
    if constexpr (Bf16Gemm) widen(output(), B * output_size, shared_.output);
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
    frame c = base(m);
    c.dy = output_gradient();
    run::backward(c, passes::backward, exact_input(), gradient_zeroing<Model>::overwrites.data());
  }

  /// backward(m), calling update(begin, end) for each part [begin, end) of
  /// the flat buffer as soon as its gradient is complete (released_by), while
  /// it is still in cache. The parts cover the buffer once, last layer's
  /// first.
  template <class Update>
  void backward_updating(const step_mode& m, Update&& update) {
    frame c = base(m);
    c.dy = output_gradient();
    run::backward(c, passes::backward, exact_input(), gradient_zeroing<Model>::overwrites.data(), [&](std::size_t k) {
      const auto [begin, end] = released_by::part[k];
      if (begin != end) update(begin, end);
    });
  }

 private:
  /// One block: gradients | the output's gradient | the sequence's
  /// workspace | its saved region (activations, layers' saved values) |
  /// under bf16, the input rounded (when the first layer takes it so).
  static constexpr std::size_t output_gradient_elements = round_up(B * output_size, parameter_alignment);
  static constexpr std::size_t workspace_at = layout::buffer_size + output_gradient_elements;
  static constexpr std::size_t saved_at = workspace_at + sequence::workspace_elements;
  static constexpr std::size_t rounded_input_at = saved_at + sequence::saved_elements;
  static constexpr std::size_t block_elements =
      rounded_input_at + (plan::input_in_bf16 ? activation_units<activation_type>(B * input_size) : 0);

  /// bf16: the input rounded, as the first layer reads it.
  activation_type* rounded_input() const noexcept {
    return reinterpret_cast<activation_type*>(block_.get() + rounded_input_at);
  }
  /// The sequence's input as stored: the program's (f32), or its rounded copy.
  const activation_type* input() const noexcept {
    if constexpr (!Bf16Gemm) {
      return shared_.input;
    } else if constexpr (plan::input_in_bf16) {
      return rounded_input();
    } else {
      return nullptr;  // (the first layer reads exact_input())
    }
  }
  /// bf16: the f32 input itself, for a first layer that computes in f32
  /// (it reads the input unrounded); null otherwise.
  const T* exact_input() const noexcept {
    if constexpr (Bf16Gemm && !plan::input_in_bf16) {
      return shared_.input;
    } else {
      return nullptr;
    }
  }

  /// Where each top-level layer's parameters and state values are: the
  /// offset of every use (a tied weight once per use, in layer order) and
  /// where each layer's uses begin. Found by index, not by tag: a lookup by
  /// tag in the model's layout would instantiate, per tag, an entity named
  /// after the whole layout (quadratic work for the compiler).
  struct offsets {
    struct params {
      static constexpr auto offsets = [] {
        using uses = typename Model::unique;
        std::array<std::size_t, uses::total> o{};
        for (std::size_t u = 0; u < uses::total; ++u) o[u] = layout::offsets[uses::slot[u]];
        return o;
      }();
      static constexpr auto begin = []<class... L>(type_list<L...>) {
        return group_begins<sizeof...(L)>({L::parameters::size...});
      }(typename Model::layer_types{});
    };
    struct state {  // (state values are never shared: one per use)
      static constexpr auto& offsets = Model::state_layout::offsets;
      static constexpr auto begin = []<class... L>(type_list<L...>) {
        return group_begins<sizeof...(L)>({state_of_t<L>::size...});
      }(typename Model::layer_types{});
    };
  };


 public:
  /// part[k]: the part [begin, end) of the flat buffer whose gradient is
  /// complete once layer k's backward has run: the parameters that layer k
  /// is the first to use (the later uses of a tied weight run backward
  /// before it), with the padding after them. Parameters take their places
  /// in the order of their first use, so each part is one range, and
  /// together they cover the buffer once.
  struct released_by {
    static constexpr auto part = [] {
      using uses = typename Model::unique;
      constexpr auto& begin = offsets::params::begin;
      std::array<std::pair<std::size_t, std::size_t>, layer_count> p{};
      std::size_t introduced = 0;
      for (std::size_t k = 0; k < layer_count; ++k) {
        const std::size_t first = introduced;
        for (std::size_t u = begin[k]; u < begin[k + 1]; ++u)
          if (uses::slot[u] == introduced) ++introduced;
        p[k] = {layout::offsets[first], layout::offsets[introduced]};
      }
      return p;
    }();
    static_assert(layer_count == 0 || (part[0].first == 0 && part[layer_count - 1].second == layout::buffer_size));
  };

 private:
  /// Each layer's forward and backward, as functions of a frame: one table
  /// made by one pack expansion. Each pass is compiled for the layer's own
  /// context (detail::layer_pass), whose name does not grow with the model.
  struct passes {
    using forward_fn = void (*)(const frame&, T*, T*, const T*);
    using backward_fn = void (*)(const frame&, T*, const T*);
    template <class L, std::size_t K>
    using pass =
        layer_pass<L,
                   typename local_by_index<typename L::parameters, offsets::params::begin[K], typename offsets::params>::type,
                   typename local_by_index<state_of_t<L>, offsets::state::begin[K], typename offsets::state>::type>;
    static constexpr std::array<forward_fn, layer_count> forward =
        []<class... L, std::size_t... K>(type_list<L...>, std::index_sequence<K...>) {
          return std::array<forward_fn, layer_count>{&pass<L, K>::template forward<frame>...};
        }(typename Model::layer_types{}, std::make_index_sequence<layer_count>{});
    static constexpr std::array<backward_fn, layer_count> backward =
        []<class... L, std::size_t... K>(type_list<L...>, std::index_sequence<K...>) {
          return std::array<backward_fn, layer_count>{&pass<L, K>::template backward<frame>...};
        }(typename Model::layer_types{}, std::make_index_sequence<layer_count>{});
  };

  /// The sequence's context: its input, its regions, the step's views.
  frame base(const step_mode& m) const noexcept {
    frame c;
    if constexpr (!std::is_same_v<gemm_weight_type, T>) c.wg = shared_.gemm_weights;
    c.x = input();
    c.w = shared_.params;
    c.dw = gradients();
    c.gemm = &scratch_;
    c.scratch = block_.get() + workspace_at;
    c.saved = block_.get() + saved_at;
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
  mutable gemm_scratch<T> scratch_;
};

}  // namespace kiln::detail
