// io/npy.h: NumPy .npy files (format version 1.0, little-endian, C order).
#pragma once
#include <string>

#include "unmask/tensor.h"

namespace unmask::io {

/// Writes a CPU tensor (f32, f64, i32, i64, u8, bool, f16) atomically as `path`.
void write_npy(const std::string& path, const Tensor& t);
/// Reads a .npy file written by NumPy (v1/v2 headers, C order, little-endian).
Tensor read_npy(const std::string& path);

}  // namespace unmask::io
