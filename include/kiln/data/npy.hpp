// kiln/data/npy.hpp — NumPy .npy arrays (plain or gzip) in, as arrays or a dataset.
//
// WHAT IT READS
//   What numpy.save writes: format 1.0, 2.0 or 3.0, a simple dtype (float32,
//   float64, int/uint of 8 to 64 bits, bool) in either byte order (big-endian
//   data is swapped), C order. kiln/detail/npy_header.hpp parses the header.
//
//     auto x = kiln::npy::read<float>("x.npy");            // shape and values; the dtype must be float32
//     kiln::dataset d = kiln::npy::load("x.npy", "y.npy");  // features (any number type) + labels (integers)
//
// ERRORS
//   kiln::data_error naming the file: not .npy, an unknown version, a header
//   over 64 KiB or not the dict NumPy writes, a structured or unsupported
//   dtype, fortran_order True for more than one dimension (C order is
//   needed: numpy.ascontiguousarray), a dtype other than the one asked for
//   (naming both), a shape whose size overflows, fewer or more data bytes
//   than the shape says, a feature that is not finite as float32, a label
//   that is negative or over 2^32 − 1 (naming its index), labels whose
//   count does not match the features'; and every gzip fault.
//
// MEMORY
//   A plain file's size bounds the announced data before it is allocated;
//   gzip data is taken as it arrives. Fuzzed (tests/fuzz/npy.cpp).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/idx.hpp>  // kiln::data_error
#include <kiln/detail/input_file.hpp>
#include <kiln/detail/npy_header.hpp>

namespace kiln::npy {

/// An array as read: its shape and its elements in row-major order.
template <class T>
struct array {
  std::vector<std::size_t> shape;
  std::vector<T> values;
};

namespace detail {
using kiln::detail::npy_dtype;
using kiln::detail::npy_header;

/// A .npy file's header and data bytes, as stored.
struct raw {
  npy_header header;
  std::vector<std::uint8_t> data;
};

/// Bytes already in memory, read like an input_file (an .npz entry).
class memory_input {
 public:
  explicit memory_input(const std::vector<std::uint8_t>& b) : b_(b) {}
  std::optional<std::uint64_t> bound() const noexcept { return b_.size() - at_; }
  std::size_t read(unsigned char* into, std::size_t n) {
    n = std::min(n, b_.size() - at_);
    if (n != 0) std::memcpy(into, b_.data() + at_, n);  // (an empty entry's data() may be null)
    at_ += n;
    return n;
  }
  bool append(std::vector<std::uint8_t>& v, std::size_t n) {
    const std::size_t k = std::min(n - v.size(), b_.size() - at_);
    v.insert(v.end(), b_.begin() + static_cast<std::ptrdiff_t>(at_), b_.begin() + static_cast<std::ptrdiff_t>(at_ + k));
    at_ += k;
    return v.size() == n;
  }
  void check_rest() {}

 private:
  const std::vector<std::uint8_t>& b_;
  std::size_t at_ = 0;
};

/// Reads header and data from `in` (an input_file or memory_input).
template <class Input>
raw read_raw(Input& in, const std::function<void(const std::string&)>& fail) {
  auto refuse = [&](const std::string& what) {
    in.check_rest();
    fail(what);
  };
  raw r;
  r.header = kiln::detail::parse_npy_header([&](unsigned char* p, std::size_t n) { return in.read(p, n); }, refuse);
  const npy_header& h = r.header;
  if (h.fortran_order && std::count_if(h.shape.begin(), h.shape.end(), [](std::size_t e) { return e > 1; }) > 1)
    refuse(fmt::format("the array of shape ({}) is in Fortran order; kiln reads C order "
                       "(save numpy.ascontiguousarray(a))",
                       fmt::join(h.shape, ", ")));
  if (h.bytes > std::numeric_limits<std::size_t>::max() / 2 ||
      (in.bound() && h.bytes > *in.bound()))
    refuse(fmt::format("truncated: the shape ({}) needs {} data bytes but only {} are there",
                       fmt::join(h.shape, ", "), h.bytes, in.bound() ? *in.bound() : 0));
  if (!in.append(r.data, static_cast<std::size_t>(h.bytes)))
    refuse(fmt::format("truncated: the shape ({}) needs {} data bytes but only {} are there", fmt::join(h.shape, ", "),
                       h.bytes, r.data.size()));
  unsigned char extra;
  if (in.read(&extra, 1) > 0) refuse(fmt::format("bytes after the {} data bytes the shape announces", h.bytes));
  return r;
}

template <class S>
S element(const std::uint8_t* p, bool swap) noexcept {
  unsigned char b[sizeof(S)];
  std::memcpy(b, p, sizeof(S));
  if (swap) std::reverse(b, b + sizeof(S));
  S v;
  std::memcpy(&v, b, sizeof(S));
  return v;
}

/// Calls f(i, value) for every element, value in the dtype's own C++ type.
template <class F>
void for_each_element(const raw& r, F&& f) {
  const npy_dtype& d = r.header.dtype;
  auto run = [&]<class S>(S*) {
    for (std::size_t i = 0; i < r.header.count; ++i) f(i, element<S>(r.data.data() + i * sizeof(S), d.big_endian));
  };
  switch (d.kind == 'b' ? 100 : d.kind * 16 + static_cast<int>(d.size)) {
    case 'f' * 16 + 4: return run(static_cast<float*>(nullptr));
    case 'f' * 16 + 8: return run(static_cast<double*>(nullptr));
    case 'i' * 16 + 1: return run(static_cast<std::int8_t*>(nullptr));
    case 'i' * 16 + 2: return run(static_cast<std::int16_t*>(nullptr));
    case 'i' * 16 + 4: return run(static_cast<std::int32_t*>(nullptr));
    case 'i' * 16 + 8: return run(static_cast<std::int64_t*>(nullptr));
    case 'u' * 16 + 1: return run(static_cast<std::uint8_t*>(nullptr));
    case 'u' * 16 + 2: return run(static_cast<std::uint16_t*>(nullptr));
    case 'u' * 16 + 4: return run(static_cast<std::uint32_t*>(nullptr));
    case 'u' * 16 + 8: return run(static_cast<std::uint64_t*>(nullptr));
    default: return run(static_cast<std::uint8_t*>(nullptr));  // bool: one byte, 0 or 1
  }
}

template <class T>
constexpr char kind_of() {
  return std::is_same_v<T, bool> ? 'b' : std::is_floating_point_v<T> ? 'f' : std::is_signed_v<T> ? 'i' : 'u';
}

/// The elements as T, which must be the file's dtype.
template <class T>
array<T> as(const raw& r, const std::function<void(const std::string&)>& fail) {
  const npy_dtype& d = r.header.dtype;
  if (d.kind != kind_of<T>() || d.size != sizeof(T))
    fail(fmt::format("holds {} (dtype '{}'), but {} was asked for", kiln::detail::npy_type_name(d.kind, d.size),
                     d.descr, kiln::detail::npy_type_name(kind_of<T>(), sizeof(T))));
  array<T> a{r.header.shape, std::vector<T>(static_cast<std::size_t>(r.header.count))};
  for_each_element(r, [&](std::size_t i, auto v) { a.values[i] = static_cast<T>(v); });
  return a;
}

/// Features as float from any number type; each must be finite as float.
inline std::vector<float> features(const raw& r, const std::function<void(const std::string&)>& fail) {
  std::vector<float> x(static_cast<std::size_t>(r.header.count));
  for_each_element(r, [&](std::size_t i, auto v) {
    x[i] = static_cast<float>(v);
    if (!std::isfinite(x[i])) fail(fmt::format("element {} ({}) is not a finite float32", i, static_cast<double>(v)));
  });
  return x;
}

/// Labels as std::uint32_t from any integer type, each in range.
inline std::vector<std::uint32_t> labels(const raw& r, const std::function<void(const std::string&)>& fail) {
  if (r.header.dtype.kind == 'f')
    fail(fmt::format("labels must be integers, but the file holds {} (dtype '{}')",
                     kiln::detail::npy_type_name('f', r.header.dtype.size), r.header.dtype.descr));
  std::vector<std::uint32_t> y(static_cast<std::size_t>(r.header.count));
  for_each_element(r, [&](std::size_t i, auto v) {
    bool negative = false;
    if constexpr (std::is_signed_v<decltype(v)>) negative = v < 0;
    if (negative || static_cast<std::uint64_t>(v) > std::numeric_limits<std::uint32_t>::max())
      fail(fmt::format("label {} is {}: a label must be from 0 to 4294967295", i, static_cast<std::int64_t>(v)));
    y[i] = static_cast<std::uint32_t>(v);
  });
  return y;
}

/// Features (n, ...) and labels (n) or (n, k) as a dataset.
inline dataset make_dataset(std::string name, const raw& x, std::vector<float> features_,
                            std::vector<std::uint32_t> labels_, const raw* y,
                            const std::function<void(const std::string&)>& fail_x,
                            const std::function<void(const std::string&)>& fail_y) {
  const auto& s = x.header.shape;
  if (s.empty() || s[0] == 0) fail_x(fmt::format("features of shape ({}) hold no samples", fmt::join(s, ", ")));
  dataset d;
  d.name = std::move(name);
  d.sample_shape = s.size() == 1 ? std::vector<std::size_t>{1} : std::vector<std::size_t>(s.begin() + 1, s.end());
  d.features = std::move(features_);
  if (y) {
    const auto& t = y->header.shape;
    if (t.empty() || t[0] != s[0] || t.size() > 2)
      fail_y(fmt::format("labels of shape ({}) do not go with {} samples: (n) or (n, labels per sample) is needed",
                         fmt::join(t, ", "), s[0]));
    d.labels = std::move(labels_);
  }
  d.validate();
  return d;
}

}  // namespace detail

/// Reads `file` (.npy, plain or gzip) as elements of type T, which must be
/// its dtype (float for float32, std::uint8_t for uint8, ...).
template <class T>
array<T> read(const std::filesystem::path& file) {
  const auto fail = [&](const std::string& what) { throw data_error(file, what); };
  kiln::detail::input_file in(file, fail);
  return detail::as<T>(detail::read_raw(in, fail), fail);
}

/// Class labels from `file` (.npy of any integer type, shape (n)), each
/// from 0 to 2^32 − 1: for a streamed_dataset, say.
inline std::vector<std::uint32_t> read_labels(const std::filesystem::path& file) {
  const auto fail = [&](const std::string& what) { throw data_error(file, what); };
  kiln::detail::input_file in(file, fail);
  const detail::raw r = detail::read_raw(in, fail);
  if (r.header.shape.size() != 1) fail(fmt::format("labels of shape ({}): (n) is needed", fmt::join(r.header.shape, ", ")));
  return detail::labels(r, fail);
}

/// A dataset from a features file (n, ...) of any number type, converted
/// to float, and optionally a labels file (n) or (n, k) of integers.
inline dataset load(const std::filesystem::path& features, const std::filesystem::path& labels = {}) {
  const auto fail_x = [&](const std::string& what) { throw data_error(features, what); };
  const auto fail_y = [&](const std::string& what) { throw data_error(labels, what); };
  kiln::detail::input_file in(features, fail_x);
  const detail::raw x = detail::read_raw(in, fail_x);
  std::optional<detail::raw> y;
  if (!labels.empty()) {
    kiln::detail::input_file lin(labels, fail_y);
    y = detail::read_raw(lin, fail_y);
  }
  return detail::make_dataset(features.stem().string(), x, detail::features(x, fail_x),
                              y ? detail::labels(*y, fail_y) : std::vector<std::uint32_t>{}, y ? &*y : nullptr, fail_x,
                              fail_y);
}

}  // namespace kiln::npy
