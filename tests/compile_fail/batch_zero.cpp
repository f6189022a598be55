// A batch of zero samples is rejected.
// expect: kiln::batch<B>: a batch must hold at least one sample \(B ?>= 1\)
// expect: batch_must_hold_at_least_one_sample<0>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<0>>();
#else
  auto program = kiln::compile<net, kiln::batch<1>>();
#endif
  return static_cast<int>(program.batch_size) - 1;
}
