// kiln/detail/cpu_features.hpp — what the CPU has, asked at run time (once)
// where a build for an older target can use more, and how such a build
// runs code compiled for it: a build for the x86-64 baseline runs its
// vector math with the FMA instruction on a CPU that has it
// (detail/vector_packs.hpp's with_pack, detail/libm_expf.hpp's
// exp_shifted). Every other choice of instruction set is made at compile
// time, from the target's.
#pragma once
#include <kiln/detail/internal_header.hpp>

namespace kiln::detail {

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
/// True when the CPU has FMA (and the system keeps the AVX registers the
/// instruction uses: libgcc's query checks both).
inline bool cpu_has_fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return has;
}

/// True when the CPU has AMD's FMA4 (Bulldozer; later AMD CPUs have FMA).
inline bool cpu_has_fma4() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma4") != 0;
  }();
  return has;
}

/// f(args...) compiled for FMA: how a build for an older target runs a
/// loop whose multiply-adds are the instruction (a function with
/// [[gnu::target("fma")]] is inlined only into code compiled for FMA).
/// Only where cpu_has_fma(). g++ inlines every call in it into it; clang
/// inlines f's body, and the rest as its inliner chooses (clang-16,
/// checked: in the vector math each fma stays a call to the instruction,
/// in the loss's exp none does). Whatever is inlined here may have its
/// a·b + c contracted into one fma (g++'s -ffp-contract=fast, its default
/// in the gnu++ modes; clang's default fuses a·b + c written as one
/// expression), so f must not rely on a product and a sum staying apart.
template <class F, class... Args>
[[gnu::target("fma"), gnu::flatten]] void run_compiled_for_fma(F&& f, Args... args) {
  f(args...);
}
#endif

}  // namespace kiln::detail
