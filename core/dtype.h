#pragma once

#include <cstdint>
#include <string_view>

namespace dslaunch::core {

// The element types the engine keeps and moves: parameters, activations and
// gradients in fp32, bf16 or fp16; integers for tokens and counts; bytes for
// packed data (compressed signs).
enum class DType { kF32, kF64, kBF16, kF16, kI32, kI64, kU8 };

int64_t dtype_bytes(DType dtype);
// "fp32", "bf16", ... as DeepSpeed's and PyTorch's configs spell them.
std::string_view dtype_name(DType dtype);

}  // namespace dslaunch::core
