// Three Gaussian blobs: a small classification set the tests train on.
#pragma once

#include <kiln/data/dataset.hpp>
#include <kiln/random.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::testing {

/// `n` samples of shape `sample_shape` (4 values in all unless said
/// otherwise), labels i % 3; class c has mean 2 in feature c, noise `spread`.
inline dataset blobs(std::size_t n, std::uint64_t seed, std::vector<std::size_t> sample_shape = {2, 2},
                     double spread = 0.5) {
  dataset d;
  d.name = "blobs";
  d.sample_shape = std::move(sample_shape);
  const std::size_t size = d.sample_size();
  rng g(seed);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::uint32_t>(i % 3);
    for (std::size_t k = 0; k < size; ++k)
      d.features.push_back(static_cast<float>((k == c ? 2.0 : 0.0) + spread * g.normal()));
    d.labels.push_back(c);
  }
  return d;
}

}  // namespace kiln::testing
