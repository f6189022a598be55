// kiln/data/npz.hpp — NumPy .npz archives (numpy.savez, savez_compressed).
//
// WHAT IT READS
//   An .npz file is a zip archive of .npy files, one per array, stored or
//   deflated. The archive is read by minizip (Debian's `libminizip-dev`,
//   the zip reader that ships with zlib's sources): it walks the central
//   directory, inflates, and checks each entry's CRC-32, so no zip parsing
//   is written here; each entry is then read as a .npy (kiln/data/npy.hpp).
//   Link kiln::npz (kiln + minizip) to use this header.
//
//     auto names = kiln::npz::names("data.npz");              // {"x", "y"}
//     auto x = kiln::npz::read<float>("data.npz", "x");
//     kiln::dataset d = kiln::npz::load("data.npz", "x", "y");
//
// ERRORS
//   kiln::data_error naming the file and, for an array, its name: not a
//   zip archive, no such array (listing those there are), an entry that
//   cannot be opened (encrypted, an unknown method), damaged compressed
//   data or a CRC-32 that does not match; and every fault npy.hpp names.
//
// MEMORY
//   An entry is held as it inflates, never more than minizip delivers (and
//   never more than the size its directory entry declares); then converted.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <minizip/unzip.h>

#include <kiln/data/npy.hpp>

namespace kiln::npz {

namespace detail {

struct closer {
  void operator()(unzFile z) const noexcept { unzClose(z); }
};
using archive = std::unique_ptr<void, closer>;

inline archive open(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw data_error(file, std::filesystem::exists(file, ec) ? "not a regular file" : "no such file");
  archive z(unzOpen64(file.c_str()));
  if (!z) throw data_error(file, "not an .npz file: not a zip archive that minizip can open");
  return z;
}

/// The names of the archive's entries, as stored.
inline std::vector<std::string> entries(const std::filesystem::path& file, unzFile z) {
  std::vector<std::string> out;
  for (int r = unzGoToFirstFile(z); r == UNZ_OK; r = unzGoToNextFile(z)) {
    char name[1024];
    unz_file_info64 info;
    if (unzGetCurrentFileInfo64(z, &info, name, sizeof name, nullptr, 0, nullptr, 0) != UNZ_OK)
      throw data_error(file, "a damaged zip directory entry");
    out.emplace_back(name);
    if (out.size() > 100000) throw data_error(file, "more than 100,000 entries");
  }
  return out;
}

/// Faults in array `name` of `file`: a data_error naming both.
inline std::function<void(const std::string&)> failure(const std::filesystem::path& file, std::string_view name) {
  return [file, n = std::string(name)](const std::string& what) {
    throw data_error(file, fmt::format("array '{}': {}", n, what));
  };
}

/// The bytes of entry `name`.npy, as they inflate.
inline std::vector<std::uint8_t> entry(const std::filesystem::path& file, std::string_view name) {
  archive z = open(file);
  const std::string wanted = fmt::format("{}.npy", name);
  if (unzLocateFile(z.get(), wanted.c_str(), /*case sensitive=*/1) != UNZ_OK) {
    std::vector<std::string> there;
    for (const auto& e : entries(file, z.get()))
      there.push_back(e.size() > 4 && e.ends_with(".npy") ? e.substr(0, e.size() - 4) : e);
    throw data_error(file, fmt::format("has no array '{}' (it has: {})", name, fmt::join(there, ", ")));
  }
  const auto fail = failure(file, name);
  if (unzOpenCurrentFile(z.get()) != UNZ_OK) fail("its zip entry cannot be opened (encrypted, or an unknown method)");
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> chunk(std::size_t{1} << 16);
  for (;;) {
    const int got = unzReadCurrentFile(z.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      unzCloseCurrentFile(z.get());
      fail(fmt::format("damaged compressed data (minizip error {})", got));
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
  }
  if (const int r = unzCloseCurrentFile(z.get()); r == UNZ_CRCERROR)
    fail("its CRC-32 does not match its data");
  else if (r != UNZ_OK)
    fail(fmt::format("its zip entry is damaged (minizip error {})", r));
  return bytes;
}

/// Entry `name` read as a .npy; faults name the archive and the array.
inline npy::detail::raw raw(const std::filesystem::path& file, std::string_view name) {
  const std::vector<std::uint8_t> bytes = entry(file, name);
  npy::detail::memory_input in(bytes);
  return npy::detail::read_raw(in, failure(file, name));
}

}  // namespace detail

/// The arrays in `file` (entry names without ".npy"), in archive order.
inline std::vector<std::string> names(const std::filesystem::path& file) {
  const detail::archive z = detail::open(file);
  std::vector<std::string> out;
  for (auto& e : detail::entries(file, z.get()))
    if (e.size() > 4 && e.ends_with(".npy")) out.push_back(e.substr(0, e.size() - 4));
  return out;
}

/// Array `name` of `file` as elements of type T, which must be its dtype.
template <class T>
npy::array<T> read(const std::filesystem::path& file, std::string_view name) {
  return npy::detail::as<T>(detail::raw(file, name), detail::failure(file, name));
}

/// A dataset from array `features` (n, ...) of any number type and,
/// unless `labels` is empty, array `labels` (n) or (n, k) of integers.
inline dataset load(const std::filesystem::path& file, std::string_view features = "x",
                    std::string_view labels = "y") {
  const auto x = detail::raw(file, features);
  std::optional<npy::detail::raw> y;
  if (!labels.empty()) y = detail::raw(file, labels);
  const auto fail_x = detail::failure(file, features), fail_y = detail::failure(file, labels);
  return npy::detail::make_dataset(file.stem().string(), x, npy::detail::features(x, fail_x),
                                   y ? npy::detail::labels(*y, fail_y) : std::vector<std::uint32_t>{},
                                   y ? &*y : nullptr, fail_x, fail_y);
}

}  // namespace kiln::npz
