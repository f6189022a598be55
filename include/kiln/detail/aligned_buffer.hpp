// kiln/detail/aligned_buffer.hpp — a heap buffer of T aligned to 64 bytes
// (a cache line, an AVX-512 register), zero-initialised.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

namespace kiln::detail {

template <class T>
struct aligned_delete {
  void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};
template <class T>
using aligned_buffer = std::unique_ptr<T[], aligned_delete<T>>;

/// n values of T (T{}), 64-byte aligned; one element's room when n is 0.
template <class T>
aligned_buffer<T> make_aligned(std::size_t n) {
  auto* p = static_cast<T*>(::operator new[](std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{64}));
  std::fill(p, p + n, T{});
  return aligned_buffer<T>(p);
}

}  // namespace kiln::detail
