#pragma once

#include "core/dtype.h"
#include "core/spec/job_spec.h"

namespace dslaunch::spec {

// What the model's weights and gradients are rounded to: bf16 or fp16 in
// 16-bit training (fp32 masters beside them), else fp32.
inline core::DType training_precision(const TrainingSpec& training) {
  if (training.bf16) return core::DType::kBF16;
  if (training.fp16.enabled) return core::DType::kF16;
  return core::DType::kF32;
}

// The element type gradients are averaged in over the data group:
// communication_data_type, or by default the training's precision, as
// DeepSpeed chooses it.
inline core::DType gradient_communication_type(const TrainingSpec& training,
                                               core::DType precision) {
  switch (training.communication_data_type) {
    case CommunicationDataType::kFp32:
      return core::DType::kF32;
    case CommunicationDataType::kFp16:
      return core::DType::kF16;
    case CommunicationDataType::kBf16:
      return core::DType::kBF16;
    case CommunicationDataType::kDefault:
      break;
  }
  return precision;
}

}  // namespace dslaunch::spec
