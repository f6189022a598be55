// kiln/data/idx.hpp — the IDX file format (MNIST and its relatives).
//
// WHAT IT READS
//   An IDX file, plain or gzip-compressed: two zero bytes,
//   a type byte, a rank byte, `rank` big-endian 32-bit extents, then the
//   elements in row-major order. kiln reads unsigned-byte files (type 0x08),
//   which is what MNIST-style data sets use.
//
// ERRORS
//   Everything wrong with a file throws kiln::data_error, whose message names
//   the file and says what is wrong: missing or unreadable, not gzip/IDX
//   (wrong magic number), an element type other than unsigned byte, extents
//   whose product overflows, fewer bytes than the extents promise
//   (truncated), bytes left after the data, and for gzip: a corrupt stream, a
//   CRC-32 or length trailer that does not match, a stream cut off before its
//   trailer, or bytes after it that are not another gzip member (members may
//   follow each other, as `cat a.gz b.gz` makes them).
//
// MEMORY
//   Reading never allocates more than the file can hold: a plain file's
//   remaining size bounds the announced array before it is allocated, and
//   decompressed data is stored as it arrives (each step at most 64 KiB or
//   what already arrived), so a header announcing 4 GB in an 11-byte file
//   costs nothing. Every fault, however hostile the bytes, is a
//   kiln::data_error (fuzzed: see docs/reliability.md).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/detail/input_file.hpp>

namespace kiln {

/// A file that cannot be used as data: the message names it and says why.
class data_error : public std::runtime_error {
 public:
  data_error(const std::filesystem::path& file, const std::string& what)
      : std::runtime_error(fmt::format("kiln: {}: {}", file.string(), what)), file_(file) {}
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  std::filesystem::path file_;
};

namespace idx {

/// An IDX array of unsigned bytes.
struct array {
  std::vector<std::size_t> extents;
  std::vector<std::uint8_t> data;
  std::size_t size() const noexcept {
    return std::accumulate(extents.begin(), extents.end(), std::size_t{1}, std::multiplies<>{});
  }
};

/// Reads `file` (gzip or plain) whole; throws kiln::data_error on any fault.
/// Memory: never more than the file can hold (a plain file's size bounds the
/// announced array before it is allocated; gzip data is taken as it arrives).
inline array read(const std::filesystem::path& file) {
  detail::input_file in(file, [&](const std::string& what) { throw data_error(file, what); });
  // A fault in what the bytes say; for gzip, damage to the stream is named first.
  auto refuse = [&](const std::string& what) {
    in.check_rest();
    throw data_error(file, what);
  };
  auto read_exact = [&](unsigned char* into, std::size_t n, const char* what) {
    if (const std::size_t got = in.read(into, n); got < n)
      refuse(fmt::format("truncated: the {} needs {} bytes but only {} are there", what, n, got));
  };

  unsigned char magic[4];
  read_exact(magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0) {
    refuse(
        fmt::format("wrong magic number 0x{:02x}{:02x}{:02x}{:02x}: not an IDX file (one starts "
                    "with two zero bytes)",
                    magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != 0x08) {
    refuse(fmt::format("element type 0x{:02x} is not supported (kiln reads unsigned bytes, 0x08)", magic[2]));
  }
  const std::size_t rank = magic[3];
  if (rank == 0) refuse("an IDX array of rank 0 holds nothing");
  array a;
  a.extents.resize(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    unsigned char b[4];
    read_exact(b, 4, "header");
    a.extents[i] = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
  }
  const auto count = detail::checked_product(a.extents);
  if (!count || *count > std::numeric_limits<std::size_t>::max() / 2)
    refuse(fmt::format("the extents ({}) announce more elements than any file can hold", fmt::join(a.extents, " x ")));
  const auto n = static_cast<std::size_t>(*count);
  if (const auto left = in.bound(); left && n > *left)
    refuse(fmt::format("truncated: the data needs {} bytes but only {} are there", n, *left));
  if (!in.append(a.data, n))
    refuse(fmt::format("truncated: the data needs {} bytes but only {} are there", n, a.data.size()));
  unsigned char extra;
  if (in.read(&extra, 1) > 0) {
    refuse(fmt::format("unexpected bytes after the {} bytes of data that the header announces", n));
  }
  return a;
}

}  // namespace idx
}  // namespace kiln
