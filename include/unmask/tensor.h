// unmask/tensor.h: a typed, strided view of memory on one device.
//
// A Tensor is cheap to copy: it holds a pointer, a dtype, a device, a shape and strides (in
// elements), plus an optional reference to the storage that keeps the memory alive (owned
// allocations, a memory-mapped checkpoint). Views made by view()/slice()/select() share that
// storage. Kernels never see a Tensor: op front-ends validate tensors and pass raw pointers.
//
//   Tensor x = Tensor::empty({B, T, C}, DType::f32);        // owned, 64-byte aligned, CPU
//   Tensor row = x.select(0, b);                             // [T, C] view, no copy
//   float* p = x.data<float>();                              // checks the dtype
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "unmask/device.h"
#include "unmask/dtype.h"
#include "unmask/error.h"

namespace unmask {

constexpr int kMaxDims = 6;

/// Up to kMaxDims sizes (or strides).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::vector<int64_t> to_vector() const { return {d_.begin(), d_.begin() + ndim_}; }
  std::string str() const;  // "[2,3,4]"

 private:
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> d_{};
};

class Tensor {
 public:
  Tensor() = default;

  /// Allocates owned, uninitialised, 64-byte-aligned memory on `device` (Device::cuda: from the
  /// caching allocator, src/cuda/allocator.h, in CUDA builds).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu);
  /// Allocates and fills with zeros.
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu);
  /// Wraps memory owned elsewhere; `keepalive` (may be null) is held by every view.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu,
                          std::shared_ptr<void> keepalive = {});

  bool defined() const { return data_ != nullptr || (shape_.numel() == 0 && shape_.ndim() > 0); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return shape_.ndim(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  /// Size of dimension i; negative i counts from the end.
  int64_t size(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  /// Typed pointer; throws if T does not match the dtype.
  template <typename T> T* data() const {
    if (dtype_of<T>::value != dtype_)
      throw Error("tensor ", describe(), " accessed as ", dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data_);
  }

  /// Same memory, new shape; the tensor must be contiguous.
  Tensor view(const Shape& shape) const;
  /// Elements [start, end) along `dim` (a strided view).
  Tensor slice(int dim, int64_t start, int64_t end) const;
  /// Drops dimension `dim`, keeping index `index`.
  Tensor select(int dim, int64_t index) const;
  /// A contiguous owned copy (same dtype and device).
  Tensor contiguous() const;
  /// Copies `src` (same shape and dtype) into this tensor's memory; host <-> device copies
  /// (CUDA builds) are synchronous and need innermost stride 1 unless both are contiguous.
  void copy_from(const Tensor& src);
  /// A contiguous owned copy on `device` (a host <-> device copy in CUDA builds).
  Tensor to(Device device) const;
  /// A contiguous owned CPU copy converted between f32, bf16 and f16 (round to nearest even;
  /// fp16 overflows to inf). The tensor must be on the CPU: copy a device tensor to(cpu) first.
  Tensor cast(DType dtype) const;

  /// "f32[2,3] cpu" (plus strides when not contiguous); used in every shape error.
  std::string describe() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  Shape shape_;
  Shape strides_;
  std::shared_ptr<void> storage_;
};

/// Contiguous strides for a shape.
Shape contiguous_strides(const Shape& shape);

}  // namespace unmask
