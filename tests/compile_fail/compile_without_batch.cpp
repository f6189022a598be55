// compile<> without a batch size is rejected.
// expect: kiln::compile<Model, Options...>: give exactly one batch<B> option
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::precision<double>>();
#else
  auto program = kiln::compile<net, kiln::batch<2>, kiln::precision<double>>();
#endif
  return static_cast<int>(program.batch_size) - 2;
}
