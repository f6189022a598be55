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
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstdint>

#include <kiln/model.hpp>
#include <kiln/options.hpp>
#include <kiln/program.hpp>
#include <kiln/step.hpp>

namespace kiln {

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
    static_assert(((detail::option_accepted<Options>() || true) && ...));  // (each reports, once)
    using opts = detail::compile_options<Options...>;
    return program<M, opts::batch_type::size, typename opts::scalar, typename opts::loss, typename opts::replication,
                   opts::bf16_gemm>(seed);
  }
}

}  // namespace kiln
