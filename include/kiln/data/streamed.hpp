// kiln/data/streamed.hpp — a dataset larger than memory, read row by row.
//
// WHAT IT IS
//   `streamed_dataset`: the samples of a .npy file (float32 or uint8, C
//   order, shape (n, ...)) or an IDX file of unsigned bytes, left on disk;
//   each sample is read with pread(2) when the trainer gathers it, so what
//   is held in memory is the labels (or targets) and one file descriptor,
//   whatever the file's size. A sample source (kiln/data/sample_source.hpp):
//
//     auto train = kiln::streamed_dataset::npy("images.npy", kiln::npy::read_labels("labels.npy"), 1 / 255.f);
//     t.fit(train, epochs{1});
//
//   Why pread and not mmap: a mapping of the whole file takes address space
//   as large as the file, which an address-space limit (RLIMIT_AS, a
//   container's) refuses, and the page cache keeps recently read rows
//   either way. A sample's bytes are contiguous, so one call reads it.
//   uint8 values become floats times `scale` (e.g. 1/255); big-endian
//   float32 data is swapped.
//
// ERRORS
//   kiln::data_error naming the file, when it is opened: not .npy/IDX, gzip
//   (which cannot be read at an offset: decompress it first), a dtype other
//   than float32 or uint8, Fortran order, a size other than the header
//   announces, labels whose count differs from the samples'. A read that
//   fails later (the file shrank or went bad) is a data_error too, which
//   ends fit.
//
// THREAD SAFETY
//   Reads are const and independent (pread has no shared offset).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/idx.hpp>  // kiln::data_error
#include <kiln/data/npy.hpp>
#include <kiln/data/sample_source.hpp>
#include <kiln/detail/npy_header.hpp>

namespace kiln {

class streamed_dataset {
 public:
  /// The samples of `file` (.npy of float32 or uint8, shape (n, ...)), one
  /// label per sample in `labels` (or none: give targets, or predict only).
  static streamed_dataset npy(const std::filesystem::path& file, std::vector<std::uint32_t> labels = {},
                              float scale = 1.f) {
    streamed_dataset s(file, scale);
    const detail::npy_header h = detail::parse_npy_header(
        [&](unsigned char* p, std::size_t n) { return s.read_header(p, n); }, s.failure());
    if (h.dtype.kind == 'f' && h.dtype.size == 4)
      s.element_size_ = 4, s.swap_ = h.dtype.big_endian;
    else if (h.dtype.kind == 'u' && h.dtype.size == 1)
      s.element_size_ = 1;
    else
      s.fail(fmt::format("holds {} (dtype '{}'); a streamed dataset reads float32 or uint8",
                         detail::npy_type_name(h.dtype.kind, h.dtype.size), h.dtype.descr));
    if (h.fortran_order && h.shape.size() > 1) s.fail("is in Fortran order; kiln reads C order");
    s.finish(h.shape, h.data_offset, std::move(labels));
    return s;
  }

  /// The samples of an IDX file of unsigned bytes (extents (n, ...)).
  static streamed_dataset idx(const std::filesystem::path& file, std::vector<std::uint32_t> labels = {},
                              float scale = 1.f) {
    streamed_dataset s(file, scale);
    unsigned char m[4];
    if (s.read_header(m, 4) < 4) s.fail("truncated: shorter than an IDX header");
    if (m[0] != 0 || m[1] != 0) s.fail("not an IDX file (one starts with two zero bytes)");
    if (m[2] != 0x08) s.fail(fmt::format("element type 0x{:02x}; a streamed IDX dataset reads unsigned bytes", m[2]));
    std::vector<std::size_t> extents(m[3]);
    for (auto& e : extents) {
      unsigned char b[4];
      if (s.read_header(b, 4) < 4) s.fail("truncated: the header is cut off");
      e = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
    }
    s.element_size_ = 1;
    s.finish(extents, 4 + 4 * extents.size(), std::move(labels));
    return s;
  }

  /// Real targets instead of labels: target_size per sample.
  streamed_dataset& with_targets(std::vector<float> targets, std::size_t target_size) {
    if (target_size == 0 || targets.size() != samples_ * target_size)
      fail(fmt::format("{} target values for {} samples of {} targets", targets.size(), samples_, target_size));
    targets_ = std::move(targets);
    target_size_ = target_size;
    return *this;
  }

  const std::filesystem::path& file() const noexcept { return file_; }
  std::size_t size() const noexcept { return samples_; }

  // ---- sample_source --------------------------------------------------------
  source_info info() const noexcept {
    return {name_, sample_shape_, samples_, labels_.empty() ? 0 : std::size_t{1}, target_size_};
  }
  void read_features(std::size_t i, const sample_pass&, std::span<float> row) const {
    auto* bytes = reinterpret_cast<unsigned char*>(row.data());
    const std::size_t n = row.size() * element_size_;
    if (read_at(bytes, n, data_offset_ + std::uint64_t{i} * n) < n)
      fail(fmt::format("sample {} could not be read: the file is shorter than when it was opened", i));
    if (element_size_ == 1) {
      // In place, from the end: float k takes bytes 4k…4k+3, read already for k ≥ 1.
      for (std::size_t k = row.size(); k-- > 0;) {
        const unsigned char v = bytes[k];
        row[k] = static_cast<float>(v) * scale_;
      }
    } else {
      if (swap_)
        for (std::size_t k = 0; k < row.size(); ++k) std::reverse(bytes + 4 * k, bytes + 4 * k + 4);
      if (scale_ != 1.f)
        for (float& v : row) v *= scale_;
    }
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const { out[0] = labels_[i]; }
  void read_targets(std::size_t i, std::span<float> out) const {
    std::copy_n(targets_.begin() + static_cast<std::ptrdiff_t>(i * target_size_), out.size(), out.begin());
  }

 private:
  streamed_dataset(const std::filesystem::path& file, float scale)
      : file_(file), name_(file.filename().string()), scale_(scale) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
      fail(std::filesystem::exists(file, ec) ? "not a regular file" : "no such file");
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(fmt::format("cannot be opened for reading: {}", std::strerror(errno)));
    fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
      ::close(*p);
      delete p;
    });
    size_ = std::filesystem::file_size(file, ec);
    unsigned char magic[2];
    if (read_at(magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
      fail("is gzip-compressed, which cannot be read at an offset: decompress it to stream it");
  }

  [[noreturn]] void fail(const std::string& what) const { throw data_error(file_, what); }
  std::function<void(const std::string&)> failure() const {
    return [f = file_](const std::string& what) { throw data_error(f, what); };
  }

  /// Up to n bytes at offset `pos`; fewer only at the end of the file.
  std::size_t read_at(unsigned char* into, std::size_t n, std::uint64_t pos) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(*fd_, into + done, n - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(fmt::format("cannot be read: {}", std::strerror(errno)));
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  /// The header, read in order from the start.
  std::size_t read_header(unsigned char* into, std::size_t n) {
    const std::size_t got = read_at(into, n, header_read_);
    header_read_ += got;
    return got;
  }

  /// Shape (n, ...) of data at `offset`: checks the size, keeps the labels.
  void finish(const std::vector<std::size_t>& shape, std::uint64_t offset, std::vector<std::uint32_t> labels) {
    if (shape.empty() || shape[0] == 0) fail(fmt::format("shape ({}) holds no samples", fmt::join(shape, ", ")));
    const auto count = detail::checked_product(shape);
    std::uint64_t bytes = 0;
    if (!count || __builtin_mul_overflow(*count, std::uint64_t{element_size_}, &bytes))
      fail(fmt::format("the shape ({}) announces more elements than any file can hold", fmt::join(shape, ", ")));
    if (offset + bytes != size_)
      fail(fmt::format("the header announces {} data bytes after {} of header, but the file has {} bytes ({})", bytes,
                       offset, size_, offset + bytes > size_ ? "truncated" : "bytes after the data"));
    samples_ = shape[0];
    sample_shape_ = shape.size() == 1 ? std::vector<std::size_t>{1} : std::vector<std::size_t>(shape.begin() + 1, shape.end());
    data_offset_ = offset;
    if (!labels.empty() && labels.size() != samples_)
      fail(fmt::format("{} labels given for its {} samples", labels.size(), samples_));
    labels_ = std::move(labels);
  }

  std::filesystem::path file_;
  std::string name_;
  float scale_ = 1.f;
  std::shared_ptr<const int> fd_;
  std::uint64_t size_ = 0, header_read_ = 0, data_offset_ = 0;
  std::size_t element_size_ = 1, samples_ = 0, target_size_ = 0;
  bool swap_ = false;
  std::vector<std::size_t> sample_shape_;
  std::vector<std::uint32_t> labels_;
  std::vector<float> targets_;
};

static_assert(sample_source<streamed_dataset>);

}  // namespace kiln
