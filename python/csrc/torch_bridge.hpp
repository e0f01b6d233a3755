// python/csrc/torch_bridge.hpp — what every torch op binding needs: at::Tensor -> TensorView,
// attnkit::Status -> the matching Python exception, workspaces from torch's caching allocator,
// and the current stream of the tensors' device.
//
// Only c10/ATen core headers: the bindings compile against any torch build (CPU or CUDA) and ask
// the device guard registry for the stream instead of including CUDA headers.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <optional>
#include <tuple>
#include <vector>

#include "attnkit/attnkit.hpp"

namespace attnkit::torch_ops {

inline DType dtype_of(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default: TORCH_CHECK_VALUE(false, name, ": unsupported dtype ", t.scalar_type());
  }
}

// A view of `t` (which must outlive the call). The C++ API validates sizes and strides and names
// the argument in its messages; here we only refuse what a TensorView cannot describe.
inline TensorView view_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= TensorView::kMaxDims, name, ": expected 1 to ",
                    TensorView::kMaxDims, " dims, got ", t.dim());
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), name, ": expected a CPU or CUDA tensor, got ",
                    t.device());
  TensorView v;
  v.data = const_cast<void*>(t.const_data_ptr());
  v.dtype = dtype_of(t, name);
  v.device = t.device().is_cuda() ? Device::cuda(t.device().index()) : Device::cpu();
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  return v;
}

inline TensorView view_of(const std::optional<at::Tensor>& t, const char* name) {
  return t.has_value() ? view_of(*t, name) : TensorView{};
}

// The kernels need unit stride along the last dim; autograd hands over expanded or transposed
// gradients, which a copy fixes (a no-op for the usual contiguous tensors).
inline at::Tensor unit_last(const at::Tensor& t) {
  return t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1 ? t.contiguous() : t;
}
inline std::optional<at::Tensor> unit_last(const std::optional<at::Tensor>& t) {
  return t.has_value() ? std::optional<at::Tensor>(unit_last(*t)) : std::nullopt;
}

// Raises what a Python user expects: ValueError for bad arguments, NotImplementedError for
// valid input this build cannot run, RuntimeError for CUDA failures.
inline void check(const Status& st, const char* op) {
  if (st.ok()) return;
  switch (st.code()) {
    case StatusCode::kInvalidArgument: TORCH_CHECK_VALUE(false, "attnkit.", op, ": ", st.message());
    case StatusCode::kUnsupported: TORCH_CHECK_NOT_IMPLEMENTED(false, "attnkit.", op, ": ", st.message());
    default: TORCH_CHECK(false, "attnkit.", op, ": ", st.message());
  }
}

// Scratch memory from torch's caching allocator on `like`'s device. Freed when `keep` dies; the
// allocator orders the reuse after the work queued on the current stream.
inline Workspace workspace(size_t bytes, const at::Tensor& like, at::Tensor& keep) {
  if (bytes == 0) return {};
  keep = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
  return {keep.data_ptr(), bytes};
}

// The current stream of `device` as a cudaStream_t (nullptr on the CPU).
inline Stream current_stream(const at::Device& device) {
  if (!device.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
}

// What a softmax-style backward (attention, flex) reads, with unit last strides, and the gradients
// it writes, allocated like q, k, v.
struct BackwardTensors {
  at::Tensor dout, q, k, v, out, lse, dq, dk, dv;
  BackwardTensors(const at::Tensor& dout_, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                  const at::Tensor& out_, const at::Tensor& lse_)
      : dout(unit_last(dout_)), q(unit_last(q_)), k(unit_last(k_)), v(unit_last(v_)), out(unit_last(out_)), lse(lse_),
        dq(at::empty(q.sizes(), q.options())), dk(at::empty(k.sizes(), k.options())),
        dv(at::empty(v.sizes(), v.options())) {}
  template <class Params>
  void fill(Params& p) const {
    p.q = view_of(q, "q");
    p.k = view_of(k, "k");
    p.v = view_of(v, "v");
    p.out = view_of(out, "out");
    p.lse = view_of(lse, "lse");
    p.dout = view_of(dout, "dout");
    p.dq = view_of(dq, "dq");
    p.dk = view_of(dk, "dk");
    p.dv = view_of(dv, "dv");
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads() const { return {dq, dk, dv}; }
};

// The placeholder for an output that was not asked for (schemas return Tensor, not Tensor?).
inline at::Tensor absent_output(const at::Tensor& like) { return at::empty({0}, like.options().dtype(at::kFloat)); }

}  // namespace attnkit::torch_ops
