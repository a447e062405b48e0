// core/tensor.cc: Shape and Tensor (views, owned storage, copies).
#include "unmask/tensor.h"

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/device_memory.h"
#include "core/half.h"

namespace unmask {

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > size_t(kMaxDims)) throw Error("shape has ", dims.size(), " dims; at most ", kMaxDims);
  for (int64_t v : dims) d_[ndim_++] = v;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  if (dims.size() > size_t(kMaxDims)) throw Error("shape has ", dims.size(), " dims; at most ", kMaxDims);
  for (int64_t v : dims) d_[ndim_++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= d_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? "," : "") << d_[i];
  os << ']';
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape s = shape;
  int64_t acc = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.ndim(); ++i)
    if (shape[i] < 0) throw Error("Tensor::empty: negative size in shape ", shape.str());
  size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  if (device != Device::cpu) {
    // The backend's allocator (CUDA: the caching allocator, tagged with the thread's current stream).
    void* d = detail::device_alloc(device, bytes);
    return from_blob(d, shape, dtype, device,
                     std::shared_ptr<void>(d, [device](void* q) { detail::device_free(device, q); }));
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw Error("out of memory allocating ", bytes, " bytes for ", dtype_name(dtype), shape.str());
  return from_blob(p, shape, dtype, device, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device != Device::cpu) {
    detail::device_memset_zero(device, t.data_, t.nbytes());
    return t;
  }
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         std::shared_ptr<void> keepalive) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.storage_ = std::move(keepalive);
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous()) throw Error("view ", shape.str(), " of non-contiguous tensor ", describe(), Hint("call contiguous() first"));
  if (shape.numel() != numel()) throw Error("view ", shape.str(), " has ", shape.numel(), " elements but tensor ", describe(), " has ", numel());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  if (dim < 0) dim += ndim();
  if (dim < 0 || dim >= ndim()) throw Error("slice: dim ", dim, " out of range for ", describe());
  if (start < 0 || end > shape_[dim] || start > end)
    throw Error("slice [", start, ",", end, ") out of range for dim ", dim, " of ", describe());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[dim] * int64_t(dtype_size(dtype_));
  t.shape_[dim] = end - start;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  if (dim < 0) dim += ndim();
  if (dim < 0 || dim >= ndim()) throw Error("select: dim ", dim, " out of range for ", describe());
  if (index < 0 || index >= shape_[dim]) throw Error("select: index ", index, " out of range for dim ", dim, " of ", describe());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + index * strides_[dim] * int64_t(dtype_size(dtype_));
  std::vector<int64_t> sh, st;
  for (int i = 0; i < ndim(); ++i)
    if (i != dim) sh.push_back(shape_[i]), st.push_back(strides_[i]);
  t.shape_ = Shape(sh);
  t.strides_ = Shape(st);
  return t;
}

// Copies a strided tensor element-block by element-block (innermost dim contiguous or not).
static void copy_strided(const Tensor& src, Tensor& dst) {
  const size_t es = dtype_size(src.dtype());
  const int nd = src.ndim();
  if (nd == 0) { std::memcpy(dst.raw(), src.raw(), es); return; }
  std::vector<int64_t> idx(nd, 0);
  const int64_t total = src.numel();
  const int64_t inner = src.size(nd - 1);
  const bool inner_contig = src.stride(nd - 1) == 1 && dst.stride(nd - 1) == 1;
  for (int64_t done = 0; done < total; done += inner) {
    int64_t so = 0, dof = 0;
    for (int i = 0; i < nd - 1; ++i) so += idx[i] * src.stride(i), dof += idx[i] * dst.stride(i);
    const char* s = static_cast<const char*>(src.raw()) + so * es;
    char* d = static_cast<char*>(dst.raw()) + dof * es;
    if (inner_contig) {
      std::memcpy(d, s, inner * es);
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(d + j * dst.stride(nd - 1) * es, s + j * src.stride(nd - 1) * es, es);
    }
    for (int i = nd - 2; i >= 0; --i) {
      if (++idx[i] < src.size(i)) break;
      idx[i] = 0;
    }
  }
}

// Copies to or from (or within) device memory: one 2-D copy per slab of the last two dims, so the
// innermost stride must be 1 on both sides unless both are contiguous.
static void copy_strided_device(const Tensor& src, Tensor& dst) {
  const size_t es = dtype_size(src.dtype());
  if (src.is_contiguous() && dst.is_contiguous()) {
    detail::device_copy_2d(dst.raw(), 0, src.raw(), 0, src.nbytes(), 1);
    return;
  }
  const int nd = src.ndim();
  if (nd < 1) {  // one element (a 0-d tensor is contiguous: unreachable, and it keeps stride(-1) out)
    detail::device_copy_2d(dst.raw(), 0, src.raw(), 0, es, 1);
    return;
  }
  if (src.stride(nd - 1) != 1 || dst.stride(nd - 1) != 1)
    throw Unsupported("copy_from to/from cuda needs innermost stride 1, got ", src.describe(), " -> ", dst.describe());
  const int64_t rows = nd >= 2 ? src.size(nd - 2) : 1;
  const size_t width = size_t(src.size(nd - 1)) * es;
  const size_t spitch = nd >= 2 ? size_t(src.stride(nd - 2)) * es : width;
  const size_t dpitch = nd >= 2 ? size_t(dst.stride(nd - 2)) * es : width;
  std::vector<int64_t> idx(size_t(std::max(nd - 2, 0)), 0);
  const int64_t slabs = nd > 2 ? src.numel() / (rows * src.size(nd - 1)) : 1;
  for (int64_t s = 0; s < slabs; ++s) {
    int64_t so = 0, dof = 0;
    for (int i = 0; i < nd - 2; ++i) so += idx[size_t(i)] * src.stride(i), dof += idx[size_t(i)] * dst.stride(i);
    detail::device_copy_2d(static_cast<char*>(dst.raw()) + dof * int64_t(es), dpitch,
                  static_cast<const char*>(src.raw()) + so * int64_t(es), spitch, width, size_t(rows));
    for (int i = nd - 3; i >= 0; --i) {
      if (++idx[size_t(i)] < src.size(i)) break;
      idx[size_t(i)] = 0;
    }
  }
}

Tensor Tensor::contiguous() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape_ || src.dtype() != dtype_)
    throw Error("copy_from: source ", src.describe(), " does not match destination ", describe());
  if (numel() == 0) return;
  if (src.device() != Device::cpu || device_ != Device::cpu) {
    copy_strided_device(src, *this);
    return;
  }
  copy_strided(src, *this);
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::cast(DType dtype) const {
  auto is_float = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
  UNMASK_CHECK(is_float(dtype_) && is_float(dtype), "Tensor::cast: converts between f32, bf16 and f16, got ",
               describe(), " -> ", dtype_name(dtype));
  UNMASK_CHECK(device_ == Device::cpu, "Tensor::cast: the tensor is on ", device_name(device_), ", got ",
               describe(), Hint("cast a host copy: t.to(Device::cpu).cast(...)"));
  if (dtype == dtype_) return contiguous();  // always an owned copy
  const Tensor src = is_contiguous() ? *this : contiguous();
  Tensor out = empty(shape_, dtype);
  const int64_t n = numel();
  auto load = [&](int64_t i) -> float {
    switch (dtype_) {
      case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(src.raw())[i]);
      case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(src.raw())[i]);
      default: return static_cast<const float*>(src.raw())[i];
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (dtype) {
      case DType::bf16: static_cast<uint16_t*>(out.raw())[i] = f32_to_bf16(v); break;
      case DType::f16: static_cast<uint16_t*>(out.raw())[i] = f32_to_f16(v); break;
      default: static_cast<float*>(out.raw())[i] = v; break;
    }
  }
  return out;
}

std::string Tensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_.str();
  if (!is_contiguous()) os << " strides " << strides_.str();
  os << ' ' << device_name(device_);
  return os.str();
}

}  // namespace unmask
