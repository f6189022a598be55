// kiln/detail/npy_header.hpp — the header of a NumPy .npy array.
//
// The format (NumPy's format.py): the magic "\x93NUMPY", a major and minor
// version (1.0: a 2-byte little-endian header length; 2.0 and 3.0: 4
// bytes), then the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1797, 64), }
// padded with spaces and a newline; then the elements. This parses exactly
// that literal: the three keys once each, a simple dtype ('<f4', '|u1',
// '>i8', ...), True or False, a tuple of whole numbers. A header longer
// than 64 KiB is refused before it is read (NumPy itself refuses 10,000
// bytes unless told otherwise). Faults go through `fail(what)`, which throws.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/detail/input_file.hpp>  // checked_product

namespace kiln::detail {

struct npy_dtype {
  char kind = 'f';         ///< 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  std::size_t size = 4;    ///< bytes per element
  bool big_endian = false;
  std::string descr;       ///< as written, for messages
};

struct npy_header {
  npy_dtype dtype;
  bool fortran_order = false;
  std::vector<std::size_t> shape;
  std::uint64_t data_offset = 0;  ///< bytes before the first element
  std::uint64_t count = 0;        ///< elements
  std::uint64_t bytes = 0;        ///< count × dtype.size
};

inline constexpr std::size_t npy_max_header = std::size_t{1} << 16;

/// What a dtype is called in NumPy's words, for messages.
inline std::string npy_type_name(char kind, std::size_t size) {
  switch (kind) {
    case 'f': return fmt::format("float{}", size * 8);
    case 'i': return fmt::format("int{}", size * 8);
    case 'u': return fmt::format("uint{}", size * 8);
    case 'b': return "bool";
    default: return fmt::format("'{}'", kind);
  }
}

/// Parses the header through `read(into, n) -> bytes read`.
inline npy_header parse_npy_header(const std::function<std::size_t(unsigned char*, std::size_t)>& read,
                                   const std::function<void(const std::string&)>& fail) {
  unsigned char pre[12];
  if (read(pre, 8) < 8) fail("truncated: shorter than the 8 bytes of a .npy preamble");
  if (std::string_view(reinterpret_cast<const char*>(pre), 6) != "\x93NUMPY")
    fail("not a .npy file (it does not start with \\x93NUMPY)");
  const unsigned major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(fmt::format(".npy format version {}.{} is not supported (kiln reads 1.0, 2.0 and 3.0)", major, minor));
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (read(pre + 8, len_bytes) < len_bytes) fail("truncated: the header length is cut off");
  std::uint64_t len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) len |= std::uint64_t{pre[8 + i]} << (8 * i);
  if (len > npy_max_header)
    fail(fmt::format("the header announces {} bytes; kiln reads headers of at most {}", len, npy_max_header));
  std::string text(static_cast<std::size_t>(len), '\0');
  if (read(reinterpret_cast<unsigned char*>(text.data()), text.size()) < text.size())
    fail(fmt::format("truncated: the header needs {} bytes", len));

  npy_header h;
  h.data_offset = 8 + len_bytes + len;
  std::size_t at = 0;
  auto bad = [&](std::string_view what) {
    fail(fmt::format("malformed header at byte {}: {} (the header: {})", at, what,
                     text.size() > 200 ? text.substr(0, 200) + "..." : text));
  };
  auto skip = [&] {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n')) ++at;
  };
  auto expect = [&](char c) {
    skip();
    if (at >= text.size() || text[at] != c) bad(fmt::format("'{}' expected", c));
    ++at;
  };
  auto peek = [&](char c) {
    skip();
    return at < text.size() && text[at] == c;
  };
  auto string = [&]() -> std::string {
    skip();
    if (at >= text.size() || (text[at] != '\'' && text[at] != '"')) bad("a quoted string expected");
    const char q = text[at++];
    const std::size_t end = text.find(q, at);
    if (end == std::string::npos) bad("a string is not closed");
    std::string s = text.substr(at, end - at);
    at = end + 1;
    return s;
  };
  auto number = [&]() -> std::size_t {
    skip();
    std::uint64_t v = 0;
    const std::size_t from = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (__builtin_mul_overflow(v, std::uint64_t{10}, &v) ||
          __builtin_add_overflow(v, std::uint64_t(text[at] - '0'), &v) ||
          v > std::numeric_limits<std::size_t>::max())
        bad("an extent too large");
      ++at;
    }
    if (at == from) bad("a whole number expected");
    if (at < text.size() && text[at] == 'L') ++at;  // Python 2's long
    return static_cast<std::size_t>(v);
  };

  bool seen_descr = false, seen_order = false, seen_shape = false;
  expect('{');
  while (!peek('}')) {
    const std::string key = string();
    expect(':');
    if (key == "descr" && !seen_descr) {
      seen_descr = true;
      if (peek('[')) bad("a structured dtype (a list of fields); kiln reads arrays of one number type");
      h.dtype.descr = string();
      const std::string& d = h.dtype.descr;
      std::size_t size = 0;
      bool digits = d.size() >= 3;
      for (std::size_t i = 2; i < d.size(); ++i) digits = digits && d[i] >= '0' && d[i] <= '9';
      if (digits) size = static_cast<std::size_t>(std::stoul(d.substr(2, 3)));
      if (!digits || d.size() > 4 || std::string_view("<>|=").find(d[0]) == std::string_view::npos ||
          std::string_view("fiub").find(d[1]) == std::string_view::npos ||
          !(size == 1 || size == 2 || size == 4 || size == 8) || (d[1] == 'f' && size < 4))
        fail(fmt::format("dtype '{}' is not supported (kiln reads float32/64, int and uint of 8 to 64 bits, bool)", d));
      h.dtype.kind = d[1];
      h.dtype.size = size;
      h.dtype.big_endian = d[0] == '>' && size > 1;
    } else if (key == "fortran_order" && !seen_order) {
      seen_order = true;
      skip();
      if (text.compare(at, 4, "True") == 0) {
        h.fortran_order = true;
        at += 4;
      } else if (text.compare(at, 5, "False") == 0) {
        at += 5;
      } else {
        bad("True or False expected");
      }
    } else if (key == "shape" && !seen_shape) {
      seen_shape = true;
      expect('(');
      while (!peek(')')) {
        if (h.shape.size() >= 32) bad("more than 32 extents");
        h.shape.push_back(number());
        if (!peek(')')) expect(',');
      }
      expect(')');
    } else {
      bad(fmt::format("the key '{}' is unknown or given twice", key));
    }
    if (!peek('}')) expect(',');
  }
  expect('}');
  skip();
  if (at != text.size()) bad("bytes after the dict");
  if (!seen_descr || !seen_order || !seen_shape) bad("'descr', 'fortran_order' and 'shape' must all be given");
  const auto count = checked_product(h.shape);
  std::uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, std::uint64_t{h.dtype.size}, &bytes))
    fail(fmt::format("the shape ({}) announces more elements than any file can hold", fmt::join(h.shape, ", ")));
  h.count = *count;
  h.bytes = bytes;
  return h;
}

}  // namespace kiln::detail
