// libFuzzer target: a job folder's state.json, read by
// JobDirectory::read_state and turned into the job's status by
// status_from_json, as `dslaunch status` and a resumed run read it. Besides
// crashes, hangs and sanitizer reports, it traps when a promise is broken:
// read_state gives a JSON value or an error; whatever JSON it gives becomes a
// status whose own JSON (as state.json would be written) reads back as the
// same status and survives being written out as text.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "launcher/controller/job_directory.h"
#include "launcher/controller/job_status.h"
#include "tests/fuzz/fuzz_support.h"

using dslaunch::fuzz::require;
namespace controller = dslaunch::controller;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dslaunch::fuzz::clear_scratch_dir();
  dslaunch::fuzz::write_scratch_file("state.json",
                                     std::string(reinterpret_cast<const char*>(data), size));
  std::string error;
  const auto directory = controller::JobDirectory::open(dslaunch::fuzz::scratch_dir(), error);
  require(directory.has_value());
  const auto state = directory->read_state(error);
  if (!state) {
    require(!error.empty());
    return 0;
  }
  const nlohmann::json status = controller::status_to_json(controller::status_from_json(*state));
  require(controller::status_to_json(controller::status_from_json(status)) == status);
  const auto reread = dslaunch::core::parse_untrusted_json(status.dump(), error);
  require(reread.has_value() && *reread == status);
  return 0;
}
