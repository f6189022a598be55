// kiln/program.hpp — a model compiled for a batch: the buffers a step
// touches, allocated once, and forward, backward and evaluate over them.
//
//   store()        its parameter_store: parameters (one flat, aligned buffer,
//                  a compile-time offset per tag), state, seed, step count;
//                  its own, or shared with other programs of the model
//   gradients()    the parameters' layout
//   input()        the step's samples, written by the caller: N × B samples
//                  of Model::input_shape::size scalars (replica r: the r-th B)
//   forward()      input → output(), activations kept for backward
//   backward(t)    the loss of the last forward against targets t, and the
//                  gradient of the mean loss, reduced over replicas (in a
//                  fixed order: no dependence on thread timing) and ranks
//   evaluate(t)    the loss of the last forward, without gradients
//
// kiln::compile (kiln/compile.hpp) makes one; kiln::train_step
// (kiln/step.hpp) takes a training step with it. Under replicate<N> each
// replica (detail::replica_engine: its own workspace) runs on a pinned
// thread of the program's, all reading the ONE parameter buffer, so ties
// cannot break. Drive a program from one thread at a time; nothing here
// allocates after construction. An exception in a replica is rethrown in
// the caller after every replica has finished (the lowest replica's).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include <kiln/bf16.hpp>
#include <kiln/detail/aligned_buffer.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/initialize.hpp>
#include <kiln/detail/rank_reduction.hpp>
#include <kiln/detail/replica_engine.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/detail/worker_pool.hpp>
#include <kiln/distributed.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/model.hpp>
#include <kiln/parameter_store.hpp>
#include <kiln/replicate.hpp>

namespace kiln {

namespace detail {
struct stepper;  // kiln/step.hpp: the training step
}  // namespace detail

template <class Model, std::size_t B, class T, class LossSpec, class Replication, bool Bf16Gemm>
class program {
  using engine = detail::replica_engine<Model, B, T, Bf16Gemm>;

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
  /// What the program trains: parameters, state, seed and step count.
  using store_type = parameter_store<Model, T>;
  /// How activations are stored: bf16 under precision<bf16>, else T.
  using activation_type = typename engine::activation_type;
  /// How the GEMMs read the weights: a bf16 copy made once per step under
  /// precision<bf16> where the CPU has AVX512-BF16; elsewhere T (the
  /// product rounds the f32 weights to bf16 as it packs them).
  using gemm_weight_type = typename engine::gemm_weight_type;
  using plan = typename engine::plan;

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

  /// Builds the program over a new store, its parameters drawn from `seed`.
  explicit program(std::uint64_t seed = 0) : program(std::make_shared<store_type>(seed)) {}
  /// Builds the program over `store` (shared, not copied: a batch-1
  /// program reads the weights a training program writes).
  explicit program(std::shared_ptr<store_type> store) : store_(std::move(store)) {
    if (!store_) throw std::invalid_argument("kiln::program: the parameter store is null");
    allocate();
  }

  /// A copy has a store of its own, with the other's values.
  program(const program& other) : program(std::make_shared<store_type>(*other.store_)) { copy_from(other); }
  /// Copies the other's values into this program's store (shared or not).
  program& operator=(const program& other) {
    if (this == &other) return *this;
    if (!store_) {  // moved from: build afresh
      program fresh(other);
      return *this = std::move(fresh);
    }
    *store_ = *other.store_;
    copy_from(other);
    return *this;
  }
  program(program&&) noexcept = default;
  program& operator=(program&&) noexcept = default;

  /// Copies the parameters and state of another program of the same model
  /// (any batch, precision or replication). Ties stay tied: both layouts are
  /// the model's, one slot per tag. (To share them instead, build this
  /// program over the other's store().)
  template <class OtherProgram>
  void assign_parameters(const OtherProgram& other) {
    static_assert(std::is_same_v<typename OtherProgram::model_type, Model>,
                  "kiln::program::assign_parameters: the other program must compile the same model");
    std::transform(other.parameters().begin(), other.parameters().end(), parameters().begin(),
                   [](auto v) { return static_cast<T>(v); });
    std::transform(other.state().begin(), other.state().end(), state().begin(),
                   [](auto v) { return static_cast<T>(v); });
  }

  /// The parameters, state, seed and step count this program works over.
  /// Pass it to compile<Model, batch<B>, ...>(store) for another program
  /// over the same values (kiln/parameter_store.hpp).
  const std::shared_ptr<store_type>& store() const noexcept { return store_; }

  /// Sets every parameter from `seed` (parameter_store::initialize: the step
  /// count starts again at 0). The same seed gives the same bits.
  void initialize(std::uint64_t seed) { store_->initialize(seed); }

  /// Train mode (the default): dropout drops and batch_norm normalises with
  /// the batch's statistics, updating its running ones. Eval mode: dropout
  /// passes its input through and batch_norm uses the running statistics.
  /// forward() runs in the current mode; train_step always trains.
  void set_training(bool on) noexcept { training_ = on; }
  bool training() const noexcept { return training_; }
  /// The store's step count: training steps applied (train_step advances
  /// it; a checkpoint restores it). With the seed given to initialize() it
  /// draws dropout's masks, so a resumed run draws the masks it would have.
  void set_step(std::uint64_t step) noexcept { store_->set_step(step); }
  std::uint64_t step() const noexcept { return store_->step(); }
  std::uint64_t seed() const noexcept { return store_->seed(); }

  /// Values the layers keep but do not train (batch_norm's running
  /// statistics), in Model::state_layout; one buffer, shared by the replicas
  /// (replica 0 of each process updates it).
  std::span<T> state() noexcept { return store_->state(); }
  std::span<const T> state() const noexcept { return std::as_const(*store_).state(); }

  /// The flat parameter buffer (parameters at their offsets, zero padding):
  /// one buffer, read by every replica.
  std::span<T> parameters() noexcept { return store_->parameters(); }
  std::span<const T> parameters() const noexcept { return std::as_const(*store_).parameters(); }
  /// Gradients of the last backward(), reduced over all replicas (and ranks),
  /// in the parameters' layout.
  std::span<T> gradients() noexcept { return {engines_[0].gradients(), layout::buffer_size}; }
  std::span<const T> gradients() const noexcept { return {engines_[0].gradients(), layout::buffer_size}; }

  /// The parameter named `Tag` (row-major in its shape).
  template <class Tag>
  std::span<T> parameter() noexcept {
    return store_->template parameter<Tag>();
  }
  template <class Tag>
  std::span<T> gradient() noexcept {
    return {engines_[0].gradients() + layout::template offset<Tag>,
            detail::parameter_named<Model, Tag>::type::shape_type::size};
  }
  /// Parameter `Slot` of the layer at 1-based `Position` (a dense layer's
  /// weight is slot 0, its bias slot 1).
  template <std::size_t Position, std::size_t Slot = 0>
  std::span<T> layer_parameter() noexcept {
    return parameter<typename detail::layer_parameter_of<Model, Position, Slot>::tag>();
  }
  template <std::size_t Position, std::size_t Slot = 0>
  std::span<T> layer_gradient() noexcept {
    return gradient<typename detail::layer_parameter_of<Model, Position, Slot>::tag>();
  }

  /// Where the next step's samples go: global_batch samples of input_size
  /// scalars each; replica r reads samples [r·B, (r+1)·B).
  std::span<T> input() noexcept { return {input_.get(), global_batch * input_size}; }
  std::span<const T> input() const noexcept { return {input_.get(), global_batch * input_size}; }
  /// The last forward's output: global_batch samples of output_size scalars.
  std::span<const T> output() const noexcept {
    if constexpr (replicas == 1 && !Bf16Gemm) {
      return {engines_[0].output(), B * output_size};
    } else {
      return {output_.get(), global_batch * output_size};
    }
  }

  /// Runs every layer on input(), every replica on its slice. Throws only
  /// where a layer checks data (an embedding given a token id out of range).
  void forward() {
    refresh_gemm_weights();
    auto task = [this](std::size_t r) { engines_[r].forward(mode(r)); };
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
    return reduce_gradients(combined(valid), valid);
  }

  /// The global L2 norm of gradients().
  double gradient_norm() const noexcept {
    double sum = 0;
    for (T g : gradients()) sum += static_cast<double>(g) * static_cast<double>(g);
    return std::sqrt(sum);
  }

 private:
  friend struct detail::stepper;

  /// The program's own memory (the store's is allocated already).
  void allocate() {
    kept_state_ = detail::make_aligned<T>(state_layout::buffer_size);
    input_ = detail::make_aligned<T>(global_batch * input_size);
    output_ = detail::make_aligned<T>(replicas > 1 || Bf16Gemm ? global_batch * output_size : 0);
    gemm_weights_ = detail::make_aligned<gemm_weight_type>(copies_weights ? layout::buffer_size : 0);
    engines_ = std::make_unique<engine[]>(replicas);
    results_ = std::make_unique<loss_value[]>(replicas);
    for (std::size_t r = 0; r < replicas; ++r)
      engines_[r].allocate({params(), gemm_weights_.get(), store_->state().data(), input_.get() + r * B * input_size,
                            Bf16Gemm ? output_.get() + r * B * output_size : nullptr},
                           /*keeps_state=*/r == 0);
    if constexpr (Replication::threaded)
      pool_ = std::make_unique<detail::worker_pool>(replicas, std::span<const std::size_t>(Replication::cores),
                                                    distributed::local_rank() * replicas);
  }

  /// Replica r's share [begin, end) of the flat buffer, in whole cache lines.
  static std::pair<std::size_t, std::size_t> chunk_of(std::size_t r) noexcept {
    return detail::share_of(r, replicas, layout::buffer_size);
  }

  /// What a copy carries besides its store's values: gradients and mode.
  void copy_from(const program& other) {
    training_ = other.training_;
    std::copy_n(other.engines_[0].gradients(), layout::buffer_size, engines_[0].gradients());
  }
  T* params() const noexcept { return store_->parameters().data(); }

  template <class F>
  void run(F& task) {
    if constexpr (Replication::threaded) {
      pool_->run(task);
    } else {
      task(std::size_t{0});
    }
  }

  detail::step_mode mode(std::size_t r) const noexcept {
    return {training_, store_->seed(), store_->step(), (static_cast<std::uint64_t>(distributed::rank()) * replicas + r) * B};
  }
  static std::size_t valid_in(std::size_t r, std::size_t valid) noexcept { return detail::samples_of(r, valid, B); }
  loss_value combined(std::size_t valid) const noexcept {
    if constexpr (replicas == 1) {
      return results_[0];
    } else {
      return detail::combine_losses(std::span<const loss_value>(results_.get(), replicas), valid);
    }
  }

  /// Replica r's output as the loss reads it (f32: bf16 outputs are widened
  /// into output_ at the end of each forward).
  const T* logits(std::size_t r) const noexcept {
    if constexpr (Bf16Gemm) {
      return output_.get() + r * B * output_size;
    } else {
      return engines_[r].output();
    }
  }

  /// bf16: replica r's share of the parameters rounded into the GEMMs' copy,
  /// once per step (every replica's GEMMs read the one copy).
  void refresh_gemm_weights() {
    if constexpr (copies_weights) {
      if constexpr (Replication::threaded && replicas > 1) {
        auto convert = [this](std::size_t q) {
          const auto [begin, end] = chunk_of(q);
          detail::narrow(params() + begin, end - begin, gemm_weights_.get() + begin);
        };
        run(convert);
      } else {
        detail::narrow(params(), layout::buffer_size, gemm_weights_.get());
      }
    }
  }

  void gather_outputs() noexcept {
    if constexpr (replicas > 1 && !Bf16Gemm) {
      for (std::size_t r = 0; r < replicas; ++r)
        std::copy_n(engines_[r].output(), B * output_size, output_.get() + r * B * output_size);
    }
  }

  void backward_replica(std::size_t r, std::span<const target_type> targets, std::size_t valid) {
    if (start_backward(r, targets, valid)) engines_[r].backward(mode(r));
  }
  /// Replica r's loss (into results_[r]) over the first `valid` of its
  /// samples, the gradient of its output, and its parameter gradients
  /// cleared: what its backward needs. False when none of its samples
  /// count (its gradient is then zero, and nothing is left to run).
  bool start_backward(std::size_t r, std::span<const target_type> targets, std::size_t valid) {
    engine& e = engines_[r];
    if (valid == 0) {
      std::fill_n(e.gradients(), layout::buffer_size, T(0));
      results_[r] = {};
      return false;
    }
    e.clear_gradients();
    results_[r] = bound_loss::evaluate(logits(r), targets.data() + r * B * targets_per_sample, B, valid,
                                       e.output_gradient());
    return true;
  }

  /// Replica r sums its share of the gradient buffer over all replicas, in
  /// replica order, weighting each by its share of the valid samples.
  void reduce_chunk(std::size_t r, std::size_t valid) noexcept {
    detail::reduce_share<replicas, T>(chunk_of(r), valid, B, [this](std::size_t q) { return engines_[q].gradients(); });
  }
  /// The gradient reduction: over the replicas (in parallel, each its share),
  /// then across ranks. `r`: this process's result over `valid` samples.
  loss_value reduce_gradients(loss_value r, std::size_t valid) {
    if constexpr (replicas > 1) {
      auto reduce = [&](std::size_t q) { reduce_chunk(q, valid); };
      run(reduce);
    }
    return distributed::ranks() > 1 ? detail::average_across_ranks(r, gradients()) : r;
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

  std::shared_ptr<store_type> store_;
  detail::aligned_buffer<T> kept_state_;  ///< the state before a training step, restored if it is skipped
  bool training_ = true;
  detail::aligned_buffer<T> input_;
  detail::aligned_buffer<T> output_;
  /// The GEMMs read a bf16 copy of the weights, made at the start of each step.
  static constexpr bool copies_weights = !std::is_same_v<gemm_weight_type, T>;
  detail::aligned_buffer<gemm_weight_type> gemm_weights_;  ///< the parameters as this step's GEMMs read them, when copied
  std::unique_ptr<engine[]> engines_;
  std::unique_ptr<loss_value[]> results_;
  std::unique_ptr<detail::worker_pool> pool_;
};

}  // namespace kiln
