// src/api/checks.cpp — the named predicates of the validation layer.
#include "src/api/checks.hpp"

#include <sstream>

#include "attnkit/cpu/io.hpp"

namespace attnkit {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "?";
}
size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
  }
  return 0;
}

namespace checks {
namespace {
Status fail(const char* name, const std::string& msg) { return InvalidArgument(std::string(name) + ": " + msg); }
}  // namespace

std::string shape_str(const TensorView& t) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.sizes[i];
  s << "]";
  return s.str();
}

Status defined(const TensorView& t, const char* name) {
  return t.defined() ? Status::Ok() : fail(name, "is required but was not given");
}
Status absent(const TensorView& t, const char* name, const char* why) {
  return t.defined() ? fail(name, std::string("must not be given ") + why) : Status::Ok();
}
Status dims(const TensorView& t, const char* name, int n, const char* layout) {
  if (t.ndim == n) return Status::Ok();
  return fail(name, "expected " + std::to_string(n) + " dims " + layout + ", got " + std::to_string(t.ndim) +
                        " dims " + shape_str(t));
}
Status dtype_in(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType d : allowed) {
    if (d == t.dtype) return Status::Ok();
    list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  return fail(name, "expected dtype " + list + ", got " + dtype_name(t.dtype));
}
Status same_dtype(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  if (t.dtype == ref.dtype) return Status::Ok();
  return fail(name, std::string("expected the dtype of ") + ref_name + " (" + dtype_name(ref.dtype) + "), got " +
                        dtype_name(t.dtype));
}
Status float_dtype(const TensorView& t, const char* name) {
  return dtype_in(t, name, {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64});
}
Status on_device(const TensorView& t, const char* name, const Device& dev) {
  if (t.device == dev) return Status::Ok();
  auto str = [](const Device& d) {
    return std::string(d.type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(d.index));
  };
  return fail(name, "expected a tensor on " + str(dev) + " (the device of q), got " + str(t.device));
}
Status unit_last_stride(const TensorView& t, const char* name) {
  if (t.ndim == 0 || t.sizes[t.ndim - 1] <= 1 || t.strides[t.ndim - 1] == 1) return Status::Ok();
  return fail(name, "expected unit stride on the last dim, got stride " + std::to_string(t.strides[t.ndim - 1]));
}
Status non_negative_strides(const TensorView& t, const char* name) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.strides[i] < 0 || t.sizes[i] < 0)
      return fail(name, "expected non-negative sizes and strides, got dim " + std::to_string(i) + " of size " +
                            std::to_string(t.sizes[i]) + " and stride " + std::to_string(t.strides[i]));
  return Status::Ok();
}
Status data_present(const TensorView& t, const char* name) {
  if (t.data || t.numel() == 0) return Status::Ok();
  return fail(name, "has " + std::to_string(t.numel()) + " elements but a null data pointer");
}
Status size_is(const TensorView& t, const char* name, int dim, int64_t value, const char* what) {
  if (t.size(dim) == value) return Status::Ok();
  return fail(name, "expected size " + std::to_string(value) + " (" + what + ") at dim " + std::to_string(dim) +
                        ", got " + shape_str(t));
}
Status shape_is(const TensorView& t, const char* name, std::initializer_list<int64_t> sizes, const char* layout) {
  ATTNKIT_RETURN_IF_ERROR(dims(t, name, static_cast<int>(sizes.size()), layout));
  int i = 0;
  for (int64_t s : sizes) {
    if (t.sizes[i] != s) {
      TensorView want;
      want.ndim = static_cast<int>(sizes.size());
      int j = 0;
      for (int64_t x : sizes) want.sizes[j++] = x;
      return fail(name, std::string("expected shape ") + layout + " = " + shape_str(want) + ", got " + shape_str(t));
    }
    ++i;
  }
  return Status::Ok();
}
Status finite(double v, const char* name) {
  return std::isfinite(v) ? Status::Ok() : fail(name, "expected a finite value, got " + std::to_string(v));
}
Status at_least(int64_t v, const char* name, int64_t lo) {
  if (v >= lo) return Status::Ok();
  return fail(name, "expected a value >= " + std::to_string(lo) + ", got " + std::to_string(v));
}
Status in_range(int64_t v, const char* name, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return fail(name, "expected a value in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                        std::to_string(v));
}
Status divisible(int64_t a, const char* a_name, int64_t b, const char* b_name) {
  if (b > 0 && a % b == 0) return Status::Ok();
  return fail(a_name, std::string("expected a multiple of ") + b_name + " (" + std::to_string(b) + "), got " +
                          std::to_string(a));
}
Status cu_seqlens(const TensorView& t, const char* name, std::initializer_list<DType> dtypes, int64_t total,
                  const char* total_name, int64_t max_len, const char* max_name) {
  ATTNKIT_RETURN_IF_ERROR(dims(t, name, 1, "[N+1]"));
  ATTNKIT_RETURN_IF_ERROR(dtype_in(t, name, dtypes));
  if (t.size(0) < 1) return fail(name, "expected at least one entry [N+1], got " + shape_str(t));
  ATTNKIT_RETURN_IF_ERROR(data_present(t, name));
  if (!host_readable(t)) return Status::Ok();  // device offsets are trusted (reading them would sync)
  const int64_t n = t.size(0);
  if (cpu::load_index(t, 0) != 0)
    return fail(name, "expected the first offset to be 0, got " + std::to_string(cpu::load_index(t, 0)));
  for (int64_t i = 1; i < n; ++i) {
    const int64_t a = cpu::load_index(t, i - 1), b = cpu::load_index(t, i);
    if (b < a)
      return fail(name, "expected non-decreasing offsets, got " + std::to_string(b) + " after " + std::to_string(a) +
                            " at index " + std::to_string(i));
    if (max_len > 0 && b - a > max_len)
      return fail(name, "sequence " + std::to_string(i - 1) + " has length " + std::to_string(b - a) +
                            ", more than " + max_name + " = " + std::to_string(max_len));
  }
  if (cpu::load_index(t, n - 1) != total)
    return fail(name, "expected the last offset to equal " + std::string(total_name) + " (" + std::to_string(total) +
                          "), got " + std::to_string(cpu::load_index(t, n - 1)));
  return Status::Ok();
}
Status float_tensor(const TensorView& t, const char* name, int n, const char* layout, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(defined(t, name));
  ATTNKIT_RETURN_IF_ERROR(dims(t, name, n, layout));
  ATTNKIT_RETURN_IF_ERROR(float_dtype(t, name));
  ATTNKIT_RETURN_IF_ERROR(on_device(t, name, dev));
  ATTNKIT_RETURN_IF_ERROR(non_negative_strides(t, name));
  ATTNKIT_RETURN_IF_ERROR(unit_last_stride(t, name));
  return data_present(t, name);
}
Status workspace(const Workspace& w, size_t required) {
  if (w.bytes >= required && (required == 0 || w.data)) return Status::Ok();
  return InvalidArgument("workspace: expected at least " + std::to_string(required) +
                         " bytes (see *_workspace_size()), got " + std::to_string(w.bytes) +
                         (w.data ? "" : " with a null pointer"));
}

}  // namespace checks
}  // namespace attnkit
