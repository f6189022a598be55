// A residual branch must give back the shape it receives.
// expect: kiln::residual<Layers...>: the branch must give back the shape it receives
// expect: residual_branch_must_keep_the_shape_of_its_input<kiln::layer_at<2, kiln::residual<kiln::dense<4> ?> ?>, kiln::shape<6>, kiln::shape<4> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<5>, kiln::dense<6>, kiln::residual<kiln::dense<4>>>;
#else
using net = kiln::model<kiln::input<5>, kiln::dense<6>, kiln::residual<kiln::dense<6>>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 6; }
