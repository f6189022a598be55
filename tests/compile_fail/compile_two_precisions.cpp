// Two precision<> options: one would be silently ignored, so it is an error.
// expect: kiln::compile<Model, Options...>: give at most one precision<T> option
// expect: compile_takes_at_most_one_precision<
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<4>, kiln::precision<double>, kiln::precision<float>>();
#else
  auto program = kiln::compile<net, kiln::batch<4>, kiln::precision<double>>();
#endif
  return static_cast<int>(program.batch_size) - 4;
}
