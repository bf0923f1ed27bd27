#include "kernels/cpu/blas_info.h"

#include <cblas.h>

#include <vector>

#include <catch2/catch.hpp>

TEST_CASE("OpenBLAS describes itself") {
  const auto info = dslaunch::kernels::query_blas_info();
  CHECK(!info.core_name.empty());
  CHECK(info.config.find("OpenBLAS") != std::string::npos);
  CHECK(info.threads >= 1);
}

TEST_CASE("the linked BLAS multiplies matrices correctly") {
  // A (2x3) * B (3x2), row-major, against the product worked by hand.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {7, 8, 9, 10, 11, 12};
  std::vector<float> c(4, -1.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2,
              0.0f, c.data(), 2);
  CHECK(c == std::vector<float>{58, 64, 139, 154});
}

TEST_CASE("the OpenMP build of OpenBLAS is linked, sharing the kernels' thread pool") {
  CHECK(dslaunch::kernels::query_blas_info().config.find("USE_OPENMP") != std::string::npos);
}
