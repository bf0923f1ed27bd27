#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::core {

// A size for people to read, in the largest binary unit it reaches:
// "1.5 GiB", "3.0 MiB", "12.4 KiB", "700 B".
std::string byte_size_text(int64_t bytes);

}  // namespace dslaunch::core
