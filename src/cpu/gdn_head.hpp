// src/cpu/gdn_head.hpp — one (sequence, value head) of the gated delta rule, gathered into Acc
// buffers after the in-op preprocessing (l2norm, beta sigmoid, fused gate), and the math on it.
#pragma once
#include <cstdint>
#include <vector>

namespace attnkit::cpu {

template <class Acc>
struct GdnHead {
  int64_t T = 0, K = 0, V = 0;
  int64_t gdim = 1;      // 1: scalar gate per token; K: per-key gate (gk)
  std::vector<Acc> q;    // [T, K]  (already l2-normalised when the option is on)
  std::vector<Acc> k;    // [T, K]
  std::vector<Acc> v;    // [T, V]
  std::vector<Acc> g;    // [T, gdim] log decay (<= 0), zeros when the op has no gate
  std::vector<Acc> beta; // [T]
  std::vector<Acc> h0;   // [K, V] start state (zeros when none is given)

  Acc gate(int64_t t, int64_t d) const { return g[t * gdim + (gdim == 1 ? 0 : d)]; }
};

// Gradients w.r.t. the fields of GdnHead.
template <class Acc>
struct GdnHeadGrad {
  std::vector<Acc> dq, dk, dv, dg, dbeta, dh0;  // shapes as GdnHead
};

// Chunked forward (spec/gdn.md, C = 64). o [T, V]; ht [K, V]. When chunk_states is non-null it
// receives H_n, the state at the start of every chunk, [num_chunks, K, V].
template <class Acc>
void gdn_chunk_forward(const GdnHead<Acc>& x, Acc scale, Acc* o, Acc* ht, std::vector<Acc>* chunk_states = nullptr);

// Chunked backward for a scalar (or absent) gate, spec/gdn.md "Backward". do_ [T, V]; dht [K, V]
// or nullptr.
template <class Acc>
GdnHeadGrad<Acc> gdn_chunk_backward(const GdnHead<Acc>& x, Acc scale, const Acc* do_, const Acc* dht);

// The token recurrence (the ground truth) and its exact reverse-mode gradient; any gate width.
// h [K, V] holds the start state on entry and the end state on exit.
template <class Acc>
void gdn_recurrent_forward(const GdnHead<Acc>& x, Acc scale, Acc* o, Acc* h);
template <class Acc>
GdnHeadGrad<Acc> gdn_recurrent_backward(const GdnHead<Acc>& x, Acc scale, const Acc* do_, const Acc* dht);

// The affine map of tokens [t0, t1) of one head (spec/gdn.md: a run of chunks' end state is
// affine in its start state): end = M start + S, M [K, K] (what the run does to any start state:
// the recurrence on the identity with v = 0), S [K, V] (the run from a zero state). The
// reference for splitting a long sequence across CTAs and stitching the segments exactly.
template <class Acc>
void gdn_segment_affine(const GdnHead<Acc>& x, int64_t t0, int64_t t1, Acc* M, Acc* S);

constexpr int64_t kGdnChunk = 64;

}  // namespace attnkit::cpu
