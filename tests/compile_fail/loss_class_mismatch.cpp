// A loss that expects another number of classes than the model outputs is
// rejected, naming the loss and the model's output shape.
// expect: kiln::softmax_cross_entropy<C>: C must equal the size of the model's output
// expect: loss_class_count_must_equal_model_output_size<kiln::softmax_cross_entropy<12>, kiln::shape<10> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<784>, kiln::dense<10>>;

int main() {
#ifdef KILN_SHOULD_FAIL
  auto program = kiln::compile<net, kiln::batch<8>, kiln::softmax_cross_entropy<12>>();
#else
  auto program = kiln::compile<net, kiln::batch<8>, kiln::softmax_cross_entropy<10>>();
#endif
  return static_cast<int>(program.output_size) - 10;
}
