// src/api/checks.hpp — the named predicates the validation layer is built from. Each returns
// InvalidArgument("<arg>: expected <what>, got <what>") or Ok.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::checks {

std::string shape_str(const TensorView& t);

Status defined(const TensorView& t, const char* name);
Status absent(const TensorView& t, const char* name, const char* why);
// ndim must equal n; `layout` names the dims, e.g. "[B, Sq, Hq, D]".
Status dims(const TensorView& t, const char* name, int n, const char* layout);
Status dtype_in(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
Status same_dtype(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);
Status float_dtype(const TensorView& t, const char* name);  // fp16 / bf16 / fp32 / fp64
Status on_device(const TensorView& t, const char* name, const Device& dev);
Status unit_last_stride(const TensorView& t, const char* name);
Status non_negative_strides(const TensorView& t, const char* name);
Status data_present(const TensorView& t, const char* name);
// t.size(dim) == value; `what` names the expected size, e.g. "Hq (q.size(2))".
Status size_is(const TensorView& t, const char* name, int dim, int64_t value, const char* what);
// t has exactly these sizes (layout names them).
Status shape_is(const TensorView& t, const char* name, std::initializer_list<int64_t> sizes, const char* layout);
Status finite(double v, const char* name);
Status at_least(int64_t v, const char* name, int64_t lo);
Status in_range(int64_t v, const char* name, int64_t lo, int64_t hi);
Status divisible(int64_t a, const char* a_name, int64_t b, const char* b_name);
// Offsets of a packed batch: int dtype, 1-D [N+1], and, when readable on the host, first 0,
// non-decreasing, last == total, every length <= max_len (max_len <= 0: unchecked).
Status cu_seqlens(const TensorView& t, const char* name, std::initializer_list<DType> dtypes, int64_t total,
                  const char* total_name, int64_t max_len, const char* max_name);
// A tensor given as a whole: defined, dims, float dtype, unit last stride, on `dev`.
Status float_tensor(const TensorView& t, const char* name, int n, const char* layout, const Device& dev);
Status workspace(const Workspace& w, size_t required);

// True when the data of t can be read by the host (a CPU tensor).
inline bool host_readable(const TensorView& t) { return t.device.type == DeviceType::kCPU && t.data; }

}  // namespace attnkit::checks
