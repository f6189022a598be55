// kiln/checkpoint.hpp — checkpoints that lose nothing.
//
// WHAT IT IS
//   A versioned binary file holding a program's parameters (a tied weight
//   once), its state values (batch_norm's running statistics), the optimizer's state, the epoch, step and seed of training, and
//   random-generator state, under a header that names the model, and closed
//   by a CRC-32 of everything before it. The byte layout, and what is checked
//   before a byte is trusted: kiln/checkpoint_format.hpp; writing and reading
//   files: kiln/detail/checkpoint_file.hpp; fit's directory of epoch
//   checkpoints: kiln/checkpoint_directory.hpp.
//
// GUARANTEES
//   * save writes a temporary file `.NAME.tmp-PID` in the same directory,
//     flushes and fsyncs it, then renames it over the target: an interrupted
//     save leaves the previous checkpoint whole. A symbolic link is written
//     through (its target replaced atomically; the link stays a link). A save
//     removes the temporaries killed saves left in its directory (process
//     gone from this machine, bytes beginning like a checkpoint).
//   * load reads and checks everything before it changes anything, the
//     CRC-32 first (every format ends with a CRC-32 of all before it), so
//     damage is named as damage: a file that is missing, not a checkpoint,
//     truncated, corrupted (checksum), of a newer format, of another model,
//     or intact but holding values training cannot use (out_of_range: a
//     NaN/inf/negative lr scale, non-finite parameters, ...) raises
//     kiln::checkpoint_error saying which, and the program and optimizer are
//     left untouched. It allocates the file's bytes and nothing more,
//     whatever lengths the file announces (fuzzed: docs/reliability.md).
//   * fit's rotation (remove_old_checkpoints) keeps the newest K
//     epoch-NNNN.kiln files of the directory by epoch number, whoever wrote
//     them, and the one just written.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <kiln/checkpoint_directory.hpp>
#include <kiln/checkpoint_error.hpp>
#include <kiln/checkpoint_format.hpp>
#include <kiln/detail/checkpoint_file.hpp>

namespace kiln {

namespace detail {

/// Where the signature in a file first differs from this model's, for
/// messages: that line of each, or that one of them ends there, and its
/// number. Lines are shown printable and cut at 200 characters.
inline std::string first_difference(std::string_view file, std::string_view mine) {
  // One scan for the first difference, the start of its line and its number
  // (a loop with an early exit: clang-14 -mavx512f without AVX512VL crashed
  // in instruction selection on the vectorised newline count it replaces).
  std::size_t i = 0, from = 0, line = 1;
  for (; i < file.size() && i < mine.size() && file[i] == mine[i]; ++i)
    if (file[i] == '\n') from = i + 1, ++line;
  auto side = [&](std::string_view s, std::string_view owner) {
    if (from >= s.size()) return fmt::format("{}'s signature ends", owner);
    std::string text;
    for (const char ch : s.substr(from, s.find('\n', from) - from)) {
      if (text.size() >= 200) {
        text += "...";
        break;
      }
      const auto u = static_cast<unsigned char>(ch);
      text += u >= 0x20 && u < 0x7f && ch != '"' && ch != '\\' ? std::string(1, ch) : fmt::format("\\x{:02x}", u);
    }
    return fmt::format("{} has \"{}\"", owner, text);
  };
  return fmt::format("{} where {} (line {} of the signature)", side(file, "the file"), side(mine, "this model"),
                     line);
}

}  // namespace detail

/// Writes `program`'s parameters, an optimizer's state and the training
/// position to `file`, atomically.
template <class Program, class OptimizerScalar = typename Program::scalar_type>
void save_checkpoint(const std::filesystem::path& file, const Program& program,
                     std::span<const OptimizerScalar> optimizer_state = {}, std::string_view optimizer_name = "",
                     const training_position& at = {}) {
  using T = typename Program::scalar_type;
  using Stored = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using layout = typename Program::layout;
  detail::byte_writer w;
  w.append(checkpoint_magic.data(), checkpoint_magic.size());
  w.put<std::uint32_t>(checkpoint_format_version);
  w.put<std::uint32_t>(sizeof(Stored));
  w.put_text(Program::model_type::signature());
  using state_layout = typename Program::state_layout;
  w.put<std::uint64_t>(layout::count);
  w.put<std::uint64_t>(state_layout::count);
  w.put<std::uint64_t>(optimizer_state.size());
  w.put_text(optimizer_name);
  w.put(at.epoch);
  w.put(at.step);
  w.put(at.seed);
  for (auto r : at.rng) w.put(r);
  w.put(at.lr_scale);
  w.put(at.best_metric);
  w.put(at.stale_epochs);
  w.put(at.has_best);
  w.put(at.step_in_epoch);
  const auto params = program.parameters();
  for (std::size_t i = 0; i < layout::tensor_count; ++i)
    w.template put_scalars<Stored>(params.subspan(layout::offsets[i], layout::sizes[i]));
  const auto state = program.state();
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    w.template put_scalars<Stored>(state.subspan(state_layout::offsets[i], state_layout::sizes[i]));
  w.template put_scalars<Stored>(optimizer_state);
  w.put(detail::crc32_of(w.bytes()));
  detail::write_atomically(file, w.bytes());
}

namespace detail {

/// Checks `bytes` (checkpoint `file`) whole and against `program`, then loads them; see load_checkpoint.
template <class Program, class OptimizerScalar>
training_position load_checkpoint_bytes(std::span<const unsigned char> bytes, const std::filesystem::path& file,
                                        Program& program, std::span<OptimizerScalar> optimizer_state,
                                        std::string_view optimizer_name) {
  using T = typename Program::scalar_type;
  using layout = typename Program::layout;
  using state_layout = typename Program::state_layout;
  const checkpoint_contents c = parse_checkpoint(bytes, file);
  const std::string mine = Program::model_type::signature();
  if (c.signature != mine)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           "written for another model: " + first_difference(c.signature, mine));
  if (c.n_params != layout::count || c.n_state != state_layout::count)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds {} parameters and {} state values; this model has {} and {}", c.n_params,
                                       c.n_state, layout::count, state_layout::count));
  if (!optimizer_state.empty() && (c.n_opt != optimizer_state.size() || c.optimizer != optimizer_name))
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds the state of optimizer '{}' ({} scalars); this trainer's is '{}' ({})",
                                       c.optimizer, c.n_opt, optimizer_name, optimizer_state.size()));
  const std::size_t used = static_cast<std::size_t>(c.n_params + c.n_state) + optimizer_state.size();
  if constexpr (std::is_same_v<T, float> && std::is_same_v<OptimizerScalar, float>) {
    if (c.scalar == 8)
      for (std::size_t i = 0; i < used; ++i)
        if (std::abs(c.scalar_at(i)) > std::numeric_limits<float>::max())
          throw checkpoint_error(checkpoint_fault::out_of_range, file,
                                 fmt::format("out of range: stored value {} is {}, beyond float", i, c.scalar_at(i)));
  }

  // Everything checked: now copy.
  std::size_t k = 0;
  auto params = program.parameters();
  for (std::size_t i = 0; i < layout::tensor_count; ++i)
    for (std::size_t j = 0; j < layout::sizes[i]; ++j)
      params[layout::offsets[i] + j] = static_cast<T>(c.scalar_at(k++));
  auto state = program.state();
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    for (std::size_t j = 0; j < state_layout::sizes[i]; ++j)
      state[state_layout::offsets[i] + j] = static_cast<T>(c.scalar_at(k++));
  for (auto& v : optimizer_state) v = static_cast<OptimizerScalar>(c.scalar_at(k++));
  return c.at;
}

}  // namespace detail

/// Reads `file` into `program` (and `optimizer_state`, which must have the
/// size that was saved, or be empty to skip it). Checks everything first;
/// on any fault throws kiln::checkpoint_error and changes nothing. Memory:
/// the file's bytes, nothing more, whatever its header announces.
template <class Program, class OptimizerScalar = typename Program::scalar_type>
training_position load_checkpoint(const std::filesystem::path& file, Program& program,
                                  std::span<OptimizerScalar> optimizer_state = {},
                                  std::string_view optimizer_name = "") {
  const auto bytes = detail::read_checkpoint_file(file);
  return detail::load_checkpoint_bytes(std::span<const unsigned char>(bytes), file, program, optimizer_state,
                                       optimizer_name);
}

}  // namespace kiln
