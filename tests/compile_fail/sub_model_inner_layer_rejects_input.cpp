// A layer that rejects its input inside a model used as a layer is reported
// once, where that model is defined (with its position there), and not again
// where the outer model binds it.
// expect: kiln::dense: the input must be a vector \(rank 1\); put kiln::flatten before this layer
// expect: dense_input_must_be_a_vector_use_flatten_first<kiln::layer_at<1, kiln::dense<8> ?>, kiln::shape<2, 4> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
struct encoder : kiln::model<kiln::input<2, 4>, kiln::dense<8>, kiln::relu> {};
#else
struct encoder : kiln::model<kiln::input<2, 4>, kiln::flatten, kiln::dense<8>, kiln::relu> {};
#endif
using net = kiln::model<kiln::input<2, 4>, encoder, kiln::dense<2>>;

int main() { return static_cast<int>(net::output_shape_type::size) - 2; }
