// Linked into a test program built for CPU features the machine running it
// may lack (AVX-512F in kiln_avx512f_only_tests, on a Zen 3 say): where
// the CPU lacks KILN_TEST_REQUIRES_CPU, every test of the program is
// skipped (CTest reports them as skipped) instead of stopping on an illegal
// instruction. This file is compiled for the x86-64 baseline
// (tests/CMakeLists.txt), so the check itself runs on any x86-64 CPU. It
// runs before the first test but after static initialisation, which the
// program's other files (compiled for its target) do: nothing guarantees
// their initialisers no AVX-512 instruction, but with GCC 12 on a Zen 3
// they have none (the test listing that CTest's discovery runs at build
// time runs them, and would have stopped).
#include <gtest/gtest.h>

#ifndef KILN_TEST_REQUIRES_CPU
#error "requires_cpu.cpp: define KILN_TEST_REQUIRES_CPU as a feature name of __builtin_cpu_supports, e.g. \"avx512f\""
#endif

namespace {

struct requires_cpu : ::testing::Environment {
  void SetUp() override {
    if (!__builtin_cpu_supports(KILN_TEST_REQUIRES_CPU))
      GTEST_SKIP() << "this CPU has no " KILN_TEST_REQUIRES_CPU ", which this test program is built for";
  }
};

[[maybe_unused]] ::testing::Environment* const registered = ::testing::AddGlobalTestEnvironment(new requires_cpu);

}  // namespace
