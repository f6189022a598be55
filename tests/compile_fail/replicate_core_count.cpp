// Naming cores for some replicas but not all is rejected.
// expect: kiln::replicate<N, Cores...>: name no core \(replica r runs on core r\) or exactly one core per replica
// expect: replicate_names_no_core_or_one_per_replica<2, 1>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<4>, kiln::replicate<2, 1>>();
#else
  auto program = kiln::compile<net, kiln::batch<4>, kiln::replicate<2, 1, 0>>();
#endif
  return static_cast<int>(program.replicas) - 2;
}
