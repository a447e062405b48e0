// unmask/dtype.h: element types a Tensor can hold.
//
// Usage:
//   DType t = DType::f32;
//   size_t bytes = dtype_size(t) * numel;
//   std::string s = dtype_name(t);           // "f32"
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace unmask {

/// Element type. Names follow the safetensors spelling in lower case.
enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, boolean, f64 };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
    case DType::f64: return 8;
  }
  return 0;
}

/// Short lower-case name ("f32", "bf16", ...), used in every error message.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
    case DType::f64: return "f64";
  }
  return "?";
}

/// Maps a C++ scalar type to its DType (used by Tensor::data<T>() checks).
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

}  // namespace unmask
