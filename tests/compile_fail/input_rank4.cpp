// An input of rank 4 is rejected.
// expect: kiln::input<D...>: an input sample has 1 to 3 extents
// expect: input_rank_must_be_1_2_or_3<2, 3, 4, 5>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<2, 3, 4, 5>, kiln::flatten, kiln::dense<2>>;
#else
using net = kiln::model<kiln::input<2, 3, 4>, kiln::flatten, kiln::dense<2>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 2; }
