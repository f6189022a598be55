// kiln/checkpoint_directory.hpp — the directory fit writes its checkpoints
// to: created on demand, epoch-NNNN.kiln names, and the rotation that keeps
// the newest K of them (whoever wrote them) and the one just written.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <kiln/checkpoint_error.hpp>

namespace kiln {

namespace detail {

/// Creates `dir` (and its parents) for checkpoints, or says why not.
inline void create_checkpoint_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw checkpoint_error(checkpoint_fault::io, dir,
                           fmt::format("cannot create the checkpoint directory: {}",
                                       ec ? ec.message() : "a file of that name is in the way"));
}

}  // namespace detail

/// The name fit gives the checkpoint of epoch `epoch`: epoch-0001.kiln, ...
inline std::string checkpoint_file_name(std::uint64_t epoch) { return fmt::format("epoch-{:04}.kiln", epoch); }

/// The epoch in a name checkpoint_file_name made (at least 4 digits), or nothing.
inline std::optional<std::uint64_t> checkpoint_epoch_of(std::string_view name) {
  constexpr std::string_view prefix = "epoch-", suffix = ".kiln";
  if (name.size() < prefix.size() + 4 + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 19) return std::nullopt;
  std::uint64_t e = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return std::nullopt;
    e = e * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  return e;
}

/// Keeps the `keep` (at least 1) checkpoints of `dir` with the highest epoch
/// numbers in their names (checkpoint_file_name's pattern, whoever wrote
/// them), and `just_written` whatever its number, and removes the others:
/// a directory shared by runs stays bounded (keep + 1 files at most), and a
/// new run beside an old one's higher epochs still keeps its latest.
/// Other files are never touched.
inline void remove_old_checkpoints(const std::filesystem::path& dir, std::size_t keep,
                                   const std::filesystem::path& just_written = {}) {
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry;
    if (const auto e = checkpoint_epoch_of(it->path().filename().string()); e && !it->is_directory(entry))
      found.emplace_back(*e, it->path());
  }
  keep = std::max<std::size_t>(keep, 1);
  std::sort(found.begin(), found.end());
  for (std::size_t i = 0; i + keep < found.size(); ++i)
    if (found[i].second.filename() != just_written.filename()) std::filesystem::remove(found[i].second, ec);
}

}  // namespace kiln
