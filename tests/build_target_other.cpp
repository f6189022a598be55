// The second file of build_target_main.cpp's program.
#include <kiln/kiln.hpp>

#include "odr_model.hpp"

double loss_in_the_other_file() { return kiln::odr_test::run(); }
