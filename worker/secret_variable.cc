#include "worker/secret_variable.h"

#include <cstdlib>
#include <cstring>

namespace dslaunch::worker {

std::string take_secret_variable(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return "";
  std::string secret(value);
  std::memset(value, '*', secret.size());
  unsetenv(name);
  return secret;
}

}  // namespace dslaunch::worker
