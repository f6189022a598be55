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
//                    gradients of the mean loss (0-filled first)
//     evaluate(t)    the loss of the last forward, without gradients
//
//   Options: `precision<T>` (float, the default, or double), and a loss
//   (`softmax_cross_entropy<>` by default, or `mse`).
//
// SHAPE CONTRACT
//   input(): B × Model::input_shape::size scalars, sample after sample.
//   output(): B × Model::output_shape::size scalars, sample after sample.
//
// THREAD SAFETY
//   A program is one replica; use it from one thread at a time.
//   forward/backward/evaluate never allocate.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
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

#include <boost/hana/at.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/for_each.hpp>
#include <fmt/format.h>

#include <kiln/detail/gemm.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/model.hpp>
#include <kiln/random.hpp>

namespace kiln {

namespace diagnostics {
template <std::size_t B>
inline constexpr bool batch_must_hold_at_least_one_sample = B > 0;
template <class Scalar>
inline constexpr bool precision_must_be_float_or_double = std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>;
template <class... Options>
inline constexpr bool compile_needs_exactly_one_batch_option = false;
template <class Option>
inline constexpr bool compile_option_must_be_batch_precision_or_a_loss = false;
}  // namespace diagnostics

/// Samples per step. Every step of a program takes exactly B samples.
template <std::size_t B>
struct batch {
  static_assert(diagnostics::batch_must_hold_at_least_one_sample<B>,
                "kiln::batch<B>: a batch must hold at least one sample (B >= 1)");
  static constexpr std::size_t size = B;
};

/// The scalar type of the program's parameters and activations.
template <class Scalar>
struct precision {
  static_assert(diagnostics::precision_must_be_float_or_double<Scalar>,
                "kiln::precision<T>: T must be float or double");
  using type = Scalar;
};

/// `Loss<L>`: L is a kiln loss spec (softmax_cross_entropy<...>, mse).
template <class L>
concept Loss = requires { typename L::kiln_loss; };

namespace detail {
template <class T> struct is_batch : std::false_type {};
template <std::size_t B> struct is_batch<batch<B>> : std::true_type {};
template <class T> struct is_precision : std::false_type {};
template <class S> struct is_precision<precision<S>> : std::true_type {};

template <class... Options>
struct compile_options {
  static constexpr std::size_t batches = (std::size_t{0} + ... + is_batch<Options>::value);
  static_assert(batches == 1 || diagnostics::compile_needs_exactly_one_batch_option<Options...>,
                "kiln::compile<Model, Options...>: give exactly one batch<B> option, e.g. compile<Model, batch<64>>()");

  template <class O>
  static constexpr bool known = is_batch<O>::value || is_precision<O>::value || Loss<O>;
  static_assert(((known<Options> || diagnostics::compile_option_must_be_batch_precision_or_a_loss<Options>) && ...),
                "kiln::compile<Model, Options...>: every option is batch<B>, precision<T> or a loss");

  template <template <class> class Is, class Default>
  static constexpr auto pick() {
    namespace hana = boost::hana;
    return hana::fold_left(hana::tuple_t<Options...>, hana::type_c<Default>, [](auto acc, auto o) {
      if constexpr (Is<typename decltype(o)::type>::value) {
        return o;
      } else {
        return acc;
      }
    });
  }
  template <class O> struct is_loss : std::bool_constant<Loss<O>> {};

  using batch_type = typename decltype(+pick<is_batch, batch<1>>())::type;
  using scalar = typename decltype(+pick<is_precision, precision<float>>())::type::type;
  using loss = typename decltype(+pick<is_loss, softmax_cross_entropy<>>())::type;
};

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
  std::fill(p, p + n, T(0));
  return aligned_buffer<T>(p);
}
}  // namespace detail

template <class Model, std::size_t B, class T, class LossSpec>
class program {
 public:
  using model_type = Model;
  using scalar_type = T;
  using loss_type = LossSpec;
  using bound_loss = typename LossSpec::template bind<typename Model::output_shape_type>;
  using target_type = typename bound_loss::target_type;
  using layout = typename Model::parameters;
  using plan = typename Model::template memory_plan<B, T>;

  static constexpr std::size_t batch_size = B;
  static constexpr std::size_t input_size = Model::input_shape_type::size;
  static constexpr std::size_t output_size = Model::output_shape_type::size;
  static constexpr std::size_t targets_per_sample = bound_loss::targets_per_sample;
  static constexpr std::size_t layer_count = Model::layer_count;

  /// Builds the program and initialises its parameters from `seed`.
  explicit program(std::uint64_t seed = 0)
      : block_(detail::make_aligned<T>(2 * layout::buffer_size + plan::activation_elements + plan::gradient_elements)) {
    reserve_products();
    initialize(seed);
  }

  program(const program& other)
      : block_(detail::make_aligned<T>(2 * layout::buffer_size + plan::activation_elements + plan::gradient_elements)) {
    reserve_products();
    std::copy_n(other.block_.get(), 2 * layout::buffer_size, block_.get());
  }
  program& operator=(const program& other) {
    if (this != &other) std::copy_n(other.block_.get(), 2 * layout::buffer_size, block_.get());
    return *this;
  }
  program(program&&) noexcept = default;
  program& operator=(program&&) noexcept = default;

  /// Copies the parameters of another program of the same model (any batch;
  /// a float program from a double one and the reverse). Ties stay tied:
  /// both layouts are the model's, one slot per tag.
  template <class OtherProgram>
  void assign_parameters(const OtherProgram& other) {
    static_assert(std::is_same_v<typename OtherProgram::model_type, Model>,
                  "kiln::program::assign_parameters: the other program must compile the same model");
    std::transform(other.parameters().begin(), other.parameters().end(), parameters().begin(),
                   [](auto v) { return static_cast<T>(v); });
  }

  /// Sets every parameter from `seed`: He-normal before relu, Glorot-uniform
  /// otherwise, biases zero. The same seed gives the same bits.
  void initialize(std::uint64_t seed) {
    rng g(seed, /*stream=*/0x1417);
    std::fill_n(parameters().data(), layout::buffer_size, T(0));
    initialize_each(g, std::make_index_sequence<layout::tensor_count>{});
  }

  /// The flat parameter buffer (parameters at their offsets, zero padding).
  std::span<T> parameters() noexcept { return {block_.get(), layout::buffer_size}; }
  std::span<const T> parameters() const noexcept { return {block_.get(), layout::buffer_size}; }
  /// Gradients, in the parameters' layout.
  std::span<T> gradients() noexcept { return {block_.get() + layout::buffer_size, layout::buffer_size}; }
  std::span<const T> gradients() const noexcept { return {block_.get() + layout::buffer_size, layout::buffer_size}; }

  /// The parameter named `Tag` (row-major in its shape).
  template <class Tag>
  std::span<T> parameter() noexcept {
    using P = typename layout_entry<Tag>::type;
    return {block_.get() + layout::template offset<Tag>, P::shape_type::size};
  }
  template <class Tag>
  std::span<T> gradient() noexcept {
    using P = typename layout_entry<Tag>::type;
    return {block_.get() + layout::buffer_size + layout::template offset<Tag>, P::shape_type::size};
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

  /// Where the next batch goes: B samples of input_size scalars each.
  std::span<T> input() noexcept { return {activations() + plan::activation_offset[0], B * input_size}; }
  /// The last forward's output: B samples of output_size scalars each.
  std::span<const T> output() const noexcept {
    return {activations() + plan::activation_offset[layer_count], B * output_size};
  }

  /// Runs every layer on input(). Throws only where a layer checks data
  /// (an embedding given a token id out of range).
  void forward() {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (forward_layer<I>(), ...); }
    (std::make_index_sequence<layer_count>{});
  }

  /// The loss of the last forward() against `targets` (targets_per_sample
  /// per sample); only the first `valid` samples count (padding after).
  loss_value evaluate(std::span<const target_type> targets, std::size_t valid = B) const {
    check_targets(targets, valid);
    return bound_loss::evaluate(output().data(), targets.data(), B, valid, static_cast<T*>(nullptr));
  }

  /// Loss of the last forward() and the gradient of its mean over the first
  /// `valid` samples with respect to every parameter (into gradients()).
  loss_value backward(std::span<const target_type> targets, std::size_t valid = B) {
    check_targets(targets, valid);
    T* dy = grad_slot(0);
    loss_value r = bound_loss::evaluate(output().data(), targets.data(), B, valid, dy);
    std::fill_n(gradients().data(), layout::buffer_size, T(0));
    int current = 0;
    [&]<std::size_t... I>(std::index_sequence<I...>) { (backward_layer<layer_count - 1 - I>(current), ...); }
    (std::make_index_sequence<layer_count>{});
    return r;
  }

 private:
  template <class Tag>
  struct layout_entry {
    static_assert(layout::template contains<Tag>, "kiln::program: this tag names no parameter of the model");
    using type = typename decltype(+boost::hana::at_c<layout::template index_of<Tag>()>(Model::parameter_list))::type;
  };
  template <std::size_t Position, std::size_t Slot>
  struct layer_param {
    using L = typename Model::template layer<Position - 1>;
    using type = typename decltype(+boost::hana::at_c<Slot>(L::parameters))::type;
    using tag = typename type::tag;
  };

  T* activations() const noexcept { return block_.get() + 2 * layout::buffer_size; }
  T* grad_slot(int i) const noexcept {
    return activations() + plan::activation_elements + static_cast<std::size_t>(i) * plan::gradient_slot_elements;
  }

  using context = detail::layer_context<T, B, layout>;

  context make_context(std::size_t k) const noexcept {
    context c;
    c.x = activations() + plan::activation_offset[k - 1];
    c.y = activations() + plan::activation_offset[k];
    c.w = block_.get();
    c.dw = block_.get() + layout::buffer_size;
    c.gemm = &scratch_;
    return c;
  }

  template <std::size_t I>
  void forward_layer() {
    using L = typename Model::template layer<I>;
    if constexpr (!L::is_view) L::forward(make_context(I + 1));
  }

  /// True when some layer before index I computes something (so layer I's
  /// input gradient is needed).
  template <std::size_t I>
  static constexpr bool input_gradient_needed() {
    bool any = false;
    [&]<std::size_t... J>(std::index_sequence<J...>) { ((any = any || !Model::template layer<J>::is_view), ...); }
    (std::make_index_sequence<I>{});
    return any;
  }

  template <std::size_t I>
  void backward_layer(int& current) noexcept {
    using L = typename Model::template layer<I>;
    if constexpr (!L::is_view) {
      context c = make_context(I + 1);
      c.dy = grad_slot(current);
      if constexpr (input_gradient_needed<I>()) {
        c.dx = grad_slot(1 - current);
        current = 1 - current;
      }
      L::backward(c);
    }
  }

  void check_targets(std::span<const target_type> targets, std::size_t valid) const {
    if (valid > B) {
      throw std::invalid_argument(fmt::format("kiln::program: {} valid samples in a batch of {}", valid, B));
    }
    if (targets.size() < valid * targets_per_sample) {
      throw std::invalid_argument(fmt::format("kiln::program: {} targets given for {} samples ({} per sample)",
                                              targets.size(), valid, targets_per_sample));
    }
  }

  void reserve_products() {
    boost::hana::for_each(Model::layers, [&](auto t) {
      using L = typename decltype(t)::type;
      if constexpr (requires { L::template reserve<B, T>(scratch_); }) L::template reserve<B, T>(scratch_);
    });
  }

  template <std::size_t... I>
  void initialize_each(rng& g, std::index_sequence<I...>) {
    (initialize_one<typename decltype(+boost::hana::at_c<I>(Model::parameter_list))::type>(g), ...);
  }
  template <class P>
  void initialize_one(rng& g) {
    T* p = block_.get() + layout::template offset<typename P::tag>;
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
      case init::zeros: std::fill_n(p, n, T(0)); break;
      case init::ones: std::fill_n(p, n, T(1)); break;
    }
  }

  detail::aligned_buffer<T> block_;
  mutable detail::gemm_scratch<T> scratch_;
};

/// Compiles `Model` for steps of `batch<B>` samples (plus optional
/// `precision<T>` and a loss) and initialises its parameters from `seed`.
template <class M, class... Options>
auto compile(std::uint64_t seed = 0) {
  static_assert(Model<M>, "kiln::compile<M, ...>: M must be a kiln::model<input<...>, layers...>");
  using opts = detail::compile_options<Options...>;
  return program<M, opts::batch_type::size, typename opts::scalar, typename opts::loss>(seed);
}

}  // namespace kiln
