// Every file of a program that includes kiln is compiled for the same
// instruction sets, or the program stops (detail/build_target.hpp). The
// whole program is tested in tests/CMakeLists.txt (build_target.*); here,
// the check and its message.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kd = kiln::detail;

namespace {

std::string printed(std::uint32_t bits) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return {};
  kd::print_build_target(f, bits);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  std::fclose(f);
  return s;
}

/// `s` as a regular expression that matches it (the printed names hold
/// only letters, digits, spaces, '-' and '.').
std::string literally(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '.') r += '\\';
    r += c;
  }
  return r;
}

}  // namespace

// The options are named in a fixed order, each once ("no SSE": 32-bit x86
// without it, or another CPU).
TEST(build_target, names_each_option_set) {
  EXPECT_EQ(printed(kd::target_sse | kd::target_sse2 | kd::target_sse2_math), "SSE SSE2 SSE2-math");
  EXPECT_EQ(printed(kd::target_avx512bf16 | kd::target_fma | kd::target_avx2 | kd::target_avx512f),
            "FMA AVX2 AVX512F AVX512BF16");
  EXPECT_EQ(printed(kd::target_fma4 | kd::target_avx512bw | kd::target_avx512vl | kd::target_fast_math),
            "FMA4 AVX512BW AVX512VL -ffast-math");
  EXPECT_EQ(printed(kd::target_sse4_1 | kd::target_avx | kd::target_avx512dq | kd::target_avx512fp16),
            "SSE4.1 AVX AVX512DQ AVX512FP16");
  EXPECT_EQ(printed(0), "no SSE");
}

// This file's options are what its compiler says it targets.
TEST(build_target, this_files_options_are_its_targets) {
  const std::uint32_t checked =
      kd::target_sse2 | kd::target_avx512f | kd::target_fma | kd::target_avx2 | kd::target_fast_math;
  std::uint32_t expected = 0;
#if defined(__x86_64__)
  expected |= kd::target_sse2;
#endif
#if defined(__AVX512F__)
  expected |= kd::target_avx512f;
#endif
#if defined(__FMA__)
  expected |= kd::target_fma;
#endif
#if defined(__AVX2__)
  expected |= kd::target_avx2;
#endif
#if defined(__FAST_MATH__)
  expected |= kd::target_fast_math;
#endif
  EXPECT_EQ(kd::this_build_target & checked, expected);
}

// Another file with the same options: the program goes on.
TEST(build_target, a_file_with_the_same_options_passes) {
  EXPECT_EXIT(
      {
        kd::check_build_target(kd::this_build_target, "same.cpp");
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// Another with other options (one more, or one fewer): the program stops,
// naming the first file and this one, and what each was compiled for.
TEST(build_target, a_file_with_other_options_stops_the_program) {
  const std::uint32_t mine = kd::this_build_target;
  EXPECT_DEATH(kd::check_build_target(mine ^ kd::target_fast_math, "other.cpp"),
               "kiln: the files of this program that include kiln were compiled for different instruction sets:\n"
               "  [^\n]*\\.cpp: " +
                   literally(printed(mine)) + "\n  other\\.cpp: " + literally(printed(mine ^ kd::target_fast_math)) +
                   "\n");
  EXPECT_DEATH(kd::check_build_target(mine ^ kd::target_fma4, "fma4.cpp"),
               "\n  fma4\\.cpp: " + literally(printed(mine ^ kd::target_fma4)) + "\n");
  EXPECT_DEATH(kd::check_build_target(mine ^ kd::target_sse2, "sse2.cpp"),
               "Compile every file that includes kiln, in every library linked into this program");
}
