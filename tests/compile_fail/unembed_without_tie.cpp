// unembed<> names no tied weight: one error naming the layer and its
// position, and no second one about a missing embedding.
// expect: kiln::unembed<tied<Tag>>: name the embedding's weight with exactly one tied<Tag>
// expect: unembed_takes_one_option_tied_tag<kiln::layer_at<2, kiln::unembed<> ?> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

struct chars;
#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<20, 4, kiln::tied<chars>>, kiln::unembed<>>;
#else
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<20, 4, kiln::tied<chars>>, kiln::unembed<kiln::tied<chars>>>;
#endif

int main() { return net::parameter_count == 80 ? 0 : 1; }
