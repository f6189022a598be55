// Static checks of kiln/shape.hpp and kiln/input.hpp: compiling is passing.
#include <kiln/input.hpp>
#include <kiln/shape.hpp>

#include <type_traits>

namespace {
using kiln::shape;

static_assert(shape<28, 28>::rank == 2 && shape<28, 28>::size == 784);
static_assert(shape<>::rank == 0 && shape<>::size == 1);
static_assert(shape<3, 4, 5>::extent(0) == 3 && shape<3, 4, 5>::extent(2) == 5);
static_assert(std::is_same_v<kiln::flatten_t<shape<28, 28>>, shape<784>>);
static_assert(std::is_same_v<kiln::concat_t<shape<2>, shape<3, 4>>, shape<2, 3, 4>>);
static_assert(shape<10>{} == shape<10>{});
static_assert(shape<10>{} != shape<5, 2>{});
static_assert(kiln::Shape<shape<1, 2>> && !kiln::Shape<int>);
static_assert(kiln::ShapeOfRank<shape<1, 2>, 2> && !kiln::ShapeOfRank<shape<1, 2>, 1>);

// Misuses that are not spelled as a whole program are checked inline.
template <class S>
concept flattenable = requires {
  typename kiln::flatten_t<S>;
};
static_assert(!flattenable<int>, "flatten_t takes only shapes");
static_assert(kiln::Input<kiln::input<784>> && !kiln::Input<shape<784>>);
static_assert(std::is_same_v<kiln::input<28, 28>::shape_type, shape<28, 28>>);
}  // namespace
