#include "proto/grpc_status.h"

#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::proto {
namespace {

TEST_CASE("from_grpc maps every gRPC code and keeps the message") {
  const std::vector<std::pair<grpc::StatusCode, core::StatusCode>> cases = {
      {grpc::StatusCode::UNAVAILABLE, core::StatusCode::kUnavailable},
      {grpc::StatusCode::CANCELLED, core::StatusCode::kUnavailable},
      {grpc::StatusCode::ABORTED, core::StatusCode::kUnavailable},
      {grpc::StatusCode::DEADLINE_EXCEEDED, core::StatusCode::kDeadlineExceeded},
      {grpc::StatusCode::FAILED_PRECONDITION, core::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::INVALID_ARGUMENT, core::StatusCode::kInvalidArgument},
      {grpc::StatusCode::NOT_FOUND, core::StatusCode::kNotFound},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, core::StatusCode::kResourceExhausted},
      {grpc::StatusCode::UNAUTHENTICATED, core::StatusCode::kUnauthenticated},
      {grpc::StatusCode::PERMISSION_DENIED, core::StatusCode::kUnauthenticated},
      {grpc::StatusCode::DATA_LOSS, core::StatusCode::kDataLoss},
      {grpc::StatusCode::INTERNAL, core::StatusCode::kInternal},
      {grpc::StatusCode::UNKNOWN, core::StatusCode::kInternal},
      {grpc::StatusCode::UNIMPLEMENTED, core::StatusCode::kInternal},
      {grpc::StatusCode::ALREADY_EXISTS, core::StatusCode::kInternal},
      {grpc::StatusCode::OUT_OF_RANGE, core::StatusCode::kInternal},
  };
  for (const auto& [grpc_code, code] : cases) {
    INFO("gRPC code " << static_cast<int>(grpc_code));
    const core::Status status = from_grpc(grpc::Status(grpc_code, "the controller said no"));
    CHECK(status.code() == code);
    CHECK(status.message() == "the controller said no");
  }
}

TEST_CASE("from_grpc of OK is ok") {
  CHECK(from_grpc(grpc::Status::OK).ok());
  CHECK(to_grpc(core::Status()).ok());
}

TEST_CASE("to_grpc(from_grpc(x)) is x for the codes that map one to one") {
  for (const grpc::StatusCode code :
       {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::INVALID_ARGUMENT,
        grpc::StatusCode::NOT_FOUND, grpc::StatusCode::RESOURCE_EXHAUSTED,
        grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::DATA_LOSS,
        grpc::StatusCode::INTERNAL}) {
    INFO("gRPC code " << static_cast<int>(code));
    const grpc::Status back = to_grpc(from_grpc(grpc::Status(code, "why")));
    CHECK(back.error_code() == code);
    CHECK(back.error_message() == "why");
  }
}

TEST_CASE("to_grpc sends kIoError, which gRPC has no code for, as INTERNAL") {
  const grpc::Status status = to_grpc(core::Status(core::StatusCode::kIoError, "disk gone"));
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK(status.error_message() == "disk gone");
}

}  // namespace
}  // namespace dslaunch::proto
