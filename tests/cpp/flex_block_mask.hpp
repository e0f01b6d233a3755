// tests/cpp/flex_block_mask.hpp — a BlockMask in torch's format built on the host from a mask
// function, for the CPU and GPU flex tests.
#pragma once
#include <functional>

#include "test_util.hpp"

namespace attnkit::test {

using MaskFn = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;

// A BlockMask built the way torch's create_block_mask builds one: a block is full when every
// element is visible, partial when some are, and absent otherwise.
// The view is built on demand from the tensors, so copies and moves of the struct stay valid.
struct HostBlockMask {
  HostTensor kv_num, kv_idx, full_num, full_idx;
  int64_t block_q = 128, block_k = 128;
  bool use_full = true;
  BlockMaskView view() const {
    BlockMaskView v;
    v.kv_num_blocks = kv_num.view;
    v.kv_indices = kv_idx.view;
    if (use_full) {
      v.full_kv_num_blocks = full_num.view;
      v.full_kv_indices = full_idx.view;
    }
    v.block_q = block_q;
    v.block_k = block_k;
    return v;
  }
};

// Lists of [mb, mh, ceil(sq / bq)] rows (mb, mh: 1 to broadcast over B, H).
inline HostBlockMask build_block_mask(int64_t sq, int64_t sk, int64_t bq, int64_t bk, int64_t mb, int64_t mh,
                                      const MaskFn& mask, bool use_full = true) {
  const int64_t nq = (sq + bq - 1) / bq, nk = (sk + bk - 1) / bk;
  HostBlockMask m{HostTensor(DType::kInt32, {mb, mh, nq}), HostTensor(DType::kInt32, {mb, mh, nq, nk}),
                  HostTensor(DType::kInt32, {mb, mh, nq}), HostTensor(DType::kInt32, {mb, mh, nq, nk}), bq, bk, use_full};
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t h = 0; h < mh; ++h)
      for (int64_t r = 0; r < nq; ++r) {
        int64_t np = 0, nf = 0;
        for (int64_t kb = 0; kb < nk; ++kb) {
          int64_t vis = 0, tot = 0;
          for (int64_t i = r * bq; i < std::min(sq, (r + 1) * bq); ++i)
            for (int64_t j = kb * bk; j < std::min(sk, (kb + 1) * bk); ++j, ++tot) vis += mask(b, h, i, j);
          const int64_t base = ((b * mh + h) * nq + r) * nk;
          if (vis == tot && use_full) m.full_idx.set(base + nf++, static_cast<double>(kb));
          else if (vis > 0) m.kv_idx.set(base + np++, static_cast<double>(kb));
        }
        m.kv_num.set((b * mh + h) * nq + r, static_cast<double>(np));
        m.full_num.set((b * mh + h) * nq + r, static_cast<double>(nf));
      }
  return m;
}

}  // namespace attnkit::test
