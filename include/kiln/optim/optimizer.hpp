// kiln/optim/optimizer.hpp — what an optimizer provides (docs/concepts.md).
//
//   A configuration aggregate O (`sgd{.lr = 0.1f}`) with `name`, a public
//   `lr` (schedules set it), `validate()`, and a nested `state<T>` built from
//   the parameter count, holding buffers in the parameters' layout:
//     step(o, w, g, t)           update t (1, 2, ...) of the whole flat buffer
//     prepare(o, t); update(o, w_slice, g_slice, offset)
//                                the same, slice by slice (the replicas of
//                                replicate<N> update their slices in
//                                parallel); element-wise, so equal to step
//   t is the step's number, given by kiln::train_step from the program's
//   one step count (an optimizer keeps no count of its own).
//     buffer()                   the state, for checkpoints
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kiln {

/// `Optimizer<O, T>`: O can update a flat buffer of T, whole (`step`) or in
/// slices after one `prepare` (what replicas do in parallel); element-wise,
/// so the slices' results equal the whole's.
template <class O, class T>
concept Optimizer = requires(O& o, typename O::template state<T>& s, std::span<T> w, std::span<const T> g) {
  { O::name } -> std::convertible_to<std::string_view>;
  o.lr = 0.5f;
  { s.buffer() } -> std::convertible_to<std::span<T>>;
  o.validate();
  typename O::template state<T>;
  s.step(o, w, g, std::uint64_t{1});
  s.prepare(o, std::uint64_t{1});
  s.update(o, w, g, std::size_t{0});
};

namespace detail {
/// How kiln's optimizers walk a slice: in blocks of this many elements
/// (2 KB of f32 a buffer, so a block of every buffer stays in L1), each
/// block in two passes: the optimizer's state first, then the parameters.
/// One stream of stores per pass: with replicate<N> every core has read the
/// parameters a replica updates, and on a 2-core Zen 4 VM, stores to those
/// lines mixed with stores to the state took 1.9× as long as in passes
/// of their own (224,000 against ≈ 120,000 cycles for a 470 KB share,
/// docs/replicate.md#speed). Each element's arithmetic is the same.
inline constexpr std::size_t update_block = 512;

/// Calls pass(begin, end) for the blocks of [0, n), in order.
template <class Pass>
void for_each_update_block(std::size_t n, Pass&& pass) {
  for (std::size_t begin = 0; begin < n; begin += update_block)
    pass(begin, begin + update_block < n ? begin + update_block : n);
}
}  // namespace detail

}  // namespace kiln
