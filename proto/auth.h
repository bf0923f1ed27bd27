#pragma once

#include <string>
#include <string_view>

// The job token: a per-job secret that `dslaunch run` generates, hands to its
// ranks through the environment and writes (mode 0600) into the job directory
// for the CLI. Every call to the Controller service carries it in the
// `authorization` metadata entry as "Bearer <token>". The token is never put
// into a message or a log line.
namespace dslaunch::proto {

// The gRPC metadata key that carries the token (lower case, as gRPC requires).
inline constexpr std::string_view kAuthorizationKey = "authorization";
inline constexpr std::string_view kBearerPrefix = "Bearer ";
// Bytes of randomness in a token; the token is their lower-case hex (64 characters).
inline constexpr int kTokenBytes = 32;

struct TokenResult {
  std::string token;  // 64 lower-case hex characters when ok()
  std::string error;  // why no token could be made (the OS's randomness failed)
  bool ok() const { return error.empty(); }
};

// A fresh token from the kernel's CSPRNG (getrandom(2)). Thread-safe; may
// block only during early boot, before the kernel's pool is initialised.
TokenResult generate_token();

// "Bearer <token>": the value of the authorization entry.
std::string bearer_value(std::string_view token);

// Compares in time that depends only on the lengths, never on where the
// first difference is, so a caller cannot guess a token byte by byte.
bool constant_time_equals(std::string_view a, std::string_view b);

// Whether an authorization metadata value presents `token`. An empty
// expected token never matches (a server without a token refuses everyone).
bool authorization_matches(std::string_view metadata_value, std::string_view token);

// Reads a credential file (a TLS certificate, key or CA bundle, in PEM) whole.
// Returns false and sets `error`, naming the file and the reason, on failure.
bool read_credential_file(const std::string& path, std::string& contents, std::string& error);

}  // namespace dslaunch::proto
