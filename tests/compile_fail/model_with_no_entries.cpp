// model<> (no input, no layer): one error, not a wrong count of template arguments.
// expect: kiln::model<>: a model lists its input<...> first, then at least one layer
// expect: model_lists_its_input_then_at_least_one_layer<>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<2>>;
#endif

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  return static_cast<int>(program.parameters().size()) > 0 ? 0 : 1;
}
