// libFuzzer target: job specs (YAML), --set overrides, and the batch-size
// resolution that follows. Besides crashes, hangs and sanitizer reports, it
// checks that a spec accepted without errors keeps the promises later stages
// rely on, and traps when one is broken.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/batch_size.h"
#include "core/spec/spec_parser.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/spec_promises.h"

using dslaunch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  dslaunch::spec::LoadOptions options;
  const int overrides = input.ConsumeIntegralInRange(0, 2);
  for (int i = 0; i < overrides; ++i)
    options.overrides.push_back(input.ConsumeRandomLengthString(48));
  const int64_t data_parallel = input.ConsumeIntegralInRange<int64_t>(1, 4096);
  const std::string yaml = input.ConsumeRemainingBytesAsString();

  dslaunch::spec::Diagnostics diagnostics;
  dslaunch::spec::SourceMap locations;
  const dslaunch::spec::JobSpec spec =
      dslaunch::spec::parse_job_spec(yaml, "fuzz.yaml", options, diagnostics, locations);
  require(!diagnostics.format().empty() || !diagnostics.has_errors());
  if (diagnostics.has_errors()) return 0;
  dslaunch::fuzz::check_accepted_spec(spec);

  const auto resolved = dslaunch::spec::resolve_batch_sizes(spec.training.batch, data_parallel);
  if (resolved.sizes) {
    const auto& sizes = *resolved.sizes;
    require(sizes.train_batch_size > 0 && sizes.micro_batch_per_gpu > 0 &&
            sizes.gradient_accumulation_steps > 0);
    require(sizes.train_batch_size ==
            sizes.micro_batch_per_gpu * sizes.gradient_accumulation_steps * data_parallel);
  } else {
    require(!resolved.error.empty());
  }
  return 0;
}
