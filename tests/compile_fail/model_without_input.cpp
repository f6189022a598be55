// A model's first entry is kiln::input<...> (here a bare shape was given).
// expect: kiln::model: the first entry must be kiln::input<...>, the shape of one sample
// expect: model_must_start_with_kiln_input<kiln::shape<4> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::shape<4>, kiln::dense<2>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<2>>;
#endif

int main() { return static_cast<int>(net::parameter_count) - 10; }
