#!/usr/bin/env python3
"""bench/fwd_trace/make_variant.py — a timeline probe of the softmax attention forward kernel.

Writes DIR/src/cuda/attention/{fwd_consumer,fwd_producer,fwd_trace}.cuh: copies of the tree's
consumer and producer with clock64() stamps at the points below, and DIR/probe_trace.cu (the A/B
probe, bench/attention_fwd_probe.cu, whose main runs one shape and prints the stamps of the last
launch). Build and run as bench/attention_fwd_ab.sh does a variant; read with timeline.py:
    python3 bench/fwd_trace/make_variant.py .deps/ab/T
    nvcc ... -I.deps/ab/T -I. -Iinclude -I<cutlass> .deps/ab/T/probe_trace.cu -o .deps/ab/probe_trace
    (device) .deps/ab/probe_trace 128 512 32 > $OUT/t.txt
    python3 bench/fwd_trace/timeline.py t.txt 0
Stamps per CTA (the first 64), role (0 producer, 1 + w consumer warpgroup w) and tile j < 40:
  producer: 0 loop top, 1 Q buffer claimed, 2 tile's loads issued, 3 Q issued, 4+i K_i acquired
  consumer: 0 loop top, 1 Q landed, 2 first S done, 3 first softmax done, 4 loop done,
            5 last P.V done, 6 epilogue done, 8+i turn for key tile i, 12+i S_i done (i < 4);
            in key tile 2: 16 softmax done, 17 P.V done, 18 O rescaled and P converted;
            19 key tile 3's K / V waits done (before its turn; probed during key tile 2's softmax)
Each anchor is asserted, so a change to the kernel that moves one fails here, not silently.
"""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(sys.argv[1])
(out / "src/cuda/attention").mkdir(parents=True, exist_ok=True)

(out / "src/cuda/attention/fwd_trace.cuh").write_text('''#pragma once
__device__ unsigned long long g_trace[64][3][40][20];
#define TR(role, j, slot) do { if (blockIdx.x < 64 && (j) < 40 && (threadIdx.x % 128) == 0) g_trace[blockIdx.x][role][j][slot] = clock64(); } while (0)
#define TRP(j, slot) do { if (blockIdx.x < 64 && (j) < 40) g_trace[blockIdx.x][0][j][slot] = clock64(); } while (0)
''')


def patch(name, edits):
    s = (root / "src/cuda/attention" / name).read_text()
    for a, b in edits:
        assert a in s, f"{name}: anchor not found:\n{a}"
        s = s.replace(a, b, 1)
    (out / "src/cuda/attention" / name).write_text(s)


patch("fwd_consumer.cuh", [
    ('#include "src/cuda/attention/fwd_epilogue.cuh"', '#include "src/cuda/attention/fwd_epilogue.cuh"\n#include "src/cuda/attention/fwd_trace.cuh"'),
    ('  int wg;\n\n', '  int wg;\n  int jj = 0;\n\n'),
    ('      const int buf = j % T::kQStages;\n', '      const int buf = j % T::kQStages;\n      jj = j; TR(1 + wg, j, 0);\n'),
    ('      if (t >= params.args.num_tiles) break;', '      TR(1 + wg, j, 1);\n      if (t >= params.args.num_tiles) break;'),
    ('      if (count == 1) release_q();\n', '      TR(1 + wg, jj, 2);\n      if (count == 1) release_q();\n'),
    ('      convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);\n      // Whether',
     '      convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);\n      TR(1 + wg, jj, 3);\n      // Whether'),
    ('        turns.wait();\n        gemm_ss_zero(', '        turns.wait();\n        if (i < 4) TR(1 + wg, jj, 8 + i);\n        gemm_ss_zero('),
    ('        warpgroup_wait<1>();  // S_n ready; P.V still running\n',
     '        warpgroup_wait<1>();  // S_n ready; P.V still running\n        if (i < 4) TR(1 + wg, jj, 12 + i);\n'),
    ('        pipe_v.consumer_wait(state_v, v_full);\n        turns.wait();',
     '        pipe_v.consumer_wait(state_v, v_full);\n        if (i == 3) TR(1 + wg, jj, 19);\n        turns.wait();'),
    ('        scores_to_probs(i);\n        typename T::PipelineState next', '        scores_to_probs(i);\n        if (i == 2) TR(1 + wg, jj, 16);\n        typename T::PipelineState next'),
    ('        warpgroup_wait<0>();\n        warpgroup_fence_operand(tOrO);\n        pipe_v.consumer_release(state_v);\n',
     '        warpgroup_wait<0>();\n        warpgroup_fence_operand(tOrO);\n        if (i == 2) TR(1 + wg, jj, 17);\n        pipe_v.consumer_release(state_v);\n'),
    ('        convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);\n      }',
     '        convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);\n        if (i == 2) TR(1 + wg, jj, 18);\n      }'),
    ('      pipe_v.consumer_wait(state, v_full);\n      turns.wait();', '      TR(1 + wg, jj, 4);\n      pipe_v.consumer_wait(state, v_full);\n      turns.wait();'),
    ('      pipe_v.consumer_release(state);\n      ++state;\n', '      pipe_v.consumer_release(state);\n      ++state;\n      TR(1 + wg, jj, 5);\n'),
    ('o_rc, cO, lse);\n', 'o_rc, cO, lse);\n    TR(1 + wg, jj, 6);\n'),
])
patch("fwd_producer.cuh", [
    ('#include "src/cuda/attention/fwd_variant.cuh"', '#include "src/cuda/attention/fwd_variant.cuh"\n#include "src/cuda/attention/fwd_trace.cuh"'),
    ('    const int buf = j % kQ;\n', '    const int buf = j % kQ;\n    TRP(j, 0);\n'),
    ('      *const_cast<volatile int*>(&smem.tile[buf]) = t;', '      TRP(j, 1);\n      *const_cast<volatile int*>(&smem.tile[buf]) = t;'),
    ('buf, j % (kQ + 1), claim_q_buffer);\n', 'buf, j % (kQ + 1), claim_q_buffer, j);\n    TRP(j, 2);\n'),
    ('const ClaimQBuffer& claim_q_buffer) {', 'const ClaimQBuffer& claim_q_buffer, int jq) {'),
    ('  smem.barrier_q_full[q_buf].arrive_and_expect_tx', '  TRP(jq, 3);\n  smem.barrier_q_full[q_buf].arrive_and_expect_tx'),
    ('    pipe_k.producer_acquire(state);\n', '    pipe_k.producer_acquire(state);\n    if (i < 8) TRP(jq, 4 + i);\n'),
])

probe = (root / "bench/attention_fwd_probe.cu").read_text()
main = '''int main(int argc, char** argv) {  // probe_trace D S B [causal]
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* counter; cudaMalloc(&counter, 16);
  const int d = atoi(argv[1]), s = atoi(argv[2]), b = atoi(argv[3]);
  if (d == 64) run_case<64>(b, s, argc >= 5, sms, counter);
  else run_case<128>(b, s, argc >= 5, sms, counter);
  static unsigned long long h[64][3][40][20];
  cudaMemcpyFromSymbol(h, g_trace, sizeof(h));
  for (int c = 0; c < 64; ++c) for (int r = 0; r < 3; ++r) for (int j = 0; j < 40; ++j) {
    printf("T %d %d %d", c, r, j);
    for (int k = 0; k < 20; ++k) printf(" %llu", h[c][r][j][k]);
    printf("\\n");
  }
  return 0;
}
'''
(out / "probe_trace.cu").write_text(probe[:probe.index("int main(")] + main)
