// kiln/data/text.hpp — characters as tokens, for small language models.
//
// WHAT IT OFFERS
//   `char_vocabulary`   a fixed vocabulary of 96 tokens: '\n' is 0, the
//                       printable ASCII characters ' '…'~' are 1…95. A tab
//                       reads as a space; other bytes are dropped.
//   `read_text`         a file's bytes (plain or gzip), bounded by what the
//                       file holds.
//   `load_fortunes`     the text of the Debian package `fortunes` (every
//                       fortune file in /usr/share/games/fortunes), with the
//                       '%' separator lines removed (`fortune_text`).
//   `next_token_dataset` windows of `Context` tokens as samples, labelled
//                       with the token that follows each window: the data of
//                       model<input_tokens<Context>, ...> with
//                       softmax_cross_entropy over char_vocabulary::size.
//   `sample_token`      draws a token from a model's scores (softmax with a
//                       temperature), to generate text.
//   `sequence_dataset`  windows of `Context` tokens, each labelled with the
//                       window shifted by one token (the next token at every
//                       position): the data of a causal language model whose
//                       output is shape<Context, vocabulary>.
//
// ERRORS
//   A missing corpus directory, or one without fortune files, raises
//   kiln::data_error naming it; so does a file that cannot be read, or
//   gzip input that is corrupt or cut off. Plain text has no redundancy: a
//   damaged byte reads as what it became (docs/reliability.md).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/idx.hpp>
#include <kiln/detail/input_file.hpp>
#include <kiln/random.hpp>

namespace kiln {

struct char_vocabulary {
  static constexpr std::size_t size = 96;

  /// The token of `c`, or size (no token) for a byte outside the vocabulary.
  static constexpr std::uint32_t token(char c) noexcept {
    if (c == '\n') return 0;
    if (c == '\t') c = ' ';
    if (c >= ' ' && c <= '~') return static_cast<std::uint32_t>(c - ' ' + 1);
    return size;
  }
  static constexpr char character(std::uint32_t token) noexcept {
    return token == 0 ? '\n' : static_cast<char>(' ' + token - 1);
  }
  static std::vector<std::uint32_t> encode(std::string_view text) {
    std::vector<std::uint32_t> out;
    out.reserve(text.size());
    for (char c : text)
      if (const auto t = token(c); t < size) out.push_back(t);
    return out;
  }
  static std::string decode(std::span<const std::uint32_t> tokens) {
    std::string s;
    for (auto t : tokens) s += character(t);
    return s;
  }
};

inline constexpr std::string_view fortunes_directory = "/usr/share/games/fortunes";

/// The bytes of `file` (plain, or gzip-compressed and checked), as they are.
/// Memory: what the file holds, taken as it arrives. Throws kiln::data_error
/// naming the file on any fault (see kiln/data/idx.hpp for gzip's).
inline std::string read_text(const std::filesystem::path& file) {
  detail::input_file in(file, [&](const std::string& what) { throw data_error(file, what); });
  std::vector<std::uint8_t> bytes;
  in.append(bytes, std::numeric_limits<std::size_t>::max() / 2);
  return {bytes.begin(), bytes.end()};
}

/// The lines of a fortune file's text, '%' separator lines removed, each
/// ended by '\n'.
inline std::string fortune_text(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 1);
  while (!text.empty()) {
    const auto end = text.find('\n');
    const auto line = text.substr(0, end);
    if (line != "%") {
      out += line;
      out += '\n';
    }
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return out;
}

/// Every fortune file under `dir` (sorted by name, so the text is the same
/// on every machine), '%' lines removed.
inline std::string load_fortunes(const std::filesystem::path& dir = std::filesystem::path(fortunes_directory)) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw data_error(dir, "no such directory (install the Debian package fortunes)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    // The text files have a .dat index beside them; .u8 links duplicate them.
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension() &&
        std::filesystem::exists(e.path().string() + ".dat"))
      files.push_back(e.path());
  }
  if (files.empty()) throw data_error(dir, "holds no fortune files (a file with a .dat index beside it)");
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += fortune_text(read_text(f));
  return text;
}

/// Samples of `context` tokens, every `stride` tokens, each labelled with
/// the token after it. Features hold the token ids as floats.
inline dataset next_token_dataset(std::span<const std::uint32_t> tokens, std::size_t context, std::size_t stride,
                                  std::string name) {
  if (context == 0 || stride == 0)
    throw std::invalid_argument("kiln::next_token_dataset: context and stride must be > 0");
  dataset d;
  d.name = std::move(name);
  d.sample_shape = {context};
  for (std::size_t start = 0; start + context < tokens.size(); start += stride) {
    for (std::size_t k = 0; k < context; ++k) d.features.push_back(static_cast<float>(tokens[start + k]));
    d.labels.push_back(tokens[start + context]);
  }
  return d;
}

/// Samples of `context` tokens, every `stride` tokens, each labelled with
/// the `context` tokens that follow its positions (tokens 1…context of the
/// window): a causal language model learns every position's next token.
inline dataset sequence_dataset(std::span<const std::uint32_t> tokens, std::size_t context, std::size_t stride,
                                std::string name) {
  if (context == 0 || stride == 0)
    throw std::invalid_argument("kiln::sequence_dataset: context and stride must be > 0");
  dataset d;
  d.name = std::move(name);
  d.sample_shape = {context};
  for (std::size_t start = 0; start + context < tokens.size(); start += stride) {
    for (std::size_t k = 0; k < context; ++k) d.features.push_back(static_cast<float>(tokens[start + k]));
    d.labels.insert(d.labels.end(), tokens.begin() + static_cast<std::ptrdiff_t>(start + 1),
                    tokens.begin() + static_cast<std::ptrdiff_t>(start + context + 1));
  }
  return d;
}

/// A token drawn from softmax(scores / temperature) with `g` (temperature
/// below 1 sharpens the distribution, above 1 flattens it).
inline std::uint32_t sample_token(std::span<const float> scores, double temperature, rng& g) {
  if (scores.empty() || !(temperature > 0))
    throw std::invalid_argument("kiln::sample_token: give at least one score and a temperature > 0");
  const float top = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  for (float s : scores) total += std::exp((s - top) / temperature);
  double u = g.uniform() * total;
  std::uint32_t pick = 0;
  while (pick + 1 < scores.size() && (u -= std::exp((scores[pick] - top) / temperature)) > 0) ++pick;
  return pick;
}

}  // namespace kiln
