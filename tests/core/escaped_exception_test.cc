#include "core/escaped_exception.h"

#include <unistd.h>

#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

// What report_escaped_exception prints on stderr for the exception `thrower` throws.
template <typename Thrower>
std::pair<int, std::string> report_of(Thrower thrower) {
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(capture), STDERR_FILENO);
  int code = 0;
  try {
    thrower();
  } catch (...) {
    code = report_escaped_exception("dstest");
  }
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(capture);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), capture));
  std::fclose(capture);
  return {code, text};
}

TEST_CASE("an exception that escapes main becomes a message and an exit code") {
  const auto [code, text] = report_of([] { throw std::runtime_error("the disk is on fire"); });
  CHECK(code == kEscapedExceptionExit);
  CHECK(text == "dstest: error: the disk is on fire; please report this if the input was valid\n");
  CHECK_THAT(report_of([] { throw std::bad_alloc(); }).second,
             Catch::StartsWith("dstest: error: out of memory"));
  CHECK_THAT(report_of([] { throw 42; }).second,
             Catch::StartsWith("dstest: error: an unknown exception"));
}

}  // namespace
}  // namespace dslaunch::core
