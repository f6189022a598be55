// kiln/random.hpp — the one source of randomness in kiln.
//
// WHAT IT IS
//   `kiln::rng`: xoshiro256** seeded through splitmix64, with the few
//   distributions kiln needs (uniform, normal, bounded integers, shuffling)
//   written out here rather than taken from <random>, whose distributions
//   differ between standard libraries. Same seed, same numbers, everywhere.
//
// THREAD SAFETY
//   An rng is a value; give each thread its own (see `rng::fork`).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <utility>

namespace kiln {

class rng {
 public:
  /// A generator for `seed`; `stream` separates independent uses of one seed
  /// (initialisation, shuffling of epoch e, ...).
  explicit constexpr rng(std::uint64_t seed, std::uint64_t stream = 0) noexcept {
    std::uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (stream + 1));
    for (auto& s : s_) s = splitmix64(x);
  }

  constexpr std::uint64_t operator()() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1), 53 random bits.
  constexpr double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

  /// Uniform in [lo, hi).
  constexpr double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

  /// Standard normal (Box–Muller, one value per call).
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  /// Uniform integer in [0, n), without modulo bias (Lemire's method).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    __extension__ using u128 = unsigned __int128;
    u128 m = static_cast<u128>((*this)()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<u128>((*this)()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  /// The full state, for checkpoints.
  constexpr std::array<std::uint64_t, 4> state() const noexcept { return s_; }
  constexpr void set_state(const std::array<std::uint64_t, 4>& s) noexcept { s_ = s; }

  friend constexpr bool operator==(const rng&, const rng&) = default;

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static constexpr std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::array<std::uint64_t, 4> s_{};
};

/// Fisher–Yates shuffle of `items` driven by `g`.
template <class T>
constexpr void shuffle(std::span<T> items, rng& g) noexcept {
  for (std::size_t i = items.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(g.below(i));
    using std::swap;
    swap(items[i - 1], items[j]);
  }
}

}  // namespace kiln
