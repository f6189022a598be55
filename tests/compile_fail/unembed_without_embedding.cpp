// unembed<tied<Tag>> with no embedding declaring Tag is rejected, naming the
// tag and the unembed's position.
// expect: kiln::unembed<tied<Tag>>: no embedding<Vocab, Dim, tied<Tag>> in this model declares Tag
// expect: unembed_needs_an_embedding_tied_to_the_same_tag<out_table, kiln::layer_at<3, kiln::unembed<kiln::tied<out_table> ?> ?>, kiln::declared_parameters<kiln::param<in_table, kiln::shape<50, 16>, kiln::init::lecun_normal> ?> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

struct in_table;
struct out_table;

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<50, 16, kiln::tied<in_table>>, kiln::flatten,
                        kiln::unembed<kiln::tied<out_table>>>;
#else
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<50, 16, kiln::tied<in_table>>,
                        kiln::unembed<kiln::tied<in_table>>>;
#endif

int main() { return net::output_shape_type::rank == 2 ? 0 : 1; }
