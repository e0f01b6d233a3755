// attnkit/cpu/io.hpp — moving strided tensor slices of any float dtype to and from contiguous
// Acc (float or double) buffers. The CPU backend computes on such buffers only.
#pragma once
#include <cstdint>
#include <vector>
#include "attnkit/numeric_types.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cpu {

template <class Acc>
inline Acc load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat16: return static_cast<Acc>(fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]));
    case DType::kBFloat16: return static_cast<Acc>(bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]));
    case DType::kFloat32: return static_cast<Acc>(static_cast<const float*>(base)[i]);
    case DType::kFloat64: return static_cast<Acc>(static_cast<const double*>(base)[i]);
    case DType::kInt32: return static_cast<Acc>(static_cast<const int32_t*>(base)[i]);
    case DType::kInt64: return static_cast<Acc>(static_cast<const int64_t*>(base)[i]);
  }
  return Acc(0);
}

template <class Acc>
inline void store(void* base, DType t, int64_t i, Acc v) {
  switch (t) {
    case DType::kFloat16: static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(static_cast<float>(v)); break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = static_cast<double>(v); break;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}

// A rows x cols strided window into a tensor; strides in elements.
struct Slice2D {
  void* base = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 1;
  int64_t offset(int64_t r, int64_t c) const { return r * row_stride + c * col_stride; }
};

// dst [rows, cols] contiguous <- s
template <class Acc>
void gather(const Slice2D& s, Acc* dst) {
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) dst[r * s.cols + c] = load<Acc>(s.base, s.dtype, s.offset(r, c));
}
template <class Acc>
std::vector<Acc> gather(const Slice2D& s) {
  std::vector<Acc> v(static_cast<size_t>(s.rows * s.cols));
  gather(s, v.data());
  return v;
}
// s <- src [rows, cols] contiguous
template <class Acc>
void scatter(const Slice2D& s, const Acc* src) {
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) store<Acc>(s.base, s.dtype, s.offset(r, c), src[r * s.cols + c]);
}

inline int64_t load_index(const TensorView& t, int64_t i) {
  return t.dtype == DType::kInt64 ? static_cast<const int64_t*>(t.data)[i * t.strides[0]]
                                  : static_cast<const int32_t*>(t.data)[i * t.strides[0]];
}

// A tensor whose dims mean (batch, sequence, head, feature), dense or packed varlen.
// Dense: any 4-D tensor with the dims named by bdim/sdim/hdim (feature is last).
// Varlen: a 3-D [total, H, F] tensor; sequence b is rows cu[b] .. cu[b+1]-1.
struct SeqTensor {
  TensorView t;
  const TensorView* cu = nullptr;  // varlen offsets (int32 or int64) or nullptr
  int bdim = 0, sdim = 1, hdim = 2;

  Slice2D slice(int64_t b, int64_t h, int64_t len) const {
    Slice2D s;
    s.dtype = t.dtype;
    s.rows = len;
    s.cols = t.sizes[t.ndim - 1];
    s.col_stride = t.strides[t.ndim - 1];
    int64_t off;
    if (cu) {
      s.row_stride = t.strides[0];
      off = load_index(*cu, b) * t.strides[0] + h * t.strides[1];
    } else {
      s.row_stride = t.strides[sdim];
      off = b * t.strides[bdim] + h * t.strides[hdim];
    }
    s.base = static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
    return s;
  }
};

// A per-row scalar tensor such as LSE: dense [B, H, S], varlen [H, total] (sequence b at cu[b]).
struct RowTensor {
  TensorView t;
  const TensorView* cu = nullptr;
  Slice2D slice(int64_t b, int64_t h, int64_t len) const {
    Slice2D s;
    s.dtype = t.dtype;
    s.rows = len;
    s.cols = 1;
    int64_t off;
    if (cu) {
      s.row_stride = t.strides[1];
      off = h * t.strides[0] + load_index(*cu, b) * t.strides[1];
    } else {
      s.row_stride = t.strides[2];
      off = b * t.strides[0] + h * t.strides[1];
    }
    s.base = static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
    return s;
  }
};

}  // namespace attnkit::cpu
