// unembed fed vectors of another width than the tied embedding's rows.
// expect: kiln::unembed: the input's last extent must equal the tied embedding's Dim
// expect: unembed_input_width_must_equal_the_embedding_dim<kiln::layer_at<4, kiln::unembed<kiln::tied<table> ?> ?>, kiln::shape<12>, kiln::shape<50, 16> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

struct table;

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<50, 16, kiln::tied<table>>, kiln::flatten,
                        kiln::dense<12>, kiln::unembed<kiln::tied<table>>>;
#else
using net = kiln::model<kiln::input_tokens<8>, kiln::embedding<50, 16, kiln::tied<table>>, kiln::flatten,
                        kiln::dense<16>, kiln::unembed<kiln::tied<table>>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 50; }
