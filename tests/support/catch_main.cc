// main() for single-process Catch2 tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
