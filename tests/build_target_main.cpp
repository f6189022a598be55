// A program of two files that include kiln (this one and
// build_target_other.cpp), built twice (tests/CMakeLists.txt): both files for
// one target, where it trains a step in each file and exits 0; and this one
// for x86-64-v3, the other for the x86-64 baseline, where it must stop as it
// starts, before main, with kiln's message naming both files
// (detail/build_target.hpp).
#include <kiln/kiln.hpp>

#include <cstdio>

#include "odr_model.hpp"

double loss_in_the_other_file();

int main() {
  const double here = kiln::odr_test::run(), there = loss_in_the_other_file();
  std::printf("loss here %.9g, in the other file %.9g\n", here, there);
  return here == there ? 0 : 1;
}
