// kiln/data/fashion_mnist.hpp — the Fashion-MNIST data set.
//
// WHAT IT LOADS
//   From `dir` (default: where Debian's dataset-fashion-mnist puts it,
//   /usr/share/datasets/fashion-mnist), the four IDX files
//   {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]: 60,000 training and
//   10,000 test images of 28×28 pixels, labels 0–9 (`class_names`).
//   Pixels become x / 255 (`unit_range`) or, with `standardize`, (x/255 −
//   0.2860) / 0.3530. With a `shuffle_seed` both sets come back shuffled.
//
// SHAPE CONTRACT  each sample is shape<28, 28>: model<input<28, 28>, ...>
//                 (or input<784>: the dataset's sample size is what counts).
// ERRORS          kiln::data_error naming the file: see kiln/data/idx.hpp, plus
//                 wrong dimensions, label/image count mismatch, label ≥ 10.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/idx.hpp>

namespace kiln {

/// How Fashion-MNIST pixels become features.
enum class pixel_normalization { unit_range, standardize };

struct fashion_mnist_options {
  pixel_normalization normalize = pixel_normalization::unit_range;
  std::optional<std::uint64_t> shuffle_seed{};  ///< shuffle both sets with this seed
};

struct fashion_mnist {
  static constexpr std::string_view default_directory = "/usr/share/datasets/fashion-mnist";
  static constexpr std::size_t rows = 28, cols = 28, classes = 10;
  static constexpr std::array<std::string_view, 10> class_names{
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

  using options = fashion_mnist_options;

  dataset train;
  dataset test;

  static fashion_mnist load(const std::filesystem::path& dir = std::filesystem::path(default_directory),
                            const options& opt = {}) {
    fashion_mnist f{load_split(dir, "train", opt), load_split(dir, "t10k", opt)};
    f.train.name = "fashion-mnist train";
    f.test.name = "fashion-mnist test";
    if (opt.shuffle_seed) {
      shuffle(f.train, *opt.shuffle_seed);
      shuffle(f.test, *opt.shuffle_seed + 1);
    }
    return f;
  }

  /// One split from an images file and a labels file, checked against each other.
  static dataset load_files(const std::filesystem::path& images_file, const std::filesystem::path& labels_file,
                            const options& opt = {}) {
    const idx::array images = idx::read(images_file);
    if (images.extents.size() != 3 || images.extents[1] != rows || images.extents[2] != cols) {
      throw data_error(images_file, fmt::format("wrong dimensions: expected (count, 28, 28), found ({})",
                                                fmt::join(images.extents, ", ")));
    }
    const idx::array labels = idx::read(labels_file);
    if (labels.extents.size() != 1) {
      throw data_error(labels_file,
                       fmt::format("wrong dimensions: expected (count), found ({})", fmt::join(labels.extents, ", ")));
    }
    if (labels.extents[0] != images.extents[0]) {
      throw data_error(labels_file, fmt::format("{} labels, but {} has {} images", labels.extents[0],
                                                images_file.filename().string(), images.extents[0]));
    }
    dataset d;
    d.sample_shape = {rows, cols};
    d.features.resize(images.data.size());
    const bool standardize = opt.normalize == pixel_normalization::standardize;
    for (std::size_t i = 0; i < images.data.size(); ++i) {
      const float x = static_cast<float>(images.data[i]) / 255.0f;
      d.features[i] = standardize ? (x - 0.2860f) / 0.3530f : x;
    }
    d.labels.resize(labels.data.size());
    for (std::size_t i = 0; i < labels.data.size(); ++i) {
      if (labels.data[i] >= classes) {
        throw data_error(
            labels_file,
            fmt::format("label {} of sample {} is out of range (Fashion-MNIST has classes 0-9)", labels.data[i], i));
      }
      d.labels[i] = labels.data[i];
    }
    return d;
  }

 private:
  static std::filesystem::path find(const std::filesystem::path& dir, const std::string& stem) {
    const auto gz = dir / (stem + ".gz");
    if (std::filesystem::exists(gz)) return gz;
    const auto plain = dir / stem;
    if (std::filesystem::exists(plain)) return plain;
    return gz;  // reported missing by the reader, under its usual name
  }
  static dataset load_split(const std::filesystem::path& dir, const std::string& split, const options& opt) {
    return load_files(find(dir, split + "-images-idx3-ubyte"), find(dir, split + "-labels-idx1-ubyte"), opt);
  }
};

}  // namespace kiln
