// Two layers that tie one weight but want different shapes are rejected; the
// diagnostics name the tag, both layers with their positions, and both shapes.
// expect: kiln::tied<Tag>: the layers that share a weight must agree on its shape
// expect: tied_uses_of_a_weight_must_agree_on_its_shape<shared, kiln::layer_at<1, kiln::dense<10, kiln::tied<shared> ?> ?>, kiln::shape<10, 32>, kiln::layer_at<2, kiln::dense<32, kiln::tied<shared> ?> ?>, kiln::shape<32, 10> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

struct shared;

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<32>, kiln::dense<10, kiln::tied<shared>>, kiln::dense<32, kiln::tied<shared>>>;
#else
using net = kiln::model<kiln::input<32>, kiln::dense<10, kiln::tied<shared>>, kiln::dense<32, kiln::tied_transposed<shared>>>;
#endif

int main() { return static_cast<int>(net::parameter_count) - (320 + 10 + 32); }
