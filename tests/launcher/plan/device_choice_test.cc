#include "launcher/plan/device_choice.h"

#include <catch2/catch.hpp>

using dslaunch::plan::choose_device;
using dslaunch::spec::Device;

TEST_CASE("auto is cuda only where GPUs are visible, the build trains on them and the job fits") {
  const auto none = choose_device(0, true, "");
  CHECK(none.device == Device::kCpu);
  CHECK(none.reason == "cpu: no GPU visible on this machine (nvidia-smi found none)");

  const auto unbuilt = choose_device(4, false, "");
  CHECK(unbuilt.device == Device::kCpu);
  CHECK(unbuilt.reason ==
        "cpu: 4 GPU(s) visible, but this build trains on CPU only (training on GPUs needs a "
        "build with --config=cuda)");

  const auto lacking = choose_device(2, true, "ZeRO stage 3 on GPUs ...");
  CHECK(lacking.device == Device::kCpu);
  CHECK(lacking.reason ==
        "cpu: 2 GPU(s) visible, but this job needs what training on GPUs does not do yet "
        "(ZeRO stage 3 on GPUs ...)");

  const auto gpus = choose_device(8, true, "");
  CHECK(gpus.device == Device::kCuda);
  CHECK(gpus.reason == "cuda: 8 GPU(s) visible");
}
