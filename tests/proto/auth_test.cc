// The job token: generation, the authorization value, and its comparison.
#include "proto/auth.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

namespace proto = dslaunch::proto;

TEST_CASE("a generated token is 64 lower-case hex characters") {
  const proto::TokenResult result = proto::generate_token();
  REQUIRE(result.ok());
  CHECK(result.token.size() == 64);
  CHECK(result.token.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("two generated tokens differ") {
  const proto::TokenResult first = proto::generate_token();
  const proto::TokenResult second = proto::generate_token();
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first.token != second.token);
}

TEST_CASE("the authorization value is the token after 'Bearer '") {
  CHECK(proto::kAuthorizationKey == "authorization");
  CHECK(proto::bearer_value("0a1b") == "Bearer 0a1b");
}

TEST_CASE("constant-time comparison matches only identical strings") {
  CHECK(proto::constant_time_equals("abc123", "abc123"));
  CHECK(proto::constant_time_equals("", ""));
  CHECK_FALSE(proto::constant_time_equals("abc123", "abc124"));
  CHECK_FALSE(proto::constant_time_equals("xbc123", "abc123"));
  CHECK_FALSE(proto::constant_time_equals("abc123", "abc1234"));
  CHECK_FALSE(proto::constant_time_equals("abc", ""));
}

TEST_CASE("an authorization value matches only 'Bearer ' and the exact token") {
  const std::string token = proto::generate_token().token;
  CHECK(proto::authorization_matches("Bearer " + token, token));
  CHECK_FALSE(proto::authorization_matches(token, token));
  CHECK_FALSE(proto::authorization_matches("bearer " + token, token));
  CHECK_FALSE(proto::authorization_matches("Bearer  " + token, token));
  CHECK_FALSE(proto::authorization_matches("Bearer " + token + "0", token));
  CHECK_FALSE(proto::authorization_matches("Bearer " + token.substr(1), token));
  CHECK_FALSE(proto::authorization_matches("", token));
  CHECK_FALSE(proto::authorization_matches("Bearer", token));
}

TEST_CASE("an empty expected token matches nothing, not even an empty bearer") {
  CHECK_FALSE(proto::authorization_matches("Bearer ", ""));
  CHECK_FALSE(proto::authorization_matches("", ""));
}

TEST_CASE("a credential file is read whole, and a missing one is named in the error") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string path = dir + "/cert.pem";
  std::ofstream(path) << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

  std::string contents;
  std::string error;
  REQUIRE(proto::read_credential_file(path, contents, error));
  CHECK(contents == "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  CHECK(error.empty());

  CHECK_FALSE(proto::read_credential_file(dir + "/missing.pem", contents, error));
  CHECK(error == dir + "/missing.pem: cannot read: No such file or directory");

  std::ofstream(dir + "/empty.pem").close();
  CHECK_FALSE(proto::read_credential_file(dir + "/empty.pem", contents, error));
  CHECK(error == dir + "/empty.pem: empty file; expected a PEM certificate or key");
}
