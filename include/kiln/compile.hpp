// kiln/compile.hpp — turn a model into a program: batch, precision, loss,
// replication.
//
//   auto p = kiln::compile<Model, batch<B>, Options...>(seed);
//
// instantiates the training graph of Model for steps of exactly B samples
// (per replica) and returns a kiln::program (kiln/program.hpp) with its
// parameters initialised from `seed`. Options, each at most once and in any
// order (kiln/options.hpp): `precision<T>` (float, the default, double, or
// bf16: f32 master weights, bf16 activations and GEMM operands), a loss
// (`softmax_cross_entropy<>` by default, or `mse`), and `replicate<N>`.
// A training step is kiln::train_step (kiln/step.hpp).
//
//   auto q = kiln::compile<Model, batch<1>, Options...>(p.store());
//
// makes a program over p's parameter store (kiln/parameter_store.hpp):
// another batch, the same weights, nothing copied.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstdint>
#include <memory>
#include <type_traits>

#include <kiln/model.hpp>
#include <kiln/options.hpp>
#include <kiln/program.hpp>
#include <kiln/step.hpp>

namespace kiln {

namespace diagnostics {
template <class Given, class Expected>
inline constexpr bool a_shared_store_holds_the_same_model_and_scalar = false;
}  // namespace diagnostics

namespace detail {
/// True when M is a model; otherwise the one error for a swapped or missing
/// model (and nothing else is instantiated: the options are not looked at).
template <class M, class... Options>
constexpr bool model_comes_first() {
  if constexpr (!Model<M>) {
    static_assert(diagnostics::compile_takes_the_model_first_then_the_options<M, Options...>,
                  "kiln::compile<M, Options...>: M must be a kiln::model<input<...>, layers...>; the model comes "
                  "first, then the options: compile<Model, batch<B>>()");
    return false;
  } else {
    return true;
  }
}
/// The program compile<M, Options...> makes.
template <class M, class... Options>
struct compiled {
  static_assert(((option_accepted<Options>() || true) && ...));  // (each option checks itself first, and reports once)
  using opts = compile_options<Options...>;
  using type = program<M, opts::batch_type::size, typename opts::scalar, typename opts::loss,
                       typename opts::replication, opts::bf16_gemm>;
};
}  // namespace detail

/// Compiles `Model` for steps of `batch<B>` samples (plus optional
/// `precision<T>` and a loss) and initialises its parameters from `seed`.
template <class M, class... Options>
auto compile(std::uint64_t seed = 0) {
  if constexpr (detail::model_comes_first<M, Options...>()) {
    return typename detail::compiled<M, Options...>::type(seed);
  }
}

/// Compiles `Model` as above, over an existing parameter store (another
/// program's `store()`): no copy, the programs share parameters, state,
/// seed and step count (kiln/parameter_store.hpp). A batch-1 program for
/// inference over a training program's weights:
///   auto one = kiln::compile<mlp, batch<1>>(train.store());
template <class M, class... Options, class Store>
auto compile(const std::shared_ptr<Store>& store) {
  if constexpr (detail::model_comes_first<M, Options...>()) {
    using P = typename detail::compiled<M, Options...>::type;
    if constexpr (!std::is_same_v<Store, typename P::store_type>) {
      static_assert(diagnostics::a_shared_store_holds_the_same_model_and_scalar<Store, typename P::store_type>,
                    "kiln::compile<M, Options...>(store): the store must hold the parameters of the same model M, "
                    "in the program's scalar type (float for precision<float> and precision<bf16>, double for "
                    "precision<double>)");
      return P();  // (a program all the same, so that code using it adds no second error)
    } else {
      return P(store);
    }
  }
}

}  // namespace kiln
