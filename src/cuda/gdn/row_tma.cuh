// src/cuda/gdn/row_tma.cuh — TMA loads of one chunk's rows of a [B, T, heads, D] tensor
// (RowTensor, chunk_fwd_args.cuh) into a swizzled [64, cols] shared tile, and stores back, for the
// chunked GDN kernels (the forward's WY kernel and loader, bwd_dhu's loader): one thread, one
// instruction per tile instead of every thread's 16-byte pieces and their address work.
//
// The tensor is seen as (t, d, head, batch), d contiguous; a packed (varlen) batch is one
// sequence of all its tokens, each CTA offsetting to its own (WorkItem::t0). A box never stops at
// a sequence's end: rows past it read on into the next sequence (zeros past the tensor's end),
// and the loaders zero them once landed (ChunkPieces::zero_from, chunk_fwd_rows.cuh). Needs
// 16-byte aligned row starts (the dispatchers' vec16); otherwise the loaders copy by cp.async.
#pragma once
#include <cute/tensor.hpp>

#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

using namespace cute;

using RowsShape = Shape<int32_t, int32_t, int32_t, int32_t>;  // (t, d, head, batch)
using RowsStride = Stride<int64_t, _1, int64_t, int64_t>;
template <class Element>
using RowsGmem = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), RowsShape{}, RowsStride{}));
// A tile layout's [rows, cols] as a static shape: the box of one chunk's rows.
template <class SmemLayout>
using BoxShape = Shape<Int<decltype(size<0>(SmemLayout{}))::value>, Int<decltype(size<1>(SmemLayout{}))::value>>;
// The TMA of one chunk's rows into a tile of SmemLayout ([64, cols]).
template <class Element, class SmemLayout>
using RowsTma = decltype(make_tma_copy(SM90_TMA_LOAD{}, RowsGmem<Element>{}, SmemLayout{}, BoxShape<SmemLayout>{}, _1{}));

// The TMA store of a [64, cols] tile of SmemLayout into one chunk's rows.
template <class Element, class SmemLayout>
using RowsTmaStore = decltype(make_tma_copy(SM90_TMA_STORE{}, RowsGmem<Element>{}, SmemLayout{}, BoxShape<SmemLayout>{}, _1{}));

// Host: the shape of a tensor with `tokens` rows per batch entry (a packed batch: batch == 1;
// an empty one still gets valid descriptors, never used).
inline RowsShape rows_shape(int64_t tokens, int cols, int heads, int batch) {
  return make_shape(static_cast<int32_t>(tokens > 0 ? tokens : 1), cols, heads, batch);
}
// Host: x as a (t, d, head, batch) tensor of the given shape, for a TMA descriptor.
template <class Element>
RowsGmem<Element> rows_gmem(const RowTensor& x, const RowsShape& shape) {
  const int64_t sb = get<3>(shape) == 1 ? x.st * get<0>(shape) : x.sb;  // one entry: any stride past its rows
  return make_tensor(make_gmem_ptr(static_cast<Element const*>(x.ptr)), shape, make_stride(x.st, _1{}, x.sh, sb));
}
template <class Element, class SmemLayout>
RowsTma<Element, SmemLayout> make_rows_tma(const RowTensor& x, const RowsShape& shape) {
  return make_tma_copy(SM90_TMA_LOAD{}, rows_gmem<Element>(x, shape), SmemLayout{}, BoxShape<SmemLayout>{}, _1{});
}
template <class Element, class SmemLayout>
RowsTmaStore<Element, SmemLayout> make_rows_tma_store(const RowTensor& x, const RowsShape& shape) {
  return make_tma_copy(SM90_TMA_STORE{}, rows_gmem<Element>(x, shape), SmemLayout{}, BoxShape<SmemLayout>{}, _1{});
}

// Device: one CTA's boxes of a row tensor — (global tiles by chunk, the stage-0 shared tile),
// worked out once: head `head`, columns from block `col` of the tile's width.
template <class SmemLayout, class Tma, class Element>
CUTE_DEVICE auto rows_boxes(const Tma& tma, const RowsShape& shape, const WorkItem& it, int head, int col, Element* stage0) {
  Tensor m = tma.get_tma_tensor(shape)(_, _, head, int(it.b));  // (t, d)
  Tensor g = local_tile(domain_offset(make_coord(int(it.t0), _0{}), m), BoxShape<SmemLayout>{}, make_coord(_, col));
  Tensor s0 = make_tensor(make_smem_ptr(stage0), SmemLayout{});
  return tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(s0), group_modes<0, 2>(g));
}
// Chunk j's box into the tile `offset` elements after stage 0's (whole stages: 1024-byte
// multiples, so the swizzle is the same), completing on transaction barrier `bar`.
template <class Tma, class Boxes>
CUTE_DEVICE void issue_rows_box(const Tma& tma, const Boxes& b, int j, int offset, uint64_t& bar) {
  copy(tma.with(bar), get<0>(b)(_, j), make_tensor(get<1>(b).data() + offset, get<1>(b).layout()));
}

// Device: the boxes of one (head, batch) entry's whole [rows, cols] matrix — (global tiles by
// column block, the stage-0 shared tile): the start states' [DK, BV] blocks (LayoutH's box is all
// DK rows), indexed by value block.
template <class SmemLayout, class Tma, class Element>
CUTE_DEVICE auto matrix_boxes(const Tma& tma, const RowsShape& shape, int head, int64_t batch, Element* stage0) {
  Tensor m = tma.get_tma_tensor(shape)(_, _, head, static_cast<int>(batch));  // (rows, cols)
  Tensor g = local_tile(m, BoxShape<SmemLayout>{}, make_coord(_0{}, _));
  Tensor s0 = make_tensor(make_smem_ptr(stage0), SmemLayout{});
  return tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(s0), group_modes<0, 2>(g));
}

// The shared tile of `b` (rows_boxes) to chunk j's rows: a whole box, so only where every one of
// its rows is the sequence's (a box past the end would write the next sequence's rows). Issued by
// one thread after every writer's fence.proxy.async and a barrier; completes asynchronously
// (tma_store_arrive / tma_store_wait before the tile is overwritten or the CTA exits).
template <class Tma, class Boxes>
CUTE_DEVICE void issue_rows_store(const Tma& tma, const Boxes& b, int j) {
  copy(tma, get<1>(b), get<0>(b)(_, j));
}

}  // namespace attnkit::cuda::gdn
