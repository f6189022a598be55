// A program's arithmetic is float, double or bf16.
// expect: kiln::precision<T>: T must be float, double or kiln::bf16
// expect: precision_must_be_float_double_or_bf16<int>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<2>, kiln::precision<int>>();
#else
  auto program = kiln::compile<net, kiln::batch<2>, kiln::precision<double>>();
#endif
  return static_cast<int>(program.batch_size) - 2;
}
