// Included first by every header in kiln/detail/: internals are reached
// through the public headers, never directly.
#ifndef KILN_FWD_INCLUDED
#error "kiln/detail/ holds kiln's internals: include <kiln/kiln.hpp> or a public kiln header instead"
#endif

// Every file that includes kiln says as the program starts what it was
// compiled for: a program whose files differ stops, naming two of them.
#include <kiln/detail/build_target.hpp>
