// kiln/data/augment.hpp — image augmentation as a sample source.
//
// WHAT IT IS
//   `augmented<S>`: the samples of source S (a dataset_view, a dataset, a
//   streamed file, ...) with, while training, a random crop with zero
//   padding (the image shifted by dy, dx, each uniform in [−p, p], what
//   falls outside is 0: as if padded by p on every side and cropped back)
//   and a horizontal flip (half of the time), applied as each row is read:
//
//     augmented train{data.train, {.crop_padding = 2, .horizontal_flip = true, .seed = 7}};
//     t.fit(train, epochs{10});
//
//   Samples are {H, W} or {C, H, W} images (each channel moved alike).
//
// DETERMINISM
//   The draws for sample i come from kiln::rng seeded with the
//   augmentation's seed and the fit seed, on a stream made of the epoch and
//   i, the sample's index in the whole dataset: never from the order of
//   reads or the thread. So every replica of every MPI rank, whichever
//   shard the static sampler gives it, sees the same image for the same
//   (seed, epoch, sample), and a run is as reproducible as without
//   augmentation. evaluate and predict (sample_pass::training false) see
//   the images as they are.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/dataset_view.hpp>
#include <kiln/data/sample_source.hpp>
#include <kiln/random.hpp>

namespace kiln {

struct image_augmentation {
  std::size_t crop_padding = 0;  ///< p: shift by up to p pixels each way (0: no crop)
  bool horizontal_flip = false;  ///< mirror left–right, half of the time
  std::uint64_t seed = 0;
};

/// An image's geometry: channels × height × width.
struct image_extent {
  std::size_t channels = 1, height = 0, width = 0;
};

/// Mirrors every row of `image` left–right.
inline void flip_horizontal(std::span<float> image, image_extent e) noexcept {
  for (std::size_t r = 0; r < e.channels * e.height; ++r) {
    const auto row = image.subspan(r * e.width, e.width);
    std::reverse(row.begin(), row.end());
  }
}

/// Moves `image` by (dy, dx) in place: pixel (y, x) becomes the old (y + dy,
/// x + dx), 0 where that is outside.
inline void translate(std::span<float> image, image_extent e, std::ptrdiff_t dy, std::ptrdiff_t dx) noexcept {
  const auto h = static_cast<std::ptrdiff_t>(e.height), w = static_cast<std::ptrdiff_t>(e.width);
  for (std::size_t c = 0; c < e.channels; ++c) {
    float* p = image.data() + c * e.height * e.width;
    // Visit in the order that reads each pixel before it is overwritten.
    for (std::ptrdiff_t k = 0; k < h; ++k) {
      const std::ptrdiff_t y = dy > 0 ? k : h - 1 - k;
      for (std::ptrdiff_t j = 0; j < w; ++j) {
        const std::ptrdiff_t x = dx > 0 ? j : w - 1 - j;
        const std::ptrdiff_t sy = y + dy, sx = x + dx;
        p[y * w + x] = sy >= 0 && sy < h && sx >= 0 && sx < w ? p[sy * w + sx] : 0.f;
      }
    }
  }
}

template <sample_source S>
class augmented {
 public:
  augmented(S source, image_augmentation a) : source_(std::move(source)), a_(a) {
    const source_info info = source_.info();
    const auto& s = info.sample_shape;
    if (s.size() == 2)
      e_ = {1, s[0], s[1]};
    else if (s.size() == 3)
      e_ = {s[0], s[1], s[2]};
    else
      throw std::invalid_argument(fmt::format(
          "kiln::augmented '{}': crop and flip need images, samples of shape {{H, W}} or {{C, H, W}}, not {{{}}}",
          info.name, fmt::join(s, ", ")));
  }
  /// A dataset is read through its view (it must outlive this).
  augmented(const dataset& d, image_augmentation a)
    requires std::is_same_v<S, dataset_view>
      : augmented(d.view(), a) {}

  const S& source() const noexcept { return source_; }
  const image_augmentation& augmentation() const noexcept { return a_; }

  // ---- sample_source --------------------------------------------------------
  source_info info() const { return source_.info(); }
  void read_features(std::size_t i, const sample_pass& pass, std::span<float> row) const {
    source_.read_features(i, pass, row);
    if (!pass.training) return;
    // One stream per (epoch, sample): the draws do not depend on who reads when.
    rng g(a_.seed ^ (pass.seed * 0xD1B54A32D192ED03ull), (std::uint64_t{pass.epoch} << 40) ^ i);
    const auto p = static_cast<std::ptrdiff_t>(a_.crop_padding);
    const std::ptrdiff_t dy = static_cast<std::ptrdiff_t>(g.below(static_cast<std::uint64_t>(2 * p + 1))) - p;
    const std::ptrdiff_t dx = static_cast<std::ptrdiff_t>(g.below(static_cast<std::uint64_t>(2 * p + 1))) - p;
    const bool flip = (g() >> 63) != 0;
    if (dy != 0 || dx != 0) translate(row, e_, dy, dx);
    if (a_.horizontal_flip && flip) flip_horizontal(row, e_);
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const { source_.read_labels(i, out); }
  void read_targets(std::size_t i, std::span<float> out) const { source_.read_targets(i, out); }

 private:
  S source_;
  image_augmentation a_;
  image_extent e_;
};

augmented(const dataset&, image_augmentation) -> augmented<dataset_view>;

}  // namespace kiln
