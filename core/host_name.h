#pragma once

#include <string>

namespace dslaunch::core {

// This machine's host name (gethostname); "" when it cannot be read.
std::string host_name();

}  // namespace dslaunch::core
