// kiln/data/csv.hpp — comma-separated values (plain or gzip) as a dataset.
//
// WHAT IT READS
//   A table of numbers, one sample per row: feature columns and either one
//   class-label column (classification; by default the last) or several
//   target columns (regression, `target_columns`). An optional header row
//   names the columns (its names appear in messages); any delimiter byte;
//   quoted fields as RFC 4180 has them. The fields are split by libcsv
//   (Debian's `libcsv-dev`, strict mode), which handles the quoting; kiln
//   converts each field with std::from_chars, exactly and locale-free.
//   Link kiln::csv (kiln + libcsv) to use this header.
//
//     auto d = kiln::csv::read("digits.csv.gz", {.header = false, .sample_shape = {8, 8}});
//
// ERRORS
//   kiln::data_error naming the file, the line and the column (1-based,
//   with its header name when there is one): a missing (empty) value; a
//   feature or target that is not a finite number; a label that is not a
//   whole number from 0 to 2^32 − 1; a row with another number of fields
//   than the first; malformed quoting; a field over 1 MiB; a label or
//   target column the file does not have; no rows; and every fault of the
//   file itself or of its gzip stream (kiln/detail/input_file.hpp).
//
// MEMORY
//   What the rows hold and no more: every value takes at least two bytes of
//   the (decompressed) file, and libcsv's field buffer is capped at 1 MiB
//   (a longer field is refused).
//   Fuzzed (tests/fuzz/csv.cpp).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <csv.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/idx.hpp>  // kiln::data_error
#include <kiln/detail/input_file.hpp>

namespace kiln::csv {

struct options {
  std::string name = {};  ///< the dataset's name; the file's name when empty
  char delimiter = ',';
  bool header = true;  ///< the first row names the columns
  /// The class-label column, 0-based; negative counts from the end (−1 is
  /// the last); none: no labels (features only). Ignored when
  /// target_columns are given.
  std::optional<long> label_column = -1;
  /// Regression: these columns (0-based, negative from the end) are the
  /// targets, in this order.
  std::vector<long> target_columns = {};
  /// The shape of one sample; {feature count} when empty.
  std::vector<std::size_t> sample_shape = {};
};

namespace detail {

inline constexpr std::size_t max_field = std::size_t{1} << 20;

/// libcsv's buffer, capped: a field longer than max_field is refused
/// (libcsv reports CSV_ENOMEM) rather than grown without bound.
inline void* capped_realloc(void* p, std::size_t n) { return n > max_field ? nullptr : std::realloc(p, n); }

/// What libcsv's callbacks build; they never throw (libcsv is C): the
/// first fault is kept and thrown once csv_parse returns.
struct table_builder {
  const options& o;
  dataset& d;
  std::size_t line = 1;                     ///< the physical line being fed
  std::size_t column = 0;                   ///< the field's index in its row
  std::size_t columns = 0;                  ///< fields per row, from the first row (0: not yet)
  std::vector<std::string> first = {};         ///< the first row, held until the columns are resolved
  std::vector<std::string> names = {};         ///< the header's names
  std::vector<long> role = {};                 ///< per column: −1 feature, −2 label, k ≥ 0 target k
  std::vector<float> row_targets = {};
  std::optional<std::string> fault = {};

  void fail(std::string what) {
    if (!fault) fault = std::move(what);
  }
  std::string where(std::size_t c) const {
    if (c < names.size() && !names[c].empty()) return fmt::format("line {}, column {} ('{}')", line, c + 1, names[c]);
    return fmt::format("line {}, column {}", line, c + 1);
  }

  void field(std::string_view s) {
    if (fault) return;
    if (columns == 0) {
      if (first.size() >= max_field) return fail(fmt::format("line {}: more than {} fields", line, max_field));
      first.emplace_back(s);
    } else {
      value(column, s);
    }
    ++column;
  }

  void row_end() {
    if (fault) return;
    bool data_row = true;
    if (columns == 0) {
      resolve();
      if (fault) return;
      data_row = !o.header;
      if (data_row)
        for (std::size_t c = 0; c < columns && !fault; ++c) value(c, first[c]);
      std::vector<std::string>().swap(first);
    } else if (column != columns) {
      return fail(fmt::format("line {}: {} fields, but the first row has {}", line, column, columns));
    }
    column = 0;
    if (data_row && !fault) d.targets.insert(d.targets.end(), row_targets.begin(), row_targets.end());
  }

  std::size_t feature_count() const {
    return static_cast<std::size_t>(std::count(role.begin(), role.end(), -1));
  }

  /// The first row sets the columns: which are features, label, targets.
  void resolve() {
    columns = first.size();
    if (o.header) names = first;
    role.assign(columns, -1);
    auto index = [&](long c, const char* what) -> std::optional<std::size_t> {
      const long n = static_cast<long>(columns);
      const long at = c < 0 ? n + c : c;
      if (at < 0 || at >= n) {
        fail(fmt::format("line {}: the {} column {} is not there: the first row has {} columns", line, what, c,
                         columns));
        return std::nullopt;
      }
      if (role[static_cast<std::size_t>(at)] != -1) {
        fail(fmt::format("line {}: column {} is asked for twice (label or target)", line, at + 1));
        return std::nullopt;
      }
      return static_cast<std::size_t>(at);
    };
    if (!o.target_columns.empty()) {
      for (std::size_t k = 0; k < o.target_columns.size(); ++k)
        if (const auto at = index(o.target_columns[k], "target")) role[*at] = static_cast<long>(k);
      d.target_size = o.target_columns.size();
      row_targets.assign(d.target_size, 0.f);
    } else if (o.label_column) {
      if (const auto at = index(*o.label_column, "label")) role[*at] = -2;
    }
    if (fault) return;
    const std::size_t features = feature_count();
    if (features == 0) return fail(fmt::format("line {}: no feature column is left", line));
    d.sample_shape = o.sample_shape.empty() ? std::vector<std::size_t>{features} : o.sample_shape;
    if (std::accumulate(d.sample_shape.begin(), d.sample_shape.end(), std::size_t{1}, std::multiplies<>{}) !=
        features)
      fail(fmt::format("line {}: {} feature columns do not make samples of shape {{{}}}", line, features,
                       fmt::join(d.sample_shape, ", ")));
  }

  /// A field as messages quote it: at most 40 bytes.
  static std::string quoted(std::string_view s) {
    return s.size() <= 40 ? std::string(s) : fmt::format("{}...", s.substr(0, 40));
  }

  void value(std::size_t c, std::string_view s) {
    if (c >= columns) return fail(fmt::format("line {}: more than the {} fields of the first row", line, columns));
    if (s.empty()) return fail(fmt::format("{}: missing value", where(c)));
    const char* end = s.data() + s.size();
    if (role[c] == -2) {
      std::uint32_t label = 0;
      const auto r = std::from_chars(s.data(), end, label);
      if (r.ec != std::errc{} || r.ptr != end)
        return fail(fmt::format("{}: label '{}' is not a whole number from 0 to 4294967295", where(c),
                              quoted(s)));
      d.labels.push_back(label);
      return;
    }
    float v = 0;
    const auto r = std::from_chars(s.data(), end, v);
    if (r.ec != std::errc{} || r.ptr != end || !std::isfinite(v))
      return fail(fmt::format("{}: '{}' is not a finite number", where(c), quoted(s)));
    if (role[c] == -1)
      d.features.push_back(v);
    else
      row_targets[static_cast<std::size_t>(role[c])] = v;
  }
};

inline void on_field(void* s, std::size_t n, void* b) {
  static_cast<table_builder*>(b)->field(std::string_view(s ? static_cast<const char*>(s) : "", s ? n : 0));
}
inline void on_row(int, void* b) { static_cast<table_builder*>(b)->row_end(); }

}  // namespace detail

/// Reads `file` (plain or gzip) as a dataset; throws kiln::data_error on
/// any fault, naming the file, and for a value its line and column.
inline dataset read(const std::filesystem::path& file, const options& o = {}) {
  dataset d;
  d.name = o.name.empty() ? file.filename().string() : o.name;
  kiln::detail::input_file in(file, [&](const std::string& what) { throw data_error(file, what); });
  csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_EMPTY_IS_NULL) != 0) throw data_error(file, "libcsv cannot start");
  struct freer {
    csv_parser* p;
    ~freer() { csv_free(p); }
  } free_at_end{&p};
  csv_set_delim(&p, static_cast<unsigned char>(o.delimiter));
  csv_set_realloc_func(&p, detail::capped_realloc);
  detail::table_builder b{o, d};
  auto refuse = [&](std::string what) {
    in.check_rest();
    throw data_error(file, what);
  };
  auto check = [&](bool parsed) {
    if (!parsed) {
      const int e = csv_error(&p);
      refuse(e == CSV_ETOOBIG || e == CSV_ENOMEM
                 ? fmt::format("line {}: a field longer than {} bytes", b.line, detail::max_field)
                 : fmt::format("line {}: malformed CSV ({})", b.line, csv_strerror(e)));
    }
    if (b.fault) refuse(*b.fault);
  };
  // Fed line by line, so that every callback knows its line.
  std::vector<unsigned char> buf(std::size_t{1} << 16);
  for (std::size_t got; (got = in.read(buf.data(), buf.size())) > 0;) {
    for (std::size_t at = 0; at < got;) {
      const auto* nl = static_cast<const unsigned char*>(std::memchr(buf.data() + at, '\n', got - at));
      const std::size_t end = nl ? static_cast<std::size_t>(nl - buf.data()) + 1 : got;
      check(csv_parse(&p, buf.data() + at, end - at, detail::on_field, detail::on_row, &b) == end - at);
      if (nl) ++b.line;
      at = end;
    }
  }
  check(csv_fini(&p, detail::on_field, detail::on_row, &b) == 0);
  if (b.columns == 0 || d.features.empty()) refuse(o.header ? "no rows after the header" : "no rows");
  d.validate();
  return d;
}

}  // namespace kiln::csv
