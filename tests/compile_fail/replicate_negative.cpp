// replicate<-1>: kiln's own error, not the compiler's narrowing conversion.
// expect: kiln::replicate<N>: N is the number of replicas and must be at least 1
// expect: replicate_needs_at_least_one_replica<-1>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<4>, kiln::replicate<-1>>();
#else
  auto program = kiln::compile<net, kiln::batch<4>, kiln::replicate<1>>();
#endif
  return static_cast<int>(program.replicas) - 1;
}
