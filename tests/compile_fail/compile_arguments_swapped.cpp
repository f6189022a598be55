// compile<batch<B>, Model>: the model comes first. One error, nothing after it about the options.
// expect: kiln::compile<M, Options...>: M must be a kiln::model<input<...>, layers...>; the model comes first
// expect: compile_takes_the_model_first_then_the_options<kiln::batch<4>, kiln::model<kiln::input<4>, kiln::dense<2> ?> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<2>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  kiln::compile<kiln::batch<4>, net>();
#else
  kiln::compile<net, kiln::batch<4>>();
#endif
}
