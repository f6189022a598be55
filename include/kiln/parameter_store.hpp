// kiln/parameter_store.hpp — what a trained model IS: its parameters, the
// values its layers keep (batch_norm's running statistics), the seed they
// were drawn from and the number of training steps taken, in the model's
// flat layout. Several programs work over one store without copying it.
//
//   auto train = kiln::compile<mlp, batch<64>>(seed);      // makes a store
//   auto one   = kiln::compile<mlp, batch<1>>(train.store());  // shares it
//   ... train ... ; one.forward();   // reads the weights the step just wrote
//
// OWNERSHIP   std::shared_ptr: a program keeps its store alive, so the
//             batch-1 program above stays valid when `train` is gone.
// SHARING     every program over a store reads and writes the same memory:
//             drive them from one thread at a time (a forward of one while
//             another trains is a data race). Copying a program copies its
//             store's values into a new store; moving moves the pointer.
// TYPE        a store holds T (float, double): programs over it have the
//             same model and scalar (precision<bf16> programs keep float
//             parameters, so they share float stores).
// SAVING      kiln::save_checkpoint / load_checkpoint take a store as they
//             take a program (kiln/checkpoint.hpp).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <kiln/detail/aligned_buffer.hpp>
#include <kiln/detail/initialize.hpp>
#include <kiln/detail/type_list.hpp>
#include <kiln/model.hpp>

namespace kiln {

namespace detail {
/// The parameter named Tag in Model (its type: shape and initialiser).
template <class Model, class Tag>
struct parameter_named {
  using layout = typename Model::parameters;
  static_assert(layout::template contains<Tag>, "kiln: this tag names no parameter of the model");
  using type = list_at_t<layout::template index_of<Tag>(), typename Model::parameter_types>;
};
/// Parameter Slot of the layer at 1-based Position (dense: 0 weight, 1 bias).
template <class Model, std::size_t Position, std::size_t Slot>
struct layer_parameter_of {
  using all = flatten_nested_t<typename Model::layer_types>;
  static constexpr std::size_t found = []<class... L>(type_list<L...>) {
    constexpr std::array<std::size_t, sizeof...(L)> positions{L::position...};
    std::size_t i = 0;
    while (i < positions.size() && positions[i] != Position) ++i;
    return i;
  }(all{});
  static_assert(found < all::size, "kiln: layer_parameter<Position, Slot>: the model has no layer at this position");
  using tag = typename list_at_t<Slot, typename list_at_t<found, all>::parameters>::tag;
};
}  // namespace detail

template <class M, class T>
class parameter_store {
  static_assert(kiln::Model<M>, "kiln::parameter_store<M, T>: M must be a kiln::model<input<...>, layers...>");

 public:
  using model_type = M;
  using scalar_type = T;
  using layout = typename M::parameters;
  using state_layout = typename M::state_layout;

  /// The parameters drawn from `seed` (see initialize), state at its start.
  explicit parameter_store(std::uint64_t seed = 0)
      : params_(detail::make_aligned<T>(layout::buffer_size)),
        state_(detail::make_aligned<T>(state_layout::buffer_size)) {
    initialize(seed);
  }
  parameter_store(const parameter_store& other)
      : params_(detail::make_aligned<T>(layout::buffer_size)),
        state_(detail::make_aligned<T>(state_layout::buffer_size)) {
    assign(other);
  }
  parameter_store& operator=(const parameter_store& other) {
    if (this != &other) assign(other);
    return *this;
  }
  // (not movable: programs over the store hold the addresses of its buffers)
  parameter_store(parameter_store&&) = delete;
  parameter_store& operator=(parameter_store&&) = delete;

  /// Sets every parameter from `seed`: He-normal before relu, Glorot-uniform
  /// otherwise, biases zero; state values to their start; the step count to
  /// 0. The same seed gives the same bits on every machine.
  void initialize(std::uint64_t seed) {
    seed_ = seed;
    step_ = 0;
    detail::initialize_model<M>(params_.get(), state_.get(), seed);
  }
  /// The seed of the last initialize (with the step count, it draws dropout's masks).
  std::uint64_t seed() const noexcept { return seed_; }

  /// Training steps taken (kiln::train_step counts the steps it applies;
  /// a checkpoint restores it). It numbers the step for dropout's masks and
  /// Adam's bias correction: the one step count of a model.
  std::uint64_t step() const noexcept { return step_; }
  void set_step(std::uint64_t step) noexcept { step_ = step; }

  /// The flat parameter buffer (parameters at their offsets, zero padding).
  std::span<T> parameters() noexcept { return {params_.get(), layout::buffer_size}; }
  std::span<const T> parameters() const noexcept { return {params_.get(), layout::buffer_size}; }
  /// The values layers keep but do not train, in M::state_layout.
  std::span<T> state() noexcept { return {state_.get(), state_layout::buffer_size}; }
  std::span<const T> state() const noexcept { return {state_.get(), state_layout::buffer_size}; }

  /// The parameter named `Tag` (row-major in its shape).
  template <class Tag>
  std::span<T> parameter() noexcept {
    return {params_.get() + layout::template offset<Tag>, detail::parameter_named<M, Tag>::type::shape_type::size};
  }
  template <class Tag>
  std::span<const T> parameter() const noexcept {
    return {params_.get() + layout::template offset<Tag>, detail::parameter_named<M, Tag>::type::shape_type::size};
  }
  /// Parameter `Slot` of the layer at 1-based `Position` (a dense layer's
  /// weight is slot 0, its bias slot 1).
  template <std::size_t Position, std::size_t Slot = 0>
  std::span<T> layer_parameter() noexcept {
    return parameter<typename detail::layer_parameter_of<M, Position, Slot>::tag>();
  }

  /// Copies the values of a store of the same model (any scalar): its
  /// parameters, state, seed and step count. Ties stay tied: both layouts
  /// are the model's, one slot per tag.
  template <class U>
  void assign(const parameter_store<M, U>& other) {
    std::transform(other.parameters().begin(), other.parameters().end(), params_.get(),
                   [](U v) { return static_cast<T>(v); });
    std::transform(other.state().begin(), other.state().end(), state_.get(), [](U v) { return static_cast<T>(v); });
    seed_ = other.seed();
    step_ = other.step();
  }

 private:
  detail::aligned_buffer<T> params_;
  detail::aligned_buffer<T> state_;
  std::uint64_t seed_ = 0, step_ = 0;
};

}  // namespace kiln
