// kiln/compile.hpp — turn a model into a program: batch, precision, loss.
//
// WHAT IT IS
//   `compile<Model, batch<B>, Options...>(seed)` instantiates the training
//   graph of Model for steps of exactly B samples and returns a `program`
//   that owns everything a step touches, allocated once:
//
//     parameters()   one flat, aligned buffer (compile-time offset per tag)
//     gradients()    the same layout
//     input()        B samples, written by the caller (B × input size)
//     forward()      input → output(), activations kept for backward
//     backward(t)    loss of the last forward against targets t, and the
//                    gradients of the mean loss (replacing what the
//                    buffer held)
//     evaluate(t)    the loss of the last forward, without gradients
//
//   Options: `precision<T>` (float, the default, double, or bf16: f32
//   master weights, bf16 activations and GEMM operands), a loss
//   (`softmax_cross_entropy<>` by default, or `mse`), and `replicate<N>`:
//   N replicas, one pinned thread each, every one with its own workspace and
//   gradients, all reading the ONE parameter buffer (so ties cannot break);
//   a step takes N × B samples, replica r the r-th slice, and backward
//   reduces the N gradients in a fixed order (the result does not depend on
//   thread timing) and, under MPI, across ranks with one MPI_Allreduce.
//
// SHAPE CONTRACT
//   input(): N × B × Model::input_shape::size scalars, sample after sample.
//   output(): N × B × Model::output_shape::size scalars, sample after sample.
//
// THREAD SAFETY
//   Drive a program from one thread at a time; with replicate<N> it runs its
//   replicas on its own threads. forward/backward/evaluate never allocate.
//   An exception in any replica is rethrown in the calling thread after all
//   replicas have finished the step (the lowest replica's, if several).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <kiln/bf16.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/detail/worker_pool.hpp>
#include <kiln/distributed.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/model.hpp>
#include <kiln/options.hpp>
#include <kiln/random.hpp>
#include <kiln/replicate.hpp>

namespace kiln {

namespace detail {
/// A buffer of T aligned to 64 bytes.
template <class T>
struct aligned_delete {
  void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};
template <class T>
using aligned_buffer = std::unique_ptr<T[], aligned_delete<T>>;
template <class T>
aligned_buffer<T> make_aligned(std::size_t n) {
  auto* p = static_cast<T*>(::operator new[](std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{64}));
  std::fill(p, p + n, T{});
  return aligned_buffer<T>(p);
}
}  // namespace detail

template <class Model, std::size_t B, class T, class LossSpec, class Replication, bool Bf16Gemm>
class program {
 public:
  using model_type = Model;
  using scalar_type = T;
  using loss_type = LossSpec;
  using replication = Replication;
  /// True under precision<bf16>: activations and GEMM operands in bf16.
  static constexpr bool bf16_gemm = Bf16Gemm;
  using bound_loss = typename LossSpec::template bind<typename Model::output_shape_type>;
  using target_type = typename bound_loss::target_type;
  using layout = typename Model::parameters;
  using state_layout = typename Model::state_layout;
  /// How activations are stored: bf16 under precision<bf16>, else T.
  using activation_type = std::conditional_t<Bf16Gemm, bf16, T>;
  using plan = typename Model::template memory_plan<B, activation_type>;

  /// Samples per replica and step.
  static constexpr std::size_t batch_size = B;
  /// Replicas (replicate<N>; 1 without it).
  static constexpr std::size_t replicas = Replication::replicas;
  /// Samples per step in this process: replicas × batch_size.
  static constexpr std::size_t global_batch = replicas * B;
  static constexpr std::size_t input_size = Model::input_shape_type::size;
  static constexpr std::size_t output_size = Model::output_shape_type::size;
  static constexpr std::size_t targets_per_sample = bound_loss::targets_per_sample;
  static constexpr std::size_t layer_count = Model::layer_count;

  /// Builds the program and initialises its parameters from `seed`.
  explicit program(std::uint64_t seed = 0) : program(nullptr) { initialize(seed); }

  program(const program& other) : program(nullptr) { copy_from(other); }
  program& operator=(const program& other) {
    if (this == &other) return *this;
    if (!params_) {  // moved from: build afresh
      program fresh(other);
      return *this = std::move(fresh);
    }
    copy_from(other);
    return *this;
  }
  program(program&&) noexcept = default;
  program& operator=(program&&) noexcept = default;
  ~program() = default;

  /// Copies the parameters of another program of the same model (any batch,
  /// precision or replication). Ties stay tied: both layouts are the
  /// model's, one slot per tag.
  template <class OtherProgram>
  void assign_parameters(const OtherProgram& other) {
    static_assert(std::is_same_v<typename OtherProgram::model_type, Model>,
                  "kiln::program::assign_parameters: the other program must compile the same model");
    std::transform(other.parameters().begin(), other.parameters().end(), parameters().begin(),
                   [](auto v) { return static_cast<T>(v); });
    std::transform(other.state().begin(), other.state().end(), state().begin(),
                   [](auto v) { return static_cast<T>(v); });
  }

  /// Sets every parameter from `seed`: He-normal before relu, Glorot-uniform
  /// otherwise, biases zero. The same seed gives the same bits.
  void initialize(std::uint64_t seed) {
    rng g(seed, /*stream=*/0x1417);
    seed_ = seed;
    std::fill_n(params_.get(), layout::buffer_size, T(0));
    initialize_each(g);
    std::fill_n(state_.get(), state_layout::buffer_size, T(0));
    detail::for_each_type(typename Model::state_types{}, [&](auto* p) {
      using P = std::remove_pointer_t<decltype(p)>;
      std::fill_n(state_.get() + state_layout::template offset<typename P::tag>, P::shape_type::size,
                  static_cast<init>(P::initializer) == init::ones ? T(1) : T(0));
    });
  }

  /// Train mode (the default): dropout drops and batch_norm normalises with
  /// the batch's statistics, updating its running ones. Eval mode: dropout
  /// passes its input through and batch_norm uses the running statistics.
  /// forward() runs in the current mode; train_step always trains.
  void set_training(bool on) noexcept { training_ = on; }
  bool training() const noexcept { return training_; }
  /// The step number that, with the seed given to initialize(), draws
  /// dropout's masks; train_step advances it. (kiln::trainer sets it from its
  /// own step count, so a resumed run draws the masks it would have drawn.)
  void set_step(std::uint64_t step) noexcept { step_ = step; }
  std::uint64_t step() const noexcept { return step_; }
  std::uint64_t seed() const noexcept { return seed_; }

  /// Values the layers keep but do not train (batch_norm's running
  /// statistics), in Model::state_layout; one buffer, shared by the replicas
  /// (replica 0 of each process updates it).
  std::span<T> state() noexcept { return {state_.get(), state_layout::buffer_size}; }
  std::span<const T> state() const noexcept { return {state_.get(), state_layout::buffer_size}; }

  /// The flat parameter buffer (parameters at their offsets, zero padding):
  /// one buffer, read by every replica.
  std::span<T> parameters() noexcept { return {params_.get(), layout::buffer_size}; }
  std::span<const T> parameters() const noexcept { return {params_.get(), layout::buffer_size}; }
  /// Gradients of the last backward(), reduced over all replicas (and ranks),
  /// in the parameters' layout.
  std::span<T> gradients() noexcept { return {gradient_of(0), layout::buffer_size}; }
  std::span<const T> gradients() const noexcept { return {gradient_of(0), layout::buffer_size}; }

  /// The parameter named `Tag` (row-major in its shape).
  template <class Tag>
  std::span<T> parameter() noexcept {
    return {params_.get() + layout::template offset<Tag>, layout_entry<Tag>::type::shape_type::size};
  }
  template <class Tag>
  std::span<T> gradient() noexcept {
    return {gradient_of(0) + layout::template offset<Tag>, layout_entry<Tag>::type::shape_type::size};
  }
  /// Parameter `Slot` of the layer at 1-based `Position` (a dense layer's
  /// weight is slot 0, its bias slot 1).
  template <std::size_t Position, std::size_t Slot = 0>
  std::span<T> layer_parameter() noexcept {
    return parameter<typename layer_param<Position, Slot>::tag>();
  }
  template <std::size_t Position, std::size_t Slot = 0>
  std::span<T> layer_gradient() noexcept {
    return gradient<typename layer_param<Position, Slot>::tag>();
  }

  /// Where the next step's samples go: global_batch samples of input_size
  /// scalars each; replica r reads samples [r·B, (r+1)·B).
  std::span<T> input() noexcept { return {input_.get(), global_batch * input_size}; }
  std::span<const T> input() const noexcept { return {input_.get(), global_batch * input_size}; }
  /// The last forward's output: global_batch samples of output_size scalars.
  std::span<const T> output() const noexcept {
    if constexpr (replicas == 1 && !Bf16Gemm) {
      return {activation(0, layer_count), B * output_size};
    } else {
      return {output_.get(), global_batch * output_size};
    }
  }

  /// Runs every layer on input(), every replica on its slice. Throws only
  /// where a layer checks data (an embedding given a token id out of range).
  void forward() {
    refresh_gemm_weights();
    auto task = [this](std::size_t r) { forward_replica(r); };
    run(task);
    gather_outputs();
  }

  /// The loss of the last forward() against `targets` (targets_per_sample
  /// per sample); only the first `valid` samples count (padding after).
  loss_value evaluate(std::span<const target_type> targets, std::size_t valid = global_batch) {
    check_targets(targets, valid);
    auto task = [&](std::size_t r) {
      const std::size_t v = valid_in(r, valid);
      results_[r] = v ? bound_loss::evaluate(logits(r), targets.data() + r * B * targets_per_sample, B, v,
                                             static_cast<T*>(nullptr))
                      : loss_value{};
    };
    if (valid <= B) {
      task(0);  // one replica's worth: no need to wake the others
      for (std::size_t r = 1; r < replicas; ++r) results_[r] = {};
    } else {
      run(task);
    }
    return combined(valid);
  }

  /// Loss of the last forward() and the gradient of its mean over the first
  /// `valid` samples with respect to every parameter (into gradients()):
  /// each replica's backward, then one reduction in a fixed order (so the
  /// result does not depend on thread timing), then, across MPI ranks, one
  /// allreduce.
  loss_value backward(std::span<const target_type> targets, std::size_t valid = global_batch) {
    check_targets(targets, valid);
    auto task = [&](std::size_t r) { backward_replica(r, targets, valid_in(r, valid)); };
    run(task);
    if constexpr (replicas > 1) {
      auto reduce = [&](std::size_t r) { reduce_chunk(r, valid); };
      run(reduce);
    }
    const loss_value r = combined(valid);
    return distributed::ranks() > 1 ? across_ranks(r) : r;
  }

  /// One training step on input() against `targets` (a full step): forward,
  /// backward, the reduction, optional clipping of the gradient to a global
  /// norm of at most `max_grad_norm` (0: no clipping), and `state`'s update
  /// with `optimizer`, the replicas each doing their share of every part. If
  /// the loss is not finite the update is skipped: the parameters stay as
  /// they were.
  template <class O, class State>
  loss_value train_step(std::span<const target_type> targets, const O& optimizer, State& state,
                        double max_grad_norm = 0) {
    check_targets(targets, global_batch);
    const bool was_training = std::exchange(training_, true);
    struct restore {
      program& p;
      bool mode;
      ~restore() {
        p.training_ = mode;
        ++p.step_;
      }
    } after{*this, was_training};
    if constexpr (!Replication::threaded) {
      forward();
      const loss_value r = backward(targets);
      if (std::isfinite(r.loss)) {
        clip(max_grad_norm);
        state.step(optimizer, parameters(), gradients());
      }
      return r;
    } else {
      refresh_gemm_weights();
      auto pass = [&](std::size_t r) {
        forward_replica(r);
        backward_replica(r, targets, B);
      };
      run(pass);
      const loss_value r = combined(global_batch);
      if (!std::isfinite(r.loss) && distributed::ranks() == 1) {
        gather_outputs();
        return r;
      }
      if (distributed::ranks() > 1 || max_grad_norm > 0) {
        if constexpr (replicas > 1) {
          auto reduce = [&](std::size_t q) { reduce_chunk(q, global_batch); };
          run(reduce);
        }
        const loss_value all = distributed::ranks() > 1 ? across_ranks(r) : r;
        gather_outputs();
        if (!std::isfinite(all.loss)) return all;
        const T scale = clip_scale(max_grad_norm);
        state.prepare(optimizer);
        auto update = [&](std::size_t q) {
          const auto [begin, end] = chunk_of(q);
          if (scale != T(1))
            for (std::size_t i = begin; i < end; ++i) gradient_of(0)[i] *= scale;
          state.update(optimizer, parameters().subspan(begin, end - begin),
                       std::span<const T>(gradient_of(0) + begin, end - begin), begin);
        };
        run(update);
        gather_outputs();
        return all;
      }
      state.prepare(optimizer);
      auto reduce_and_update = [&](std::size_t q) {
        const auto [begin, end] = chunk_of(q);
        if constexpr (replicas > 1) reduce_chunk(q, global_batch);
        state.update(optimizer, parameters().subspan(begin, end - begin),
                     std::span<const T>(gradient_of(0) + begin, end - begin), begin);
      };
      run(reduce_and_update);
      gather_outputs();
      return r;
    }
  }

  /// The global L2 norm of gradients().
  double gradient_norm() const noexcept {
    double sum = 0;
    for (T g : gradients()) sum += static_cast<double>(g) * static_cast<double>(g);
    return std::sqrt(sum);
  }

 private:
  /// One replica's workspace: gradients, two gradient slots, scratch,
  /// saved values and (bf16) the widened room in one block; activations
  /// (slot 0, the input, lives in the shared input buffer unless a bf16
  /// program rounds it for a first layer that takes bf16); packing space.
  struct replica {
    detail::aligned_buffer<T> block;
    detail::aligned_buffer<activation_type> activations;
    detail::gemm_scratch<T> scratch;
  };
  static constexpr std::size_t replica_elements = layout::buffer_size + plan::gradient_elements +
                                                  plan::scratch_elements + plan::saved_elements +
                                                  plan::widened_elements;

  explicit program(std::nullptr_t)
      : params_(detail::make_aligned<T>(layout::buffer_size)),
        state_(detail::make_aligned<T>(state_layout::buffer_size)),
        input_(detail::make_aligned<T>(global_batch * input_size)),
        output_(detail::make_aligned<T>(replicas > 1 || Bf16Gemm ? global_batch * output_size : 0)),
        gemm_weights_(detail::make_aligned<activation_type>(Bf16Gemm ? layout::buffer_size : 0)),
        replicas_(std::make_unique<replica[]>(replicas)),
        results_(std::make_unique<loss_value[]>(replicas)) {
    for (std::size_t r = 0; r < replicas; ++r) {
      replicas_[r].block = detail::make_aligned<T>(replica_elements);
      replicas_[r].activations = detail::make_aligned<activation_type>(plan::activation_elements);
      replicas_[r].scratch.use_bf16_operands(Bf16Gemm);
      detail::for_each_type(typename Model::layer_types{}, [&](auto* l) {
        using L = std::remove_pointer_t<decltype(l)>;
        detail::reserve_for<L, B, T>(replicas_[r].scratch);
      });
    }
    if constexpr (Replication::threaded)
      pool_ = std::make_unique<detail::worker_pool>(replicas, std::span<const std::size_t>(Replication::cores),
                                                    distributed::local_rank() * replicas);
  }

  /// Every rank takes the same step: the gradient of the mean loss over all
  /// ranks' samples, and that loss (so a NaN anywhere stops every rank alike).
  loss_value across_ranks(loss_value r) {
    const double mine = static_cast<double>(r.samples);
    double totals[4] = {r.loss * mine, mine, static_cast<double>(r.correct), static_cast<double>(r.predictions)};
    distributed::allreduce_sum(std::span<double>(totals));
    const double ranks = static_cast<double>(distributed::ranks());
    if (totals[1] == mine * ranks) {
      // Equal shares (every training step): sum, then one exact scaling.
      distributed::allreduce_sum(gradients());
      const T scale = T(1) / static_cast<T>(ranks);
      for (T& g : gradients()) g *= scale;
    } else {
      // Unequal shares (a padded last batch): weight each rank by its samples.
      const T weight = totals[1] > 0 ? static_cast<T>(mine / totals[1]) : T(0);
      for (T& g : gradients()) g *= weight;
      distributed::allreduce_sum(gradients());
    }
    r.samples = static_cast<std::size_t>(totals[1]);
    r.loss = r.samples ? totals[0] / totals[1] : 0.0;
    r.correct = static_cast<std::size_t>(totals[2]);
    r.predictions = static_cast<std::size_t>(totals[3]);
    return r;
  }

  /// The factor that brings the gradient's norm down to max_norm (1 when it
  /// is within it, or clipping is off).
  T clip_scale(double max_norm) const noexcept {
    if (!(max_norm > 0)) return T(1);
    const double norm = gradient_norm();
    return norm > max_norm ? static_cast<T>(max_norm / (norm + 1e-6)) : T(1);
  }
  void clip(double max_norm) noexcept {
    const T scale = clip_scale(max_norm);
    if (scale != T(1))
      for (T& g : gradients()) g *= scale;
  }

  /// Replica r's share [begin, end) of the flat buffer, in whole cache lines.
  static std::pair<std::size_t, std::size_t> chunk_of(std::size_t r) noexcept {
    return detail::share_of(r, replicas, layout::buffer_size);
  }

  /// Everything a copy carries: parameters, state, gradients, mode, seed and step.
  void copy_from(const program& other) {
    std::copy_n(other.params_.get(), layout::buffer_size, params_.get());
    std::copy_n(other.state_.get(), state_layout::buffer_size, state_.get());
    training_ = other.training_;
    seed_ = other.seed_;
    step_ = other.step_;
    std::copy_n(other.gradient_of(0), layout::buffer_size, gradient_of(0));
  }

  template <class F>
  void run(F& task) {
    if constexpr (Replication::threaded) {
      pool_->run(task);
    } else {
      task(std::size_t{0});
    }
  }

  static std::size_t valid_in(std::size_t r, std::size_t valid) noexcept { return detail::samples_of(r, valid, B); }

  loss_value combined(std::size_t valid) const noexcept {
    if constexpr (replicas == 1) {
      return results_[0];
    } else {
      loss_value all{0, valid, 0, 0};
      double weighted = 0;
      for (std::size_t r = 0; r < replicas; ++r) {
        weighted += results_[r].loss * static_cast<double>(results_[r].samples);
        all.correct += results_[r].correct;
        all.predictions += results_[r].predictions;
      }
      all.loss = valid ? weighted / static_cast<double>(valid) : 0.0;
      return all;
    }
  }

  template <class Tag>
  struct layout_entry {
    static_assert(layout::template contains<Tag>, "kiln::program: this tag names no parameter of the model");
    using type = detail::list_at_t<layout::template index_of<Tag>(), typename Model::parameter_types>;
  };
  template <std::size_t Position, std::size_t Slot>
  struct layer_param {
    using all = detail::flatten_nested_t<typename Model::layer_types>;
    static constexpr std::size_t found = []<class... L>(detail::type_list<L...>) {
      constexpr std::array<std::size_t, sizeof...(L)> positions{L::position...};
      std::size_t i = 0;
      while (i < positions.size() && positions[i] != Position) ++i;
      return i;
    }(all{});
    static_assert(found < all::size,
                  "kiln::program::layer_parameter<Position, Slot>: the model has no layer at this position");
    using L = detail::list_at_t<found, all>;
    using type = detail::list_at_t<Slot, typename L::parameters>;
    using tag = typename type::tag;
  };

  T* gradient_of(std::size_t r) const noexcept { return replicas_[r].block.get(); }
  /// Activation slot of layer k (0 = the input) of replica r.
  activation_type* activation(std::size_t r, std::size_t k) const noexcept {
    if constexpr (!Bf16Gemm) {
      if (plan::slot[k] == plan::slot[0]) return input_.get() + r * B * input_size;
    }
    return replicas_[r].activations.get() + plan::activation_offset[k];
  }
  /// Replica r's output as the loss reads it (f32: bf16 outputs are widened
  /// into output_ at the end of each forward).
  const T* logits(std::size_t r) const noexcept {
    if constexpr (Bf16Gemm) {
      return output_.get() + r * B * output_size;
    } else {
      return activation(r, layer_count);
    }
  }
  T* grad_slot(std::size_t r, int i) const noexcept {
    return replicas_[r].block.get() + layout::buffer_size + static_cast<std::size_t>(i) * plan::gradient_slot_elements;
  }
  /// bf16: the f32 room in which a layer that computes in f32 runs.
  T* widened_room(std::size_t r) const noexcept {
    return grad_slot(r, 2) + plan::scratch_elements + plan::saved_elements;
  }

  /// A layer's context: activations as the program stores them (bf16 under
  /// precision<bf16>; detail::forward_stored runs a layer that computes in
  /// f32 on widened copies), weights as GEMMs read them.
  using context = detail::layer_context<T, B, detail::parameters_of<Model>, detail::state_of_model<Model>,
                                        activation_type, activation_type>;

  context make_context(std::size_t r, std::size_t k) const noexcept {
    context c;
    if constexpr (Bf16Gemm) c.wg = gemm_weights_.get();
    c.x = activation(r, k - 1);
    c.y = activation(r, k);
    c.w = params_.get();
    c.dw = gradient_of(r);
    c.gemm = &replicas_[r].scratch;
    c.scratch = grad_slot(r, 2);  // after the two gradient slots
    c.saved = grad_slot(r, 2) + plan::scratch_elements + plan::saved_offset[k - 1];
    c.st = state_.get();
    c.training = training_;
    c.keeps_state = r == 0;
    c.seed = seed_;
    c.step = step_;
    c.first_sample = (static_cast<std::uint64_t>(distributed::rank()) * replicas + r) * B;
    return c;
  }

  /// bf16: the f32 input itself, for a first layer that computes in f32
  /// (it reads the input unrounded); null otherwise.
  template <std::size_t I>
  const T* f32_input(std::size_t r) const noexcept {
    if constexpr (Bf16Gemm && !plan::input_in_bf16) {
      if (plan::slot[I] == plan::slot[0]) return input_.get() + r * B * input_size;
    }
    return nullptr;
  }

  void forward_replica(std::size_t r) {
    if constexpr (plan::input_in_bf16)
      detail::narrow(input_.get() + r * B * input_size, B * input_size, activation(r, 0));
    detail::for_each_index<layer_count>([&](auto i) { forward_layer<decltype(i)::value>(r); });
    if constexpr (Bf16Gemm)
      detail::widen(activation(r, layer_count), B * output_size, output_.get() + r * B * output_size);
  }
  template <std::size_t I>
  void forward_layer(std::size_t r) {
    using L = typename Model::template layer<I>;
    // (bf16: a layer that takes bf16 accumulates in gradient slot 0, free during forward)
    if constexpr (!L::is_view)
      detail::forward_stored<L>(make_context(r, I + 1), widened_room(r), grad_slot(r, 0), f32_input<I>(r));
  }

  /// bf16: replica r's share of the parameters rounded into the GEMMs' copy,
  /// once per step (every replica's GEMMs read the one copy).
  void refresh_gemm_weights() {
    if constexpr (Bf16Gemm) {
      if constexpr (Replication::threaded && replicas > 1) {
        auto convert = [this](std::size_t q) {
          const auto [begin, end] = chunk_of(q);
          detail::narrow(params_.get() + begin, end - begin, gemm_weights_.get() + begin);
        };
        run(convert);
      } else {
        detail::narrow(params_.get(), layout::buffer_size, gemm_weights_.get());
      }
    }
  }

  void gather_outputs() noexcept {
    if constexpr (replicas > 1 && !Bf16Gemm) {
      for (std::size_t r = 0; r < replicas; ++r)
        std::copy_n(activation(r, layer_count), B * output_size, output_.get() + r * B * output_size);
    }
  }

  void backward_replica(std::size_t r, std::span<const target_type> targets, std::size_t valid) {
    if (valid == 0) {
      std::fill_n(gradient_of(r), layout::buffer_size, T(0));
      results_[r] = {};
      return;
    }
    // Zero what layers add into; the gradients of layers that overwrite them are written below.
    const auto& [ranges, count] = zeroed_ranges;
    for (std::size_t i = 0; i < count; ++i)
      std::fill(gradient_of(r) + ranges[i].first, gradient_of(r) + ranges[i].second, T(0));
    results_[r] =
        bound_loss::evaluate(logits(r), targets.data() + r * B * targets_per_sample, B, valid, grad_slot(r, 0));
    int current = 0;
    detail::for_each_index<layer_count>([&](auto i) { backward_layer<layer_count - 1 - decltype(i)::value>(r, current); });
  }

  /// True when some layer before index I computes something (so layer I's
  /// input gradient is needed).
  template <std::size_t I>
  static constexpr bool input_gradient_needed() {
    return I > plan::first_computing;
  }

  /// True when the (top-level) layer L writes its parameters' gradients
  /// instead of adding to them (it declares `overwrites_gradients`). Such a
  /// layer must own its parameters alone: every tag is its own automatic
  /// one, so no other layer adds to the same gradient (checked here).
  template <class L>
  static constexpr bool overwrites_gradients() {
    if constexpr (detail::lists<L, member::overwrites_gradients>) {
      static_assert(diagnostics::a_layer_that_overwrites_gradients_must_own_its_parameters_alone <
                        layer_at<L::position, typename L::spec>,
                    !L::overwrites_gradients || owns_its_parameters<L>() >,
                    "kiln: a layer that declares overwrites_gradients writes its parameters' gradients instead of "
                    "adding to them, so its parameters must be its own alone: no tied<Tag>, no tag another layer "
                    "names (declare it false when the layer is tied)");
      return L::overwrites_gradients;
    } else {
      return false;
    }
  }
  template <class Tag, std::size_t Position>
  struct is_own_tag : std::false_type {};
  template <std::size_t Position, std::size_t Slot>
  struct is_own_tag<detail::auto_tag<Position, Slot>, Position> : std::true_type {};
  template <class L>
  static constexpr bool owns_its_parameters() {
    return []<class... P>(detail::type_list<P...>) {
      constexpr std::array<bool, sizeof...(P) + 1> own{is_own_tag<typename P::tag, L::position>::value..., true};
      return std::find(own.begin(), own.end(), false) == own.end();
    }(typename L::parameters{});
  }
  template <class Owner>
  struct position_of_owner;
  template <std::size_t P, class Spec>
  struct position_of_owner<layer_at<P, Spec>> {
    static constexpr std::size_t value = P;
  };
  /// written[i]: parameter i's gradient is written (not added to) by the
  /// top-level layer that owns it. One table per model: which top-level
  /// layer sits at each position, and whether it overwrites.
  static constexpr auto written_by_their_layer = []<class... L, class... P>(detail::type_list<L...>,
                                                                           detail::type_list<P...>) {
    constexpr std::size_t positions = Model::bound_chain::next_position;
    constexpr std::array<std::size_t, sizeof...(L) + 1> at{L::position..., 0};
    constexpr std::array<bool, sizeof...(L) + 1> overwrites{overwrites_gradients<L>()..., false};
    std::array<bool, positions + 1> by_position{};
    for (std::size_t k = 0; k < sizeof...(L); ++k) by_position[at[k]] = overwrites[k];
    return std::array<bool, sizeof...(P)>{by_position[position_of_owner<typename P::owner>::value]...};
  }(typename Model::layer_types{}, typename Model::parameter_types{});
  /// The ranges of the gradient buffer that backward zeroes before the
  /// layers add into them: all of it (padding included) but the parameters
  /// of top-level layers that overwrite their gradients.
  static constexpr auto zeroed_ranges = [] {
    constexpr auto written = written_by_their_layer;
    std::array<std::pair<std::size_t, std::size_t>, layout::tensor_count + 1> ranges{};
    std::size_t n = 0, at = 0;
    for (std::size_t i = 0; i < layout::tensor_count; ++i) {
      if (!written[i]) continue;
      if (layout::offsets[i] > at) ranges[n++] = {at, layout::offsets[i]};
      at = layout::offsets[i] + layout::sizes[i];
    }
    if (layout::buffer_size > at) ranges[n++] = {at, layout::buffer_size};
    return std::pair{ranges, n};
  }();

  template <std::size_t I>
  void backward_layer(std::size_t r, int& current) {
    using L = typename Model::template layer<I>;
    if constexpr (!L::is_view) {
      context c = make_context(r, I + 1);
      c.overwrite_gradients = overwrites_gradients<L>();
      c.dy = grad_slot(r, current);
      if constexpr (input_gradient_needed<I>()) {
        c.dx = grad_slot(r, 1 - current);
        current = 1 - current;
      }
      detail::backward_stored<L>(c, widened_room(r), f32_input<I>(r));
    }
  }

  /// Replica r sums its share of the gradient buffer over all replicas, in
  /// replica order, weighting each by its share of the valid samples.
  void reduce_chunk(std::size_t r, std::size_t valid) noexcept {
    detail::reduce_share<replicas, T>(chunk_of(r), valid, B, [this](std::size_t q) { return gradient_of(q); });
  }

  void check_targets(std::span<const target_type> targets, std::size_t valid) const {
    if (valid > global_batch) {
      throw std::invalid_argument(fmt::format("kiln::program: {} valid samples in a step of {}", valid, global_batch));
    }
    if (targets.size() < valid * targets_per_sample) {
      throw std::invalid_argument(fmt::format("kiln::program: {} targets given for {} samples ({} per sample)",
                                              targets.size(), valid, targets_per_sample));
    }
  }

  void initialize_each(rng& g) {
    detail::for_each_type(typename Model::parameter_types{},
                          [&](auto* p) { initialize_one<std::remove_pointer_t<decltype(p)>>(g); });
  }
  template <class P>
  void initialize_one(rng& g) {
    T* p = params_.get() + layout::template offset<typename P::tag>;
    constexpr std::size_t n = P::shape_type::size;
    switch (static_cast<init>(P::initializer)) {
      case init::he_normal: {
        const double sd = std::sqrt(2.0 / static_cast<double>(P::fan_in));
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(sd * g.normal());
        break;
      }
      case init::glorot_uniform:
      case init::automatic: {
        const double limit = std::sqrt(6.0 / static_cast<double>(P::fan_in + P::fan_out));
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(g.uniform(-limit, limit));
        break;
      }
      case init::lecun_normal: {
        const double sd = std::sqrt(1.0 / static_cast<double>(P::fan_in));
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(sd * g.normal());
        break;
      }
      case init::zeros:
        std::fill_n(p, n, T(0));
        break;
      case init::ones:
        std::fill_n(p, n, T(1));
        break;
    }
  }

  detail::aligned_buffer<T> params_;
  detail::aligned_buffer<T> state_;
  bool training_ = true;
  std::uint64_t seed_ = 0, step_ = 0;
  detail::aligned_buffer<T> input_;
  detail::aligned_buffer<T> output_;
  detail::aligned_buffer<activation_type> gemm_weights_;  ///< bf16: the parameters as this step's GEMMs read them
  std::unique_ptr<replica[]> replicas_;
  std::unique_ptr<loss_value[]> results_;
  std::unique_ptr<detail::worker_pool> pool_;
};

/// Compiles `Model` for steps of `batch<B>` samples (plus optional
/// `precision<T>` and a loss) and initialises its parameters from `seed`.
template <class M, class... Options>
auto compile(std::uint64_t seed = 0) {
  if constexpr (!Model<M>) {
    // One error, and nothing else instantiated (the options are not looked at).
    static_assert(diagnostics::compile_takes_the_model_first_then_the_options<M, Options...>,
                  "kiln::compile<M, Options...>: M must be a kiln::model<input<...>, layers...>; the model comes "
                  "first, then the options: compile<Model, batch<B>>()");
  } else {
    using opts = detail::compile_options<Options...>;
    return program<M, opts::batch_type::size, typename opts::scalar, typename opts::loss, typename opts::replication,
                   opts::bf16_gemm>(seed);
  }
}

}  // namespace kiln
