// kiln/detail/build_target.hpp — the files of a program (or of a shared
// library) that include kiln are compiled for the same instruction sets, or
// the program stops as it starts, naming two files that differ.
//
// kiln chooses its kernels when it is compiled, from the target's
// instruction sets, inside inline functions and templates (and so do Eigen
// and the compiler's own vectorising). Two object files built with
// different -march each carry their own version of the same function, and
// the linker keeps one copy of each: a violation of the one-definition rule
// that no compiler or linker reports. A file built for the x86-64 baseline
// may then run AVX-512 code, or one kernel use packing space sized for
// another. So each file that includes kiln records, as the program starts
// (a variable of its own, below), the instruction sets it was compiled for;
// the first file to differ from the first one stops the program (abort)
// with a message naming both.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>

namespace kiln::detail {

/// The target options compared: the 29 x86 instruction sets below, as the
/// compiler says it targets them (kiln's code, Eigen's and the compiler's
/// vectorising depend on them), and -ffast-math; one bit each, bit i named
/// build_target_names[i].
enum build_target_bit : std::uint32_t {
  target_sse = 1u << 0,
  target_sse2 = 1u << 1,
  target_sse2_math = 1u << 2,
  target_sse3 = 1u << 3,
  target_ssse3 = 1u << 4,
  target_sse4_1 = 1u << 5,
  target_sse4_2 = 1u << 6,
  target_popcnt = 1u << 7,
  target_avx = 1u << 8,
  target_f16c = 1u << 9,
  target_fma = 1u << 10,
  target_fma4 = 1u << 11,
  target_bmi = 1u << 12,
  target_bmi2 = 1u << 13,
  target_lzcnt = 1u << 14,
  target_avx2 = 1u << 15,
  target_avx512f = 1u << 16,
  target_avx512cd = 1u << 17,
  target_avx512bw = 1u << 18,
  target_avx512dq = 1u << 19,
  target_avx512vl = 1u << 20,
  target_avx512ifma = 1u << 21,
  target_avx512vbmi = 1u << 22,
  target_avx512vbmi2 = 1u << 23,
  target_avx512vnni = 1u << 24,
  target_avx512bitalg = 1u << 25,
  target_avx512vpopcntdq = 1u << 26,
  target_avx512bf16 = 1u << 27,
  target_avx512fp16 = 1u << 28,
  target_fast_math = 1u << 29,
};
inline constexpr const char* build_target_names[] = {
    "SSE", "SSE2", "SSE2-math", "SSE3", "SSSE3", "SSE4.1", "SSE4.2", "POPCNT", "AVX", "F16C", "FMA", "FMA4", "BMI",
    "BMI2", "LZCNT", "AVX2", "AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512IFMA", "AVX512VBMI",
    "AVX512VBMI2", "AVX512VNNI", "AVX512BITALG", "AVX512VPOPCNTDQ", "AVX512BF16", "AVX512FP16", "-ffast-math",
};
static_assert(target_fast_math == 1u << (std::size(build_target_names) - 1),
              "kiln: one name for each bit of build_target_bit, in order");

/// Writes the names of the options in `bits` ("SSE SSE2 ... AVX2") to `out`.
inline void print_build_target(std::FILE* out, std::uint32_t bits) {
  const char* separator = "";
  for (std::size_t i = 0; i < std::size(build_target_names); ++i) {
    if ((bits & (1u << i)) == 0) continue;
    std::fprintf(out, "%s%s", separator, build_target_names[i]);
    separator = " ";
  }
  if (*separator == '\0') std::fputs("no SSE", out);
}

/// Records that `file` was compiled for `bits`; the first call's are the
/// program's. A later call with other bits writes both to stderr and
/// aborts. Returns true.
/// The record is shared exactly as kiln's own static data is: it is static
/// data of an inline function, as kiln's tables of function pointers are
/// static data of templates. So it is one record within an executable or
/// a shared library, and one across libraries wherever that data is one:
/// with g++ on glibc, across every library with default visibility, even
/// one loaded RTLD_LOCAL (g++ makes such data one object in the whole
/// process, STB_GNU_UNIQUE, unless -fno-gnu-unique; two such plugins built
/// for different targets then call one another's kernels through those
/// tables); not across libraries built with -fvisibility=hidden, nor, with
/// clang, across libraries loaded RTLD_LOCAL, which each keep their own.
inline bool check_build_target(std::uint32_t bits, const char* file) noexcept {
  static std::mutex guard;
  static bool seen = false;
  static std::uint32_t first_bits = 0;
  static const char* first_file = nullptr;
  const std::lock_guard lock(guard);
  if (!seen) {
    seen = true;
    first_bits = bits;
    first_file = file;
    return true;
  }
  if (bits == first_bits) return true;
  std::fputs("kiln: the files of this program that include kiln were compiled for different instruction sets:\n",
             stderr);
  std::fprintf(stderr, "  %s: ", first_file);
  print_build_target(stderr, first_bits);
  std::fprintf(stderr, "\n  %s: ", file);
  print_build_target(stderr, bits);
  std::fputs(
      "\nkiln chooses its kernels as it is compiled, inside inline functions, and the linker keeps one copy of each:\n"
      "a file would run another's version (AVX-512 code on a CPU without it, or a kernel with packing space sized\n"
      "for another). Compile every file that includes kiln, in every library linked into this program or shared\n"
      "library, with the same -march options (and -ffast-math or not): in CMake, the same target_compile_options\n"
      "or CMAKE_CXX_FLAGS for each of those targets. A shared library that needs a target of its own (a plugin)\n"
      "keeps its own kiln when built with -fvisibility=hidden, if no kiln object passes between it and the rest.\n",
      stderr);
  std::fflush(stderr);
  std::abort();
}

namespace {  // (internal linkage: every file its own)

constexpr std::uint32_t this_build_target = 0u
#if defined(__SSE__)
                                            | target_sse
#endif
#if defined(__SSE2__)
                                            | target_sse2
#endif
#if defined(__SSE2_MATH__)
                                            | target_sse2_math
#endif
#if defined(__SSE3__)
                                            | target_sse3
#endif
#if defined(__SSSE3__)
                                            | target_ssse3
#endif
#if defined(__SSE4_1__)
                                            | target_sse4_1
#endif
#if defined(__SSE4_2__)
                                            | target_sse4_2
#endif
#if defined(__POPCNT__)
                                            | target_popcnt
#endif
#if defined(__AVX__)
                                            | target_avx
#endif
#if defined(__F16C__)
                                            | target_f16c
#endif
#if defined(__FMA__)
                                            | target_fma
#endif
#if defined(__FMA4__)
                                            | target_fma4
#endif
#if defined(__BMI__)
                                            | target_bmi
#endif
#if defined(__BMI2__)
                                            | target_bmi2
#endif
#if defined(__LZCNT__)
                                            | target_lzcnt
#endif
#if defined(__AVX2__)
                                            | target_avx2
#endif
#if defined(__AVX512F__)
                                            | target_avx512f
#endif
#if defined(__AVX512CD__)
                                            | target_avx512cd
#endif
#if defined(__AVX512BW__)
                                            | target_avx512bw
#endif
#if defined(__AVX512DQ__)
                                            | target_avx512dq
#endif
#if defined(__AVX512VL__)
                                            | target_avx512vl
#endif
#if defined(__AVX512IFMA__)
                                            | target_avx512ifma
#endif
#if defined(__AVX512VBMI__)
                                            | target_avx512vbmi
#endif
#if defined(__AVX512VBMI2__)
                                            | target_avx512vbmi2
#endif
#if defined(__AVX512VNNI__)
                                            | target_avx512vnni
#endif
#if defined(__AVX512BITALG__)
                                            | target_avx512bitalg
#endif
#if defined(__AVX512VPOPCNTDQ__)
                                            | target_avx512vpopcntdq
#endif
#if defined(__AVX512BF16__)
                                            | target_avx512bf16
#endif
#if defined(__AVX512FP16__)
                                            | target_avx512fp16
#endif
#if defined(__FAST_MATH__)
                                            | target_fast_math
#endif
    ;

#if defined(__GNUC__) || defined(__clang__)
#define KILN_DETAIL_THIS_FILE __BASE_FILE__  // (the file compiled, not this header)
#else
#define KILN_DETAIL_THIS_FILE "a file"
#endif

/// This file's record, made as the program (or its library) starts.
[[maybe_unused]] const bool build_target_checked = check_build_target(this_build_target, KILN_DETAIL_THIS_FILE);

#undef KILN_DETAIL_THIS_FILE

}  // namespace

}  // namespace kiln::detail
