// kiln/fwd.hpp — forward declarations of kiln's public vocabulary.
//
// Include this when you only need to name kiln types (in a header of your
// own, say); include <kiln/kiln.hpp> or a feature header to use them.
#pragma once

#include <cstddef>
#include <cstdint>

#define KILN_FWD_INCLUDED 1

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

namespace kiln {

/// Extents known at compile time: `shape<28, 28>` is a 28×28 sample.
template <std::size_t... Extents>
struct shape;

/// The first entry of a model: the shape of one input sample (rank 1 to 3).
template <std::size_t... Extents>
struct input;
template <std::size_t Length>
struct input_tokens;

/// `model<input<...>, Layers...>`: a flat, typed list of layers.
template <class... Entries>  // (an input<...>, then its layers)
struct model;

/// Compile options: samples per step, and the scalar type of the program.
template <std::size_t B>
struct batch;
template <class Scalar>
struct precision;

/// Layers.
struct no_bias;
template <std::size_t Units, class... Options>
struct dense;
struct flatten;
template <std::size_t Filters, std::size_t Kernel, std::size_t Stride, int Padding>
struct conv2d;
struct relu;
struct tanh;
struct sigmoid;
template <std::size_t Vocab, std::size_t Dim, class... Options>
struct embedding;
template <class... Options>
struct unembed;
template <class Tag>
struct tied;
template <class Tag>
struct tied_transposed;

/// Losses.
template <std::size_t Classes = 0>
struct softmax_cross_entropy;
struct mse;

/// Optimizers.
struct sgd;

/// The compiled program and its trainer.
template <long long N, long long... Cores>  // (signed: replicate<-1> is our error, not a narrowing one)
struct replicate;
namespace detail {
struct single_replica;
}
template <class Model, std::size_t Batch, class Scalar, class Loss, class Replication = detail::single_replica,
          bool Bf16Gemm = false>
class program;
/// The parameters, state, seed and step count of a model (kiln/parameter_store.hpp).
template <class Model, class Scalar = float>
class parameter_store;
struct bf16;
template <class Program, class Optimizer>
class trainer;

}  // namespace kiln
