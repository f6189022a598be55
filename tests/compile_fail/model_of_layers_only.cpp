// A model given layers but no input<...>, compiled: one error (not also
// "needs a layer after its input", nor one from compile).
// expect: kiln::model: the first entry must be kiln::input<...>, the shape of one sample
// expect: model_must_start_with_kiln_input<kiln::dense<10> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::dense<10>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<10>>;
#endif

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  return static_cast<int>(program.batch_size) - 2;
}
