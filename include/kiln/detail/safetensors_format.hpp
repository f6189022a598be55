// kiln/detail/safetensors_format.hpp — a safetensors file's bytes: its
// header written, and read and checked before a byte of it is trusted
// (against no model yet: kiln/safetensors.hpp does that).
//
// THE FORMAT (https://github.com/huggingface/safetensors)
//   u64 N (little-endian) · N bytes of JSON (UTF-8, begins with '{', may end
//   in spaces) · the data: every tensor's bytes, little-endian, row-major.
//   The JSON maps each tensor's name to {"dtype": "F32", "shape": [2, 3],
//   "data_offsets": [BEGIN, END]} (END - BEGIN bytes from the start of the
//   data), and "__metadata__" to an object of strings.
//
// WHAT IS CHECKED (each a kiln::checkpoint_error naming the file and what)
//   N: 8 bytes there, N ≤ 100,000,000 (the reference implementation's cap)
//   and within the file; the JSON well-formed, an object whose values are
//   tensor entries, each with exactly those three fields, a known dtype,
//   at most 64 dimensions, offsets that span exactly shape × dtype bytes;
//   names unique; the tensors tile the data exactly (no overlap, no hole, no
//   byte left over: the format's rule against polyglot files). Memory: the
//   entries' names and shapes, under 3 times the header's size for a header
//   of 300,000 empty tensors, the worst case (a test holds it to 4 times:
//   the JSON is read as events, never built into a tree, which would take
//   10 times; nesting stops at depth 3).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <kiln/checkpoint_error.hpp>

namespace kiln::detail {

static_assert(std::endian::native == std::endian::little, "kiln reads and writes safetensors on little-endian machines");

/// The U at `p`, little-endian as the format stores it (and as this machine does).
template <class U>
U load_le(const unsigned char* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The largest header kiln reads (as the safetensors reference implementation).
inline constexpr std::uint64_t safetensors_header_cap = 100'000'000;
/// The most dimensions a tensor of a file may have.
inline constexpr std::size_t safetensors_rank_cap = 64;

/// The dtypes the format defines, and their sizes in bytes.
inline constexpr std::array<std::pair<std::string_view, std::size_t>, 15> safetensors_dtypes{{{"BOOL", 1},
                                                                                             {"U8", 1},
                                                                                             {"I8", 1},
                                                                                             {"F8_E5M2", 1},
                                                                                             {"F8_E4M3", 1},
                                                                                             {"I16", 2},
                                                                                             {"U16", 2},
                                                                                             {"F16", 2},
                                                                                             {"BF16", 2},
                                                                                             {"I32", 4},
                                                                                             {"U32", 4},
                                                                                             {"F32", 4},
                                                                                             {"I64", 8},
                                                                                             {"U64", 8},
                                                                                             {"F64", 8}}};

/// Bytes per element of `dtype`, 0 for a name the format does not define.
inline std::size_t safetensors_dtype_size(std::string_view dtype) {
  for (const auto& [name, size] : safetensors_dtypes)
    if (name == dtype) return size;
  return 0;
}

/// `s` as messages show it: printable ASCII, other bytes as \xNN, cut at 200.
inline std::string printable(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    if (out.size() >= 200) return out + "...";
    const auto u = static_cast<unsigned char>(ch);
    out += u >= 0x20 && u < 0x7f && ch != '\'' && ch != '\\' ? std::string(1, ch) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

/// "[256, 784]"
inline std::string shape_text(std::span<const std::uint64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// One tensor as a file's header describes it.
struct safetensors_entry {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;  ///< bytes, from the start of the data
};

/// A safetensors file's header, checked, and its data.
struct safetensors_contents {
  std::vector<safetensors_entry> entries;  ///< in the header's order
  std::vector<std::size_t> by_name;        ///< entries' indices, sorted by name
  std::map<std::string, std::string> metadata;
  std::span<const unsigned char> data;

  /// The entry named `name`, or nullptr.
  const safetensors_entry* find(std::string_view name) const {
    const auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                                     [&](std::size_t i, std::string_view n) { return entries[i].name < n; });
    return it != by_name.end() && entries[*it].name == name ? &entries[*it] : nullptr;
  }
};

/// Reads the header's JSON as events (nlohmann's SAX interface) into entries,
/// refusing anything but the format's shape as soon as it appears.
class safetensors_header_reader {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  bool null() { return wrong_value("null"); }
  bool boolean(bool) { return wrong_value("true or false"); }
  bool number_integer(number_integer_t v) { return wrong_value(fmt::format("the negative number {}", v)); }
  bool number_float(number_float_t, const string_t& text) {
    return wrong_value(fmt::format("the number {} (not an integer below 2^64)", printable(text)));
  }
  bool binary(binary_t&) { return wrong_value("binary data"); }
  bool number_unsigned(number_unsigned_t v) {
    if (depth_ != 3 || metadata_) return wrong_value(fmt::format("the number {}", v));
    auto& list = field_ == "shape" ? entry_.shape : offsets_;
    if (list.size() >= (field_ == "shape" ? safetensors_rank_cap : 2))
      return fail(fmt::format("{}: '{}' has more than {} values", where(), field_,
                              field_ == "shape" ? safetensors_rank_cap : 2));
    list.push_back(v);
    return true;
  }
  bool string(string_t& s) {
    if (depth_ == 2 && metadata_) {
      metadata_values_[key_] = std::move(s);
      return true;
    }
    if (depth_ != 2 || field_ != "dtype") return wrong_value(fmt::format("the string '{}'", printable(s)));
    if (safetensors_dtype_size(s) == 0)
      return fail(fmt::format("{}: dtype '{}' is not one the safetensors format defines", where(), printable(s)));
    entry_.dtype = std::move(s);
    return true;
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) return ++depth_, true;
    if (depth_ != 1) return wrong_value("an object");
    ++depth_;
    if (!metadata_) entry_ = safetensors_entry{key_, {}, {}, 0, 0}, offsets_.clear(), fields_.clear();
    return true;
  }
  bool key(string_t& k) {
    if (depth_ == 1) {
      // (a tensor's name twice is found once all are read, by sorting)
      metadata_ = k == "__metadata__";
      if (metadata_ && std::exchange(seen_metadata_, true)) return fail("the name '__metadata__' appears twice");
      key_ = std::move(k);
      return true;
    }
    if (metadata_) return key_ = std::move(k), true;  // (duplicates: the last one wins, as in JSON readers)
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      return fail(fmt::format("{}: unknown field '{}' (a tensor has dtype, shape and data_offsets)", where(),
                              printable(k)));
    if (!fields_.insert(k).second) return fail(fmt::format("{}: field '{}' appears twice", where(), k));
    field_ = std::move(k);
    return true;
  }
  bool end_object() {
    if (--depth_ != 1) return true;  // (the whole header, or metadata)
    if (metadata_) return metadata_ = false, true;
    if (fields_.size() != 3)
      return fail(fmt::format("{}: lacks {}", where(),
                              !fields_.count("dtype")   ? "its dtype"
                              : !fields_.count("shape") ? "its shape"
                                                        : "its data_offsets"));
    entry_.begin = offsets_[0];
    entry_.end = offsets_[1];
    entries_.push_back(std::move(entry_));
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ != 2 || metadata_ || (field_ != "shape" && field_ != "data_offsets")) return wrong_value("an array");
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    if (field_ == "data_offsets" && offsets_.size() != 2)
      return fail(fmt::format("{}: data_offsets has {} values, not 2 ([begin, end])", where(), offsets_.size()));
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (const auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    return fail(fmt::format("the header is not well-formed JSON (at byte {} of it): {}", position, printable(what)));
  }

  const std::string& error() const { return error_; }
  std::vector<safetensors_entry>& entries() { return entries_; }
  std::map<std::string, std::string>& metadata() { return metadata_values_; }

 private:
  std::string where() const { return fmt::format("tensor '{}'", printable(entry_.name)); }
  bool fail(std::string what) {
    error_ = std::move(what);
    return false;
  }
  bool wrong_value(const std::string& what) {
    if (depth_ == 0) return fail(fmt::format("the header is {}, not a JSON object", what));
    if (depth_ == 1)
      return fail(fmt::format("'{}' is {}; each entry of the header is an object", printable(key_), what));
    if (metadata_)
      return fail(fmt::format("__metadata__ '{}' is {}; metadata values are strings", printable(key_), what));
    return fail(fmt::format("{}: {} where '{}' expects {}", where(), what, field_,
                            field_ == "dtype" ? "a string" : "an array of integers from 0 to 2^64 - 1"));
  }

  int depth_ = 0;
  bool metadata_ = false;
  std::string key_, field_, error_;
  bool seen_metadata_ = false;
  std::set<std::string> fields_;
  safetensors_entry entry_;
  std::vector<std::uint64_t> offsets_;
  std::vector<safetensors_entry> entries_;
  std::map<std::string, std::string> metadata_values_;
};

/// Checks `bytes`, the whole of safetensors `file`: the header length, the
/// JSON, every entry, and that the entries tile the data. Throws
/// kiln::checkpoint_error (not_a_checkpoint, truncated or corrupted).
inline safetensors_contents parse_safetensors(std::span<const unsigned char> bytes, const std::filesystem::path& file) {
  auto refuse = [&](checkpoint_fault fault, const std::string& what) { throw checkpoint_error(fault, file, what); };
  if (bytes.size() < 8)
    refuse(checkpoint_fault::truncated,
           fmt::format("truncated: {} bytes, fewer than the 8 of a safetensors header length", bytes.size()));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > safetensors_header_cap)
    refuse(checkpoint_fault::not_a_checkpoint,
           fmt::format("not a safetensors file: its first 8 bytes announce a header of {} bytes, beyond the {} any "
                       "safetensors file has",
                       n, safetensors_header_cap));
  if (n > bytes.size() - 8)
    refuse(checkpoint_fault::truncated,
           fmt::format("truncated: its header announces {} bytes of JSON, but {} bytes follow the length", n,
                       bytes.size() - 8));
  if (n < 2 || bytes[8] != '{')
    refuse(checkpoint_fault::not_a_checkpoint,
           fmt::format("not a safetensors file: the header ({} bytes) does not begin with '{{'", n));
  const auto header = bytes.subspan(8, static_cast<std::size_t>(n));
  safetensors_header_reader reader;
  {  // Room for every entry at once (one per "data_offsets" the header holds,
     // escaped spellings aside): no vector growth doubling the peak.
    constexpr std::string_view field = "\"data_offsets\"";
    const std::string_view text(reinterpret_cast<const char*>(header.data()), header.size());
    std::size_t count = 0;
    for (std::size_t at = text.find(field); at != std::string_view::npos; at = text.find(field, at + field.size()))
      ++count;
    reader.entries().reserve(count);
  }
  if (!nlohmann::json::sax_parse(header.begin(), header.end(), &reader) || !reader.error().empty())
    refuse(checkpoint_fault::corrupted, "corrupted: " + reader.error());

  safetensors_contents c;
  c.entries = std::move(reader.entries());
  c.metadata = std::move(reader.metadata());
  c.data = bytes.subspan(8 + static_cast<std::size_t>(n));
  c.by_name.resize(c.entries.size());
  std::iota(c.by_name.begin(), c.by_name.end(), std::size_t{0});
  std::sort(c.by_name.begin(), c.by_name.end(),
            [&](std::size_t a, std::size_t b) { return c.entries[a].name < c.entries[b].name; });
  for (std::size_t k = 1; k < c.by_name.size(); ++k)
    if (const auto& name = c.entries[c.by_name[k]].name; name == c.entries[c.by_name[k - 1]].name)
      refuse(checkpoint_fault::corrupted, fmt::format("corrupted: the name '{}' appears twice", printable(name)));
  for (const auto& e : c.entries) {
    std::uint64_t size = safetensors_dtype_size(e.dtype);
    for (const auto d : e.shape)
      if (__builtin_mul_overflow(size, d, &size))
        refuse(checkpoint_fault::corrupted,
               fmt::format("corrupted: tensor '{}' of shape {} has more bytes than 2^64", printable(e.name),
                           shape_text(e.shape)));
    if (e.begin > e.end || e.end - e.begin != size)
      refuse(checkpoint_fault::corrupted,
             fmt::format("corrupted: tensor '{}' ({} {}: {} bytes) has data_offsets [{}, {}]", printable(e.name),
                         e.dtype, shape_text(e.shape), size, e.begin, e.end));
  }
  // The tensors tile the data: sorted by where they begin, each begins where
  // the one before ends, the first at 0, the last ends at the data's end.
  std::vector<std::size_t> order(c.entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(c.entries[a].begin, c.entries[a].end) < std::pair(c.entries[b].begin, c.entries[b].end);
  });
  std::uint64_t at = 0;
  const safetensors_entry* before = nullptr;
  for (const std::size_t i : order) {
    const auto& e = c.entries[i];
    if (e.begin < at)
      refuse(checkpoint_fault::corrupted, fmt::format("corrupted: tensor '{}' (bytes {} to {}) overlaps tensor '{}' "
                                                      "(bytes {} to {})",
                                                      printable(e.name), e.begin, e.end, printable(before->name),
                                                      before->begin, before->end));
    if (e.begin > at)
      refuse(checkpoint_fault::corrupted,
             fmt::format("corrupted: bytes {} to {} of the data belong to no tensor (before tensor '{}')", at,
                         e.begin, printable(e.name)));
    at = e.end;
    before = &e;
  }
  if (at > c.data.size())
    refuse(checkpoint_fault::truncated,
           fmt::format("truncated: tensor '{}' ends at byte {} of the data, but the file holds {} bytes of data",
                       printable(before->name), at, c.data.size()));
  if (at < c.data.size())
    refuse(checkpoint_fault::corrupted,
           fmt::format("corrupted: {} bytes after the last tensor's data belong to no tensor", c.data.size() - at));
  return c;
}

/// A tensor to write: its name, dtype, shape and byte count.
struct safetensors_out {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t bytes = 0;
};

/// The 8-byte length and the JSON header of a file holding `tensors` one
/// after another in this order, with `metadata` (its order kept); padded
/// with spaces so that the data begins at a multiple of 8 bytes.
inline std::vector<unsigned char> safetensors_prefix(std::span<const safetensors_out> tensors,
                                                     std::span<const std::pair<std::string, std::string>> metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name))  // (a kiln::state_dict_names specialisation that names two values alike)
      throw std::invalid_argument(fmt::format("kiln::save_safetensors: two tensors are named '{}'", t.name));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes}}};
    at += t.bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 8 + 7) / 8 * 8 - 8, ' ');
  std::vector<unsigned char> out(8 + text.size());
  const std::uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

}  // namespace kiln::detail
