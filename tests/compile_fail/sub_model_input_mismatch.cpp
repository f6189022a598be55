// A model used as a layer must receive the input shape it declares.
// expect: kiln::model used as a layer: it must receive the input<...> shape it declares
// expect: a_model_used_as_a_layer_receives_the_input_it_declares<kiln::layer_at<2, encoder>, kiln::shape<8>, kiln::shape<6> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

struct encoder : kiln::model<kiln::input<8>, kiln::dense<8>, kiln::relu> {};
#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<5>, kiln::dense<6>, encoder>;
#else
using net = kiln::model<kiln::input<5>, kiln::dense<8>, encoder>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 8; }
