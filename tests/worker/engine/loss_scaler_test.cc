// The loss scaler against the sequences DeepSpeed's own unit tests
// (tests/unit/runtime/half_precision/test_dynamic_loss_scale.py) check, for
// both of its scalers: FP16_Optimizer (ZeRO stage 0) and the ZeRO
// optimizers' DynamicLossScaler.
#include <catch2/catch.hpp>

#include "worker/engine/loss_scaler.h"

using dslaunch::spec::Fp16Spec;
using dslaunch::worker::engine::LossScaler;

namespace {

Fp16Spec dynamic(int power, int window, int hysteresis = 2, double min_scale = 1) {
  Fp16Spec fp16;
  fp16.enabled = true;
  fp16.initial_scale_power = power;
  fp16.loss_scale_window = window;
  fp16.hysteresis = hysteresis;
  fp16.min_loss_scale = min_scale;
  return fp16;
}

}  // namespace

TEST_CASE("no overflow with power 8 and window 2 doubles the scale every second step") {
  SECTION("ZeRO stage 0: FP16_Optimizer grows after the window has passed since iteration 0") {
    LossScaler scaler(dynamic(8, 2), 0);
    REQUIRE(scaler.flavour() == LossScaler::Flavour::kFp16Optimizer);
    // DeepSpeed's check: after each step the scale is the expected one, and
    // the expectation doubles after every step that ends on an even iteration.
    double expected = 256;
    for (int i = 0; i < 10; ++i) {
      CHECK(scaler.update(false).empty());
      CHECK(scaler.scale() == expected);
      CHECK(scaler.state().iteration == i + 1);
      if (scaler.state().iteration % 2 == 0) expected *= 2;
    }
    CHECK(scaler.scale() == 256 * 16);
  }
  SECTION("ZeRO stages 1-3: DynamicLossScaler grows one step earlier") {
    LossScaler scaler(dynamic(8, 2), 2);
    REQUIRE(scaler.flavour() == LossScaler::Flavour::kZero);
    const double expected[] = {256, 512, 512, 1024, 1024, 2048};
    for (double scale : expected) {
      CHECK(scaler.update(false).empty());
      CHECK(scaler.scale() == scale);
    }
    CHECK(scaler.state().skipped_steps == 0);
  }
}

TEST_CASE("eight overflowing steps from power 4 halve the scale down to the floor") {
  SECTION("FP16_Optimizer stays at the floor") {
    LossScaler scaler(dynamic(4, 2, 1, 0.25), 0);
    const double expected[] = {8, 4, 2, 1, 0.5, 0.25, 0.25, 0.25};
    for (int i = 0; i < 8; ++i) {
      CHECK(scaler.update(true).empty());
      CHECK(scaler.scale() == expected[i]);
      CHECK(scaler.state().iteration == i + 1);
    }
    CHECK(scaler.state().skipped_steps == 8);
  }
  SECTION("DynamicLossScaler with hysteresis 1 ends the run at the floor unless told not to") {
    for (bool raise : {true, false}) {
      Fp16Spec fp16 = dynamic(4, 2, 1, 0.25);
      fp16.raise_error_at_min_scale = raise;
      LossScaler scaler(fp16, 1);
      const double expected[] = {8, 4, 2, 1, 0.5, 0.25};
      for (double scale : expected) {
        CHECK(scaler.update(true).empty());
        CHECK(scaler.scale() == scale);
      }
      const std::string error = scaler.update(true);
      CHECK(error.empty() == !raise);
      if (raise) CHECK_THAT(error, Catch::Contains("fp16.min_loss_scale (0.25)"));
      CHECK(scaler.scale() == 0.25);
    }
  }
}

TEST_CASE("overflows and growth mixed") {
  SECTION("FP16_Optimizer: two overflows, window + 1 good steps grow once, one overflow") {
    LossScaler scaler(dynamic(8, 2), 0);
    scaler.update(true);
    scaler.update(true);
    CHECK(scaler.scale() == 64);
    for (int i = 0; i < 3; ++i) scaler.update(false);
    CHECK(scaler.scale() == 128);
    CHECK(scaler.state().iteration == 5);
    scaler.update(true);
    CHECK(scaler.scale() == 64);
    CHECK(scaler.state().skipped_steps == 3);
  }
  SECTION("DynamicLossScaler: hysteresis absorbs overflows until the scale grows again") {
    LossScaler scaler(dynamic(8, 2, 2), 1);
    scaler.update(true);  // hysteresis 2 -> 1, scale kept
    CHECK(scaler.scale() == 256);
    scaler.update(true);  // now it halves
    CHECK(scaler.scale() == 128);
    scaler.update(true);  // hysteresis stays spent: halves again
    CHECK(scaler.scale() == 64);
    scaler.update(false);  // (3 - 2) % 2 != 0
    CHECK(scaler.scale() == 64);
    scaler.update(false);  // (4 - 2) % 2 == 0: grows, hysteresis restored
    CHECK(scaler.scale() == 128);
    scaler.update(true);  // absorbed by the restored hysteresis
    CHECK(scaler.scale() == 128);
    CHECK(scaler.state().skipped_steps == 4);
  }
  SECTION("consecutive_hysteresis restores it after every good step") {
    Fp16Spec fp16 = dynamic(8, 100, 2);
    fp16.consecutive_hysteresis = true;
    LossScaler scaler(fp16, 3);
    for (int i = 0; i < 4; ++i) {
      scaler.update(true);   // always absorbed
      scaler.update(false);  // restores it
    }
    CHECK(scaler.scale() == 256);
    fp16.consecutive_hysteresis = false;
    LossScaler plain(fp16, 3);
    for (int i = 0; i < 2; ++i) {
      plain.update(true);
      plain.update(false);
    }
    CHECK(plain.scale() == 128);
  }
}

TEST_CASE("a static scale never changes and bf16/fp32 have none") {
  Fp16Spec fp16;
  fp16.enabled = true;
  fp16.loss_scale = 128;
  LossScaler fixed(fp16, 0);
  CHECK(fixed.flavour() == LossScaler::Flavour::kStatic);
  fixed.update(true);
  fixed.update(false);
  CHECK(fixed.scale() == 128);
  CHECK(fixed.state().skipped_steps == 1);
  LossScaler none(Fp16Spec{}, 2);
  CHECK_FALSE(none.skips_overflow());
  CHECK(none.scale() == 1);
}
