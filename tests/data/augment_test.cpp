// Augmentation: flips and crops are right, deterministic per (seed, epoch,
// sample) whatever the order of reads, absent outside training, and a run
// with them is reproducible with replicas.
#include <kiln/data/augment.hpp>
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <algorithm>
#include <stdexcept>
#include <vector>

namespace {
using namespace kiln;

/// n images of 2 × 3 × 4 whose pixels are distinct (sample, channel, y, x).
dataset images(std::size_t n) {
  dataset d{"images", {2, 3, 4}, {}, {}, {}, 0};
  d.features.resize(n * 24);
  std::iota(d.features.begin(), d.features.end(), 1.f);
  for (std::size_t i = 0; i < n; ++i) d.labels.push_back(static_cast<std::uint32_t>(i % 2));
  return d;
}

std::vector<float> read(const auto& src, std::size_t i, sample_pass pass) {
  std::vector<float> row(24);
  src.read_features(i, pass, row);
  return row;
}

TEST(augment, flip_twice_is_the_identity_and_flip_mirrors_rows) {
  std::vector<float> img(24);
  std::iota(img.begin(), img.end(), 0.f);
  auto x = img;
  flip_horizontal(x, {2, 3, 4});
  EXPECT_EQ((std::vector<float>(x.begin(), x.begin() + 4)), (std::vector<float>{3, 2, 1, 0}));
  EXPECT_EQ(x[23], 20.f);
  flip_horizontal(x, {2, 3, 4});
  EXPECT_EQ(x, img);
}

TEST(augment, translate_moves_pixels_and_fills_zeros) {
  std::vector<float> img(12);
  std::iota(img.begin(), img.end(), 1.f);  // 3 × 4: rows 1–4, 5–8, 9–12
  for (std::ptrdiff_t dy : {-2, -1, 0, 1, 2})
    for (std::ptrdiff_t dx : {-3, -1, 0, 1, 3}) {
      auto x = img;
      translate(x, {1, 3, 4}, dy, dx);
      for (std::ptrdiff_t y = 0; y < 3; ++y)
        for (std::ptrdiff_t c = 0; c < 4; ++c) {
          const std::ptrdiff_t sy = y + dy, sx = c + dx;
          const float want = sy >= 0 && sy < 3 && sx >= 0 && sx < 4 ? img[static_cast<std::size_t>(sy * 4 + sx)] : 0.f;
          EXPECT_EQ(x[static_cast<std::size_t>(y * 4 + c)], want) << dy << "," << dx << " at " << y << "," << c;
        }
    }
}

TEST(augment, crop_with_padding_zero_and_no_flip_is_the_identity) {
  const dataset d = images(10);
  const augmented same{d, {.crop_padding = 0, .horizontal_flip = false, .seed = 3}};
  for (std::size_t i = 0; i < 10; ++i)
    EXPECT_EQ(read(same, i, {.seed = 1, .epoch = 2, .training = true}), read(d.view(), i, {}));
}

TEST(augment, deterministic_per_seed_epoch_and_sample_whatever_the_order) {
  const dataset d = images(200);
  const augmented a{d, {.crop_padding = 1, .horizontal_flip = true, .seed = 7}};
  const augmented b{d, {.crop_padding = 1, .horizontal_flip = true, .seed = 7}};
  const augmented other{d, {.crop_padding = 1, .horizontal_flip = true, .seed = 8}};
  const sample_pass e1{.seed = 1, .epoch = 1, .training = true}, e2{.seed = 1, .epoch = 2, .training = true};
  std::size_t changed = 0, differs_by_epoch = 0, differs_by_seed = 0;
  for (std::size_t i = 200; i-- > 0;) {  // read backwards here, forwards below
    const auto x = read(a, i, e1);
    EXPECT_EQ(x, read(b, i, e1));
    changed += x != read(d.view(), i, {});
    differs_by_epoch += x != read(a, i, e2);
    differs_by_seed += x != read(other, i, e1);
  }
  for (std::size_t i = 0; i < 200; ++i) EXPECT_EQ(read(a, i, e1), read(b, i, e1));
  // 9 shifts × 2 flips: all but 1 in 18 change the image.
  EXPECT_GT(changed, 170u);
  EXPECT_GT(differs_by_epoch, 150u);
  EXPECT_GT(differs_by_seed, 150u);
  // Outside training the images are as they are.
  for (std::size_t i = 0; i < 200; ++i) EXPECT_EQ(read(a, i, {.seed = 1, .epoch = 0}), read(d.view(), i, {}));
}

TEST(augment, flip_alone_mirrors_about_half_the_images_exactly) {
  const dataset d = images(400);
  const augmented a{d, {.horizontal_flip = true, .seed = 1}};
  std::size_t flipped = 0;
  for (std::size_t i = 0; i < 400; ++i) {
    const auto x = read(a, i, {.epoch = 1, .training = true});
    auto mirrored = read(d.view(), i, {});
    flip_horizontal(mirrored, {2, 3, 4});
    if (x == mirrored)
      ++flipped;
    else
      EXPECT_EQ(x, read(d.view(), i, {}));
  }
  EXPECT_GT(flipped, 160u);
  EXPECT_LT(flipped, 240u);
}

TEST(augment, samples_that_are_not_images_are_refused) {
  dataset flat{"flat", {24}, std::vector<float>(48), {0, 1}, {}, 0};
  EXPECT_THROW((augmented{flat, {.horizontal_flip = true}}), std::invalid_argument);
}

TEST(augment, a_run_with_replicas_is_reproducible_and_learns) {
  const dataset d = images(64);
  using net = model<input<2, 3, 4>, flatten, dense<8>, relu, dense<2>>;
  auto run = [&] {
    auto p = compile<net, batch<8>, replicate<2>>(1);
    trainer t{p, sgd{.lr = 0.001f}};
    const augmented train{d, {.crop_padding = 1, .horizontal_flip = true, .seed = 5}};
    t.fit(train, epochs{3}, {.seed = 2, .progress = progress_mode::none});
    return std::vector<float>(p.parameters().begin(), p.parameters().end());
  };
  const auto first = run();
  EXPECT_EQ(first, run());
  auto p = compile<net, batch<8>, replicate<2>>(1);
  trainer t{p, sgd{.lr = 0.001f}};
  t.fit(d, epochs{3}, {.seed = 2, .progress = progress_mode::none});
  EXPECT_NE(first, std::vector<float>(p.parameters().begin(), p.parameters().end()));  // augmentation was applied
}

/// A source that records what the trainer asks for, as (epoch, sample) pairs.
struct recorder {
  dataset_view v;
  mutable std::vector<std::pair<std::size_t, std::size_t>> reads{};
  source_info info() const { return v.info(); }
  void read_features(std::size_t i, const sample_pass& p, std::span<float> row) const {
    if (p.training) reads.emplace_back(p.epoch, i);
    v.read_features(i, p, row);
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const { v.read_labels(i, out); }
  void read_targets(std::size_t i, std::span<float> out) const { v.read_targets(i, out); }
};

TEST(augment, every_replica_count_reads_the_same_samples_with_the_same_pass) {
  // What an augmentation draws from is (seed, epoch, sample): the same
  // whether one replica takes a step of 16 or two take 8 each (as two MPI
  // ranks would), so each sample's image is the same.
  const dataset d = images(64);
  using net = model<input<2, 3, 4>, flatten, dense<4>, relu, dense<2>>;
  auto reads = [&](auto program) {
    trainer t{program, sgd{.lr = 0.001f}};
    const augmented<recorder> train{recorder{d.view()}, {.crop_padding = 1, .seed = 5}};
    t.fit(train, epochs{2}, {.seed = 2, .progress = progress_mode::none});
    auto r = train.source().reads;
    std::sort(r.begin(), r.end());
    return r;
  };
  const auto one = reads(compile<net, batch<16>>(1));
  const auto two = reads(compile<net, batch<8>, replicate<2>>(1));
  EXPECT_EQ(one.size(), 2u * 64u);
  EXPECT_EQ(one, two);
}

}  // namespace
