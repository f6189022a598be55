// kiln/data/sample_source.hpp — what the trainer reads batches from.
//
// WHAT IT IS
//   `sample_source`: anything that can tell what its samples are
//   (`info()`) and copy one sample's features, class labels or real
//   targets into a row the trainer hands it. The trainer gathers every
//   batch row by row through these calls, in the static sampler's order
//   (kiln/sampler.hpp): it never sees how or where the samples are kept.
//   Sources in kiln: `dataset` (owns vectors, seen through its view),
//   `dataset_view` (the user's own memory, no copy), `augmented<S>` (crop
//   and flip on the fly), `streamed_dataset` (a file read row by row).
//
// CONTRACT (for a source of your own)
//   info()                 name, sample shape, sample count, labels per
//                          sample (0: none), targets per sample (0: none);
//                          the same answer every time.
//   read_features(i, pass, row)  writes exactly row.size() == sample size
//                          floats of sample i (i < samples). `pass` says
//                          what the values are for: the fit seed, the
//                          epoch (1, 2, ...; 0 outside fit) and whether
//                          this is training (augmentation applies only
//                          then). The same (i, pass) must give the same
//                          values, whatever the order of calls: that is
//                          what keeps runs bitwise reproducible for any
//                          replica or rank count.
//   read_labels(i, out)    writes labels_per_sample labels of sample i.
//   read_targets(i, out)   writes target_size targets of sample i.
//   Reads are const and made from the trainer's thread; a read that fails
//   (a file gone bad) throws, and fit stops with that exception.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kiln {

/// What a sample source holds.
struct source_info {
  std::string_view name;                     ///< for messages ("digits train")
  std::span<const std::size_t> sample_shape;  ///< e.g. {28, 28}
  std::size_t samples = 0;
  std::size_t labels_per_sample = 0;  ///< class labels per sample; 0: none
  std::size_t target_size = 0;        ///< real targets per sample; 0: none
};

/// What a read is for: the values of one sample may depend on these (an
/// augmentation draws from them), never on the order of calls.
struct sample_pass {
  std::uint64_t seed = 0;  ///< fit_options::seed
  std::size_t epoch = 0;   ///< 1, 2, ... in fit; 0 in evaluate and predict
  bool training = false;   ///< true only for fit's steps
};

template <class S>
concept sample_source = requires(const S& s, std::size_t i, const sample_pass& pass, std::span<float> row,
                                 std::span<std::uint32_t> labels) {
  { s.info() } -> std::same_as<source_info>;
  s.read_features(i, pass, row);
  s.read_labels(i, labels);
  s.read_targets(i, row);
};

}  // namespace kiln
