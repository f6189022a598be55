// Two losses: one would be silently ignored, so it is an error.
// expect: kiln::compile<Model, Options...>: give at most one loss
// expect: compile_takes_at_most_one_loss<
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<4>, kiln::mse, kiln::softmax_cross_entropy<>>();
#else
  auto program = kiln::compile<net, kiln::batch<4>, kiln::mse>();
#endif
  return static_cast<int>(program.batch_size) - 4;
}
