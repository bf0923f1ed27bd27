#include "core/escaped_exception.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

namespace dslaunch::core {

int report_escaped_exception(std::string_view program) noexcept {
  std::string what = "an unknown exception";
  try {
    throw;
  } catch (const std::bad_alloc&) {
    what = "out of memory (the inputs ask for more than this machine has)";
  } catch (const std::exception& error) {
    what = error.what();
  } catch (...) {
  }
  // stdio rather than iostreams: nothing here may throw again.
  std::fprintf(stderr, "%.*s: error: %s; please report this if the input was valid\n",
               static_cast<int>(program.size()), program.data(), what.c_str());
  return kEscapedExceptionExit;
}

}  // namespace dslaunch::core
