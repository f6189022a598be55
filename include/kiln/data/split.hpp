// kiln/data/split.hpp — a seeded train/validation split.
//
// WHAT IT DOES
//   `split(d, {.validation = 0.2, .seed = 1, .stratify = true})` holds out
//   a fraction of the samples of `d` as a validation set, drawn from the
//   seed: the same seed, the same split, on every machine (kiln::rng). With
//   `stratify`, each class is split on its own: class c of n_c samples gives
//   round(n_c × fraction) of them to validation, so both sets keep the
//   class proportions to within half a sample per class. Both sets keep
//   the samples in their original order (the trainer shuffles).
//   `split_indices` gives the two lists of sample indices instead, for
//   data that is not a `dataset` (a view, a streamed file); `subset` copies
//   a list of samples out of a dataset.
//
// ERRORS
//   std::invalid_argument: a fraction outside [0, 1]; stratify without
//   exactly one label per sample.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <kiln/data/dataset.hpp>
#include <kiln/random.hpp>

namespace kiln {

struct split_options {
  double validation = 0.2;  ///< the fraction held out, in [0, 1]
  std::uint64_t seed = 0;
  bool stratify = false;  ///< split each class on its own (one label per sample)
};

/// Which samples go where, each list ascending.
struct split_lists {
  std::vector<std::size_t> train, validation;
};

/// Splits samples 0 … n − 1; `labels` (one per sample) only with stratify.
inline split_lists split_indices(std::size_t n, std::span<const std::uint32_t> labels, const split_options& o) {
  if (!(o.validation >= 0 && o.validation <= 1))
    throw std::invalid_argument(fmt::format("kiln::split: the validation fraction must be in [0, 1], got {}", o.validation));
  if (o.stratify && labels.size() != n)
    throw std::invalid_argument(fmt::format(
        "kiln::split: stratify needs one class label per sample, but there are {} labels for {} samples",
        labels.size(), n));
  // Groups of samples split alike: each class, or all samples as one.
  std::map<std::uint32_t, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < n; ++i) groups[o.stratify ? labels[i] : 0].push_back(i);
  split_lists out;
  for (auto& [label, members] : groups) {
    rng g(o.seed, /*stream=*/0x5B117ull + label);
    shuffle(std::span<std::size_t>(members), g);
    const auto held = static_cast<std::size_t>(std::llround(static_cast<double>(members.size()) * o.validation));
    out.validation.insert(out.validation.end(), members.begin(), members.begin() + static_cast<std::ptrdiff_t>(held));
    out.train.insert(out.train.end(), members.begin() + static_cast<std::ptrdiff_t>(held), members.end());
  }
  std::sort(out.train.begin(), out.train.end());
  std::sort(out.validation.begin(), out.validation.end());
  return out;
}

/// The samples `which` of `d` (with their labels and targets), in that order.
inline dataset subset(const dataset& d, std::span<const std::size_t> which, std::string name) {
  d.validate();
  dataset out{std::move(name), d.sample_shape, {}, {}, {}, d.target_size};
  const std::size_t s = d.sample_size(), l = d.labels_per_sample(), t = d.targets.empty() ? 0 : d.target_size;
  out.features.reserve(which.size() * s);
  out.labels.reserve(which.size() * l);
  out.targets.reserve(which.size() * t);
  for (std::size_t i : which) {
    if (i >= d.size())
      throw std::out_of_range(fmt::format("kiln::subset: sample {} of '{}', which has {}", i, d.name, d.size()));
    auto at = [](std::size_t k) { return static_cast<std::ptrdiff_t>(k); };
    out.features.insert(out.features.end(), d.features.begin() + at(i * s), d.features.begin() + at((i + 1) * s));
    out.labels.insert(out.labels.end(), d.labels.begin() + at(i * l), d.labels.begin() + at((i + 1) * l));
    out.targets.insert(out.targets.end(), d.targets.begin() + at(i * t), d.targets.begin() + at((i + 1) * t));
  }
  return out;
}

struct split_datasets {
  dataset train, validation;
};

/// `d` split in two (copies): "<name> train" and "<name> validation".
inline split_datasets split(const dataset& d, const split_options& o) {
  d.validate();
  const split_lists s = split_indices(d.size(), d.labels, o);
  return {subset(d, s.train, d.name + " train"), subset(d, s.validation, d.name + " validation")};
}

}  // namespace kiln
