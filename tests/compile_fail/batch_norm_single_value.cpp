// batch_norm over features with one sample per batch has no statistics to take.
// expect: kiln::batch_norm: a batch must give each channel more than one value
// expect: batch_norm_needs_more_than_one_value_per_channel_in_a_batch<kiln::layer_at<2, kiln::batch_norm>, 1, 1>
// expect-errors: 1
#include <kiln/kiln.hpp>

using net = kiln::model<kiln::input<4>, kiln::dense<3>, kiln::batch_norm>;
#ifdef KILN_SHOULD_FAIL
using one = kiln::batch<1>;
#else
using one = kiln::batch<2>;
#endif

int main() {
  auto p = kiln::compile<net, one>(1);
  return static_cast<int>(p.parameters().size()) == 0;
}
