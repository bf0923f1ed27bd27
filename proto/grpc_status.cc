#include "proto/grpc_status.h"

namespace dslaunch::proto {
namespace {

core::StatusCode core_code(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return core::StatusCode::kOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
      return core::StatusCode::kUnavailable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return core::StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return core::StatusCode::kFailedPrecondition;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return core::StatusCode::kInvalidArgument;
    case grpc::StatusCode::NOT_FOUND:
      return core::StatusCode::kNotFound;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return core::StatusCode::kResourceExhausted;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return core::StatusCode::kUnauthenticated;
    case grpc::StatusCode::DATA_LOSS:
      return core::StatusCode::kDataLoss;
    default:
      return core::StatusCode::kInternal;
  }
}

grpc::StatusCode grpc_code(core::StatusCode code) {
  switch (code) {
    case core::StatusCode::kOk:
      return grpc::StatusCode::OK;
    case core::StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case core::StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case core::StatusCode::kDataLoss:
      return grpc::StatusCode::DATA_LOSS;
    case core::StatusCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case core::StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case core::StatusCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case core::StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case core::StatusCode::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case core::StatusCode::kIoError:
    case core::StatusCode::kInternal:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::INTERNAL;
}

}  // namespace

core::Status from_grpc(const grpc::Status& status) {
  if (status.ok()) return {};
  return core::Status(core_code(status.error_code()), status.error_message());
}

grpc::Status to_grpc(const core::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(grpc_code(status.code()), status.message());
}

}  // namespace dslaunch::proto
