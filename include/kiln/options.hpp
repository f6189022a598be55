// kiln/options.hpp — what compile<Model, Options...> takes besides the model:
// batch<B> (exactly one), precision<T>, a loss and replicate<N> (at most one
// each; kiln/replicate.hpp), checked with one error per mistake.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <type_traits>

#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <kiln/bf16.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/replicate.hpp>

namespace kiln {

namespace diagnostics {
template <std::size_t B>
inline constexpr bool batch_must_hold_at_least_one_sample = B > 0;
template <class Scalar>
inline constexpr bool precision_must_be_float_double_or_bf16 =
    std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> || std::is_same_v<Scalar, kiln::bf16>;
template <class... Options>
inline constexpr bool compile_needs_exactly_one_batch_option = false;
template <class Option>
inline constexpr bool compile_option_must_be_batch_precision_or_a_loss = false;
template <class... Options>
inline constexpr bool compile_takes_at_most_one_precision = false;
template <class... Options>
inline constexpr bool compile_takes_at_most_one_loss = false;
template <class... Options>
inline constexpr bool compile_takes_at_most_one_replicate = false;
template <class NotAModel, class... Options>
inline constexpr bool compile_takes_the_model_first_then_the_options = false;
}  // namespace diagnostics

/// Samples per step. Every step of a program takes exactly B samples.
template <std::size_t B>
struct batch {
  static_assert(diagnostics::batch_must_hold_at_least_one_sample<B>,
                "kiln::batch<B>: a batch must hold at least one sample (B >= 1)");
  static constexpr std::size_t size = B;
};

/// The arithmetic of a program: `float` (the default), `double`, or
/// `kiln::bf16` — f32 parameters, gradients, optimizer and losses;
/// activations stored in bf16; the weights rounded into one bf16 copy per
/// step; every GEMM's operands in bf16, accumulated in f32 (AVX512-BF16 dot
/// products where the target has them); see docs/precision.md.
template <class Scalar>
struct precision {
  // Its check: one error, and the class stays whole (compile runs it first,
  // see detail::option_accepted).
  static constexpr bool accepted = [] {
    static_assert(diagnostics::precision_must_be_float_double_or_bf16<Scalar>,
                  "kiln::precision<T>: T must be float, double or kiln::bf16");
    return diagnostics::precision_must_be_float_double_or_bf16<Scalar>;
  }();
  /// The scalar of the program's buffers (f32 for bf16: the master weights;
  /// f32 as a stand-in for a rejected T, so that error comes alone).
  using type = std::conditional_t<
      std::is_same_v<Scalar, kiln::bf16> || !diagnostics::precision_must_be_float_double_or_bf16<Scalar>, float, Scalar>;
  static constexpr bool bf16_gemm = std::is_same_v<Scalar, kiln::bf16>;
};

/// `Loss<L>`: L is a kiln loss spec (softmax_cross_entropy<...>, mse).
template <class L>
concept Loss = requires {
  typename L::kiln_loss;
};

namespace detail {
template <class T>
struct is_batch : std::false_type {};
template <std::size_t B>
struct is_batch<batch<B>> : std::true_type {};
template <class T>
struct is_precision : std::false_type {};
template <class S>
struct is_precision<precision<S>> : std::true_type {};

/// Runs an option's own checks (precision<T>, replicate<N>: `accepted`,
/// a lambda holding its static_asserts). compile calls it first, so a
/// failed check is reported with little context above it, and once: the
/// option then gives a stand-in (float, one replica) and nothing else fails.
template <class O>
constexpr bool option_accepted() {
  if constexpr (requires { O::accepted; }) {
    return O::accepted;
  } else {
    return true;
  }
}

template <class... Options>
struct compile_options {
  static constexpr std::size_t batches = (std::size_t{0} + ... + is_batch<Options>::value);
  static_assert(batches == 1 || diagnostics::compile_needs_exactly_one_batch_option<Options...>,
                "kiln::compile<Model, Options...>: give exactly one batch<B> option, e.g. compile<Model, batch<64>>()");

  template <class O>
  static constexpr bool known = is_batch<O>::value || is_precision<O>::value || is_replicate<O>::value || Loss<O>;
  static_assert(((known<Options> || diagnostics::compile_option_must_be_batch_precision_or_a_loss<Options>)&&...),
                "kiln::compile<Model, Options...>: every option is batch<B>, precision<T>, replicate<N> or a loss");
  // (Twice the same kind of option would leave one silently ignored.)
  static_assert((std::size_t{0} + ... + is_precision<Options>::value) <= 1 ||
                    diagnostics::compile_takes_at_most_one_precision<Options...>,
                "kiln::compile<Model, Options...>: give at most one precision<T> option");
  static_assert((std::size_t{0} + ... + std::size_t{Loss<Options>}) <= 1 ||
                    diagnostics::compile_takes_at_most_one_loss<Options...>,
                "kiln::compile<Model, Options...>: give at most one loss (softmax_cross_entropy<> is the default)");
  static_assert((std::size_t{0} + ... + is_replicate<Options>::value) <= 1 ||
                    diagnostics::compile_takes_at_most_one_replicate<Options...>,
                "kiln::compile<Model, Options...>: give at most one replicate<N> option");

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
  template <class O>
  struct is_loss : std::bool_constant<Loss<O>> {};

  using batch_type = typename decltype(+pick<is_batch, batch<1>>())::type;
  using scalar = typename decltype(+pick<is_precision, precision<float>>())::type::type;
  static constexpr bool bf16_gemm = decltype(+pick<is_precision, precision<float>>())::type::bf16_gemm;
  using loss = typename decltype(+pick<is_loss, softmax_cross_entropy<>>())::type;
  using replication = typename decltype(+pick<is_replicate, single_replica>())::type;
};

}  // namespace detail

}  // namespace kiln
