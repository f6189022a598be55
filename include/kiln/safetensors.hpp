// kiln/safetensors.hpp — a model's weights in and out as safetensors, named
// and laid out as PyTorch's state_dict of the equivalent nn.Module.
//
//   kiln::save_safetensors("mlp.safetensors", program);   // or a parameter_store
//   kiln::load_safetensors("mlp.safetensors", program);
//
//   model<input<784>, dense<256>, relu, dense<10>>  ≈  nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
//   nn.Linear(256, 10)):  0.weight [256, 784], 0.bias [256], 2.weight [10, 256], 2.bias [10]
//
// WHAT IS WRITTEN   every parameter once (a tied weight under its first
//   user's name; the other uses' names in __metadata__, alias → name, as the
//   safetensors library's save_model does), batch_norm's running statistics
//   and num_batches_tracked (I64: the step count), in state_dict order; F32
//   for float programs (bf16 ones included: their weights are f32), F64 for
//   double ones. __metadata__ also holds "format": "pt" and the caller's
//   entries. Names: kiln/detail/state_dict_names.hpp; specialise
//   kiln::state_dict_names<YourLayer> to name a layer of your own.
//   The file is written atomically (temporary file, fsync, rename).
// WHAT IS READ   any safetensors file with this model's tensors: F32, BF16
//   and F16 (converted exactly), F64 into double programs only (into float
//   it would round). Every tensor of the model must be there with its shape;
//   num_batches_tracked may be missing (its value is not used); a tied
//   weight's alias may be there if it holds the same values; any other
//   tensor is refused unless `ignore_unknown_tensors`. The parameters and
//   state are loaded; the step count and seed are left as they are.
// UNTRUSTED INPUT   everything is checked before anything changes (see
//   detail/safetensors_format.hpp for the header's checks): a fault throws
//   kiln::checkpoint_error (missing, io, not_a_checkpoint, truncated,
//   corrupted, other_model: a missing, unknown or misshapen tensor or a
//   dtype it cannot take, out_of_range: a NaN or infinite value) naming the
//   file, the tensor and what, and the program is left untouched. Memory:
//   the file's bytes and one staging copy of the parameters and state.
// DEPENDENCY   nlohmann-json (Debian's nlohmann-json3-dev): link
//   kiln::safetensors, which CMake defines when it finds nlohmann_json.
//   kiln/kiln.hpp does not include this header, so kiln::kiln alone needs
//   no JSON library.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <kiln/checkpoint_error.hpp>
#include <kiln/detail/checkpoint_file.hpp>
#include <kiln/detail/safetensors_format.hpp>
#include <kiln/detail/state_dict_names.hpp>

namespace kiln {

/// How load_safetensors treats a file.
struct safetensors_options {
  /// Skip tensors this model does not have (a PyTorch module's extra
  /// buffers, say) instead of refusing the file.
  bool ignore_unknown_tensors = false;
};

/// A file's __metadata__: strings by key.
using safetensors_metadata = std::map<std::string, std::string>;

namespace detail {

/// Element `i` of `e`'s data as T; `e.dtype` is one the caller accepted
/// (F32, BF16, F16, F64, I64).
template <class T>
T safetensors_value(const safetensors_entry& e, std::span<const unsigned char> data, std::size_t i) {
  const unsigned char* p = data.data() + e.begin;
  if (e.dtype == "F32") return static_cast<T>(std::bit_cast<float>(load_le<std::uint32_t>(p + 4 * i)));
  if (e.dtype == "F64") return static_cast<T>(std::bit_cast<double>(load_le<std::uint64_t>(p + 8 * i)));
  if (e.dtype == "I64") return static_cast<T>(static_cast<std::int64_t>(load_le<std::uint64_t>(p + 8 * i)));
  const auto h = load_le<std::uint16_t>(p + 2 * i);
  if (e.dtype == "BF16") return static_cast<T>(std::bit_cast<float>(std::uint32_t{h} << 16));
  // F16: sign, 5 exponent bits, 10 fraction bits; every value is a float.
  const float sign = h & 0x8000u ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1f;
  const float fraction = static_cast<float>(h & 0x3ffu);
  if (exponent == 0) return static_cast<T>(sign * std::ldexp(fraction, -24));
  if (exponent == 31) return static_cast<T>(fraction == 0 ? sign * INFINITY : NAN);
  return static_cast<T>(sign * std::ldexp(1024.0f + fraction, exponent - 25));
}

/// Loads the safetensors `bytes` (of `file`) into `params` and `state`,
/// laid out as `want` says, after checking them all (see load_safetensors).
template <class T>
safetensors_metadata load_state_dict(std::span<const unsigned char> bytes, const std::filesystem::path& file,
                                     const state_dict_layout& want, std::span<T> params, std::span<T> state,
                                     const safetensors_options& options = {}) {
  using role = state_dict_tensor::role;
  auto refuse = [&](checkpoint_fault fault, const std::string& what) { throw checkpoint_error(fault, file, what); };
  safetensors_contents c = parse_safetensors(bytes, file);
  std::unordered_map<std::string_view, const state_dict_tensor*> mine;
  for (const auto& t : want.tensors) mine.emplace(t.name, &t);
  std::unordered_map<std::string_view, std::string_view> alias_of;
  for (const auto& [alias, name] : want.aliases) alias_of.emplace(alias, name);

  // Which tensors are there and which are not, before any value is read.
  // (names: the first five of each kind, and how many)
  std::vector<std::string> missing, unknown;
  std::size_t n_missing = 0, n_unknown = 0;
  for (const auto& t : want.tensors)
    if (t.kind != role::batch_counter && !c.find(t.name) && n_missing++ < 5)
      missing.push_back("'" + printable(t.name) + "'");
  for (const auto& e : c.entries)
    if (!mine.count(e.name) && !alias_of.count(e.name) && n_unknown++ < 5)
      unknown.push_back("'" + printable(e.name) + "'");
  auto some = [](const std::vector<std::string>& names, std::size_t n) {
    return fmt::format("{}{}", fmt::join(names, ", "), n > names.size() ? fmt::format(" and {} more", n - names.size()) : "");
  };
  if (n_missing > 0)
    refuse(checkpoint_fault::other_model,
           fmt::format("lacks {} of this model's {} tensors: {} (the file has {} tensors{})", n_missing,
                       want.tensors.size(), some(missing, n_missing), c.entries.size(),
                       c.entries.empty() ? "" : fmt::format(", e.g. '{}'", printable(c.entries.front().name))));
  if (n_unknown > 0 && !options.ignore_unknown_tensors)
    refuse(checkpoint_fault::other_model,
           fmt::format("holds {} tensor{} this model does not have: {} (safetensors_options::ignore_unknown_tensors "
                       "skips them)",
                       n_unknown, n_unknown > 1 ? "s" : "", some(unknown, n_unknown)));

  // Each tensor's dtype and shape against the model's.
  auto check = [&](const safetensors_entry& e, const state_dict_tensor& t) {
    const bool takes = t.kind == role::batch_counter
                           ? e.dtype == "I64"
                           : e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16" ||
                                 (e.dtype == "F64" && std::is_same_v<T, double>);
    if (!takes)
      refuse(checkpoint_fault::other_model,
             fmt::format("tensor '{}' is {}; this model takes {}", printable(e.name), e.dtype,
                         t.kind == role::batch_counter ? "I64 (a batch count)"
                         : std::is_same_v<T, double>   ? "F64, F32, BF16 or F16"
                                                       : "F32, BF16 or F16 (F64 would round: convert it first)"));
    if (e.shape != t.shape)
      refuse(checkpoint_fault::other_model,
             fmt::format("tensor '{}' has shape {}; this model's is {}", printable(e.name), shape_text(e.shape),
                         shape_text(t.shape)));
  };
  for (const auto& t : want.tensors)
    if (const auto* e = c.find(t.name)) check(*e, t);

  // Values, into a staging copy (padding and anything absent kept as is).
  std::vector<T> staged_params(params.begin(), params.end()), staged_state(state.begin(), state.end());
  for (const auto& t : want.tensors) {
    if (t.kind == role::batch_counter) continue;  // (kiln keeps no count of its own)
    const safetensors_entry& e = *c.find(t.name);
    T* to = (t.kind == role::parameter ? staged_params.data() : staged_state.data()) + t.offset;
    for (std::size_t i = 0; i < t.size; ++i) {
      to[i] = safetensors_value<T>(e, c.data, i);
      if (!std::isfinite(to[i]))
        refuse(checkpoint_fault::out_of_range,
               fmt::format("out of range: tensor '{}' element {} is {}; every value must be finite", printable(t.name),
                           i, to[i]));
    }
  }
  // A tied weight's other name, when the file has it too, holds the same values.
  for (const auto& [alias, name] : want.aliases) {
    const safetensors_entry* e = c.find(alias);
    if (!e) continue;
    const state_dict_tensor& t = *mine.at(name);
    check(*e, t);
    for (std::size_t i = 0; i < t.size; ++i)
      if (const T v = safetensors_value<T>(*e, c.data, i); !(v == staged_params[t.offset + i]))
        refuse(checkpoint_fault::other_model,
               fmt::format("tensor '{}' is '{}' in this model (a tied weight), but their values differ at element {} "
                           "({} and {})",
                           printable(alias), printable(name), i, v, staged_params[t.offset + i]));
  }

  // Everything checked: now copy.
  std::copy(staged_params.begin(), staged_params.end(), params.begin());
  std::copy(staged_state.begin(), staged_state.end(), state.begin());
  return std::move(c.metadata);
}

}  // namespace detail

/// Writes the parameters and state of `p` (a program or a parameter_store)
/// to `file` as safetensors, atomically, named as the equivalent PyTorch
/// module's state_dict; `metadata` joins the file's __metadata__.
template <class ProgramOrStore>
void save_safetensors(const std::filesystem::path& file, const ProgramOrStore& p,
                      const safetensors_metadata& metadata = {}) {
  using T = typename ProgramOrStore::scalar_type;
  using Stored = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using role = detail::state_dict_tensor::role;
  const detail::state_dict_layout sd = detail::state_dict_of<typename ProgramOrStore::model_type>();
  std::vector<std::pair<std::string, std::string>> meta{{"format", "pt"}};
  meta.insert(meta.end(), sd.aliases.begin(), sd.aliases.end());
  for (const auto& entry : metadata) {
    const auto& [k, v] = entry;
    if (std::any_of(meta.begin() + 1, meta.end(), [&](const auto& m) { return m.first == entry.first; }))
      throw std::invalid_argument(fmt::format(
          "kiln::save_safetensors: metadata key '{}' is the name of a tied weight's alias, which kiln records there",
          k));
    if (k == "format") meta.front().second = v;
    else meta.emplace_back(k, v);
  }
  std::vector<detail::safetensors_out> out;
  for (const auto& t : sd.tensors) {
    const bool count = t.kind == role::batch_counter;
    out.push_back({t.name, count ? "I64" : (sizeof(Stored) == 8 ? "F64" : "F32"), t.shape,
                   count ? 8 : t.size * sizeof(Stored)});
  }
  std::vector<unsigned char> bytes = detail::safetensors_prefix(out, meta);
  std::size_t total = bytes.size();
  for (const auto& o : out) total += o.bytes;
  bytes.reserve(total);
  auto append = [&](const auto v) {
    const auto at = bytes.size();
    bytes.resize(at + sizeof v);
    std::memcpy(bytes.data() + at, &v, sizeof v);
  };
  for (const auto& t : sd.tensors) {
    if (t.kind == role::batch_counter) {
      append(static_cast<std::int64_t>(p.step()));
      continue;
    }
    const auto from = (t.kind == role::parameter ? p.parameters() : p.state()).subspan(t.offset, t.size);
    for (const T v : from) append(static_cast<Stored>(v));
  }
  detail::write_atomically(file, bytes);
}

/// Reads the safetensors `file` into `p` (a program or a parameter_store):
/// checks everything first; on any fault throws kiln::checkpoint_error and
/// changes nothing. Returns the file's __metadata__.
template <class ProgramOrStore>
safetensors_metadata load_safetensors(const std::filesystem::path& file, ProgramOrStore& p,
                                      const safetensors_options& options = {}) {
  const auto bytes = detail::read_checkpoint_file(file);
  return detail::load_state_dict(std::span<const unsigned char>(bytes), file,
                                 detail::state_dict_of<typename ProgramOrStore::model_type>(), p.parameters(),
                                 p.state(), options);
}

}  // namespace kiln
