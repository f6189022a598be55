#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "odr_model.hpp"

double odr_loss_a();

TEST(odr, two_translation_units_agree) { EXPECT_EQ(odr_loss_a(), kiln::odr_test::run()); }
