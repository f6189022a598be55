// A model with an input and no layer is rejected.
// expect: kiln::model: a model needs at least one layer after its input<...>
// expect: model_needs_at_least_one_layer_after_its_input<kiln::input<784>, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<784>>;
#else
using net = kiln::model<kiln::input<784>, kiln::dense<2>>;
#endif

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  return static_cast<int>(program.batch_size) - 2;
}
