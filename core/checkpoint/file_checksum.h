#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dslaunch::core {

// An xxh64 hash (seed 0) as 16 lowercase hex digits: how checkpoint shards'
// checksums are written in events and manifests.
std::string xxh64_hex(uint64_t hash);

// The xxh64 of the whole file at `path`, read in large blocks, as
// xxh64_hex gives it; nullopt with `error` (naming the file and the reason)
// when it cannot be read.
std::optional<std::string> file_xxh64(const std::string& path, std::string& error);

}  // namespace dslaunch::core
