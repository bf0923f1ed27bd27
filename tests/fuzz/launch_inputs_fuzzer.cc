// libFuzzer target: what the launcher reads besides the spec for a
// multi-host run, each from bytes it does not control: a `.deepspeed_env`
// file, cluster.launcher_args (shell words), cluster.network_interface as an
// IPv4 subnet, and the identity in a client's certificate. Besides crashes,
// hangs and sanitizer reports, it traps when a promise is broken: a file
// that loads gives only valid variable names, one that does not says where;
// a subnet that parses has no host bits and holds its own network address.
#include <fuzzer/FuzzedDataProvider.h>

#include <arpa/inet.h>

#include <map>
#include <string>

#include "core/ipv4_subnet.h"
#include "core/shell_words.h"
#include "launcher/runner/exported_environment.h"
#include "proto/rank_certificates.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using dslaunch::fuzz::require;

bool valid_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (const char c : name) {
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
      return false;
    }
  }
  return true;
}

void check_env_file(const std::string& text) {
  dslaunch::fuzz::clear_scratch_dir();
  const std::string path = dslaunch::fuzz::write_scratch_file("deepspeed_env", text);
  std::map<std::string, std::string> variables;
  std::string error;
  const bool loaded = dslaunch::runner::exported_environment({}, {path}, variables, error);
  require(loaded == error.empty());
  if (!loaded) require(error.rfind(path + ":", 0) == 0);
  for (const auto& [name, value] : variables) require(valid_name(name));
}

void check_subnet(const std::string& text) {
  const std::optional<dslaunch::core::Ipv4Subnet> subnet = dslaunch::core::Ipv4Subnet::parse(text);
  if (!subnet) return;
  require(subnet->prefix_length >= 0 && subnet->prefix_length <= 32);
  in_addr address{htonl(subnet->network)};
  char dotted[INET_ADDRSTRLEN] = {};
  require(inet_ntop(AF_INET, &address, dotted, sizeof(dotted)) != nullptr);
  require(subnet->contains(dotted));
  if (subnet->prefix_length > 0) {
    require((subnet->network & ~(~uint32_t{0} << (32 - subnet->prefix_length))) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider input(bytes, size);
  const int which = input.ConsumeIntegralInRange(0, 3);
  const std::string text = input.ConsumeRemainingBytesAsString();
  switch (which) {
    case 0:
      check_env_file(text);
      break;
    case 1: {
      std::string error;
      const auto words = dslaunch::core::split_shell_words(text, error);
      require(words.has_value() == error.empty());
      break;
    }
    case 2:
      check_subnet(text);
      break;
    default:
      (void)dslaunch::proto::identity_in_certificate(text);
      break;
  }
  return 0;
}
