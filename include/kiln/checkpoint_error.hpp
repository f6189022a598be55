// kiln/checkpoint_error.hpp — what goes wrong with a checkpoint file, and
// the error that says so (what load_checkpoint and save_checkpoint raise).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <filesystem>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kiln {

/// What went wrong with a checkpoint file.
enum class checkpoint_fault {
  missing,
  not_a_checkpoint,
  newer_format,
  truncated,
  corrupted,
  other_model,
  io,
  out_of_range,  ///< intact (checksum good) but holds a value training cannot use: a NaN rate scale, ...
  older_format,  ///< intact, but of a format this kiln no longer reads (1 and 2: a compiler-spelt model signature)
};

class checkpoint_error : public std::runtime_error {
 public:
  checkpoint_error(checkpoint_fault fault, const std::filesystem::path& file, const std::string& what)
      : std::runtime_error(fmt::format("kiln: checkpoint {}: {}", file.string(), what)), fault_(fault), file_(file) {}
  checkpoint_fault fault() const noexcept { return fault_; }
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  checkpoint_fault fault_;
  std::filesystem::path file_;
};

}  // namespace kiln
