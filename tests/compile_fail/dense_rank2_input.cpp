// A dense layer fed an image (rank 2) without flatten is rejected; the
// diagnostics name the layer, its position and the shape it was given.
// expect: kiln::dense: the input must be a vector \(rank 1\); put kiln::flatten before this layer
// expect: dense_input_must_be_a_vector_use_flatten_first<kiln::layer_at<1, kiln::dense<10> ?>, kiln::shape<28, 28> ?>
// expect: [Ii]n instantiation of .*kiln::dense<10>::bind<kiln::shape<28, 28>, 1, kiln::declared_parameters<> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<28, 28>, kiln::dense<10>>;
#else
using net = kiln::model<kiln::input<28, 28>, kiln::flatten, kiln::dense<10>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 10; }
