// kiln/data/idx.hpp — the IDX file format (MNIST and its relatives).
//
// WHAT IT READS
//   An IDX file, plain or gzip-compressed (zlib reads both): two zero bytes,
//   a type byte, a rank byte, `rank` big-endian 32-bit extents, then the
//   elements in row-major order. kiln reads unsigned-byte files (type 0x08),
//   which is what MNIST-style data sets use.
//
// ERRORS
//   Everything wrong with a file throws kiln::data_error, whose message names
//   the file and says what is wrong: missing or unreadable, not gzip/IDX
//   (wrong magic number), an element type other than unsigned byte, fewer
//   bytes than the extents promise (truncated), or bytes left after the data.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

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
inline array read(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw data_error(file, std::filesystem::exists(file, ec) ? "not a regular file" : "no such file");
  }
  struct gz_close {
    void operator()(gzFile f) const noexcept { gzclose(f); }
  };
  std::unique_ptr<gzFile_s, gz_close> gz(gzopen(file.c_str(), "rb"));
  if (!gz) throw data_error(file, "cannot be opened for reading");

  auto read_exact = [&](void* into, std::size_t n, const char* what) {
    auto* p = static_cast<unsigned char*>(into);
    std::size_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
      const int r = gzread(gz.get(), p + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(gz.get(), &code);
        throw data_error(file, fmt::format("corrupt compressed data while reading the {} ({})", what, msg));
      }
      if (r == 0) {
        throw data_error(file, fmt::format("truncated: the {} needs {} bytes but only {} are there", what, n, got));
      }
      got += static_cast<std::size_t>(r);
    }
  };

  unsigned char magic[4];
  read_exact(magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0) {
    throw data_error(file, fmt::format("wrong magic number 0x{:02x}{:02x}{:02x}{:02x}: not an IDX file (one starts "
                                       "with two zero bytes)",
                                       magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != 0x08) {
    throw data_error(file,
                     fmt::format("element type 0x{:02x} is not supported (kiln reads unsigned bytes, 0x08)", magic[2]));
  }
  const std::size_t rank = magic[3];
  if (rank == 0) throw data_error(file, "an IDX array of rank 0 holds nothing");
  array a;
  a.extents.resize(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    unsigned char b[4];
    read_exact(b, 4, "header");
    a.extents[i] = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
  }
  a.data.resize(a.size());
  read_exact(a.data.data(), a.data.size(), "data");
  unsigned char extra;
  if (gzread(gz.get(), &extra, 1) > 0) {
    throw data_error(
        file, fmt::format("unexpected bytes after the {} bytes of data that the header announces", a.data.size()));
  }
  return a;
}

}  // namespace idx
}  // namespace kiln
