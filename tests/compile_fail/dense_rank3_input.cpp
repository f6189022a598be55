// A dense layer fed a rank-3 sample, deeper in the model, is rejected with
// its position (3) and the rank-3 shape it was given.
// expect: kiln::dense: the input must be a vector \(rank 1\); put kiln::flatten before this layer
// expect: dense_input_must_be_a_vector_use_flatten_first<kiln::layer_at<3, kiln::dense<16> ?>, kiln::shape<3, 8, 8> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<3, 8, 8>, kiln::relu, kiln::tanh, kiln::dense<16>>;
#else
using net = kiln::model<kiln::input<3, 8, 8>, kiln::relu, kiln::flatten, kiln::dense<16>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 16; }
