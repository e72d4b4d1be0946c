"""Routing: which kernel family, configuration and grid serve a launch, as pure functions.

Two time scales, as the decode loop under CUDA graphs needs them:

- :func:`route_static` decides what may be frozen when a graph is captured: the family, its
  typed compile configuration, the grid (CTAs per row), the workspace. It depends only on the
  device (:class:`~gvr_kernels.spec.DeviceSpec`) and capture-stable quantities: row count, the
  length envelope ``n_env`` (the longest row a launch may see), K and the call mode.
- :func:`route_dynamic` is what each row recomputes in-kernel from its own length: the ladder
  (:func:`gvr_reference.ladder.row_plan`). It is exposed for analysis and tests.

Nothing here hard-codes a device: SM count, shared memory per block and L2 come from the
``DeviceSpec``. Shared-memory and workspace sizes come from the chosen configuration itself
(``StreamingConfig.smem_bytes``, ``workspace_words_per_row``), written once there.

The tuning constants below were measured on an H200 (``tools/device_streaming.py --tune`` and
``tools/tune_register.py``; the tables are ``benchmarks/results/h200/tune.log`` and
``tune_register.json``):

- the register-resident family beats the streaming family for every envelope up to 16,384
  at every batch (6.0-7.5 us at b = 1 for n <= 4096, 10-11 us at 16,384, against 9-12.5 us;
  25.6-30.8 us against 31-40 us at b = 512, n = 16,384), and up to 32,768 while the rows fit
  the SMs; its CTA shape is the smallest that holds the envelope, with two 512-thread CTAs
  per SM once rows outnumber SMs (from 8,192 scores on, where it pays: 18.9 against 26.0 us
  at b = 512, n = 8,192); measured again on the H100 with today's streaming core, plain
  decode rows of 8,193-16,384 scores past 5/4 rows a SM are faster streamed (below);
- one 1024-thread CTA per row beats a split row up to ``n_env`` = 16384 at every batch, and
  a split row wins from 65536 on while ``rows * parts`` fits the SMs;
- past about 16 CTAs per row the split gains little; 8192 scores per CTA is on the plateau;
- 512-thread CTAs (two per SM) win once ``rows > SMs``; that core's ladder takes 64 sample
  hits and the boosted first rung (``min_hits=64, aim_boost=2``), because among hundreds of
  rows one that falls off the first rung holds the whole launch (b = 512, n = 262,144: 8 of
  512 float16 rows overflowed at K = 2048, 243 against 101 us; none since); the other cores
  serve rows that run side by side and keep the cheaper sample (1-2 us less at b <= 128).

The register-resident family's bracket histogram path (``RegisterConfig.bracket``: one
2048-bin histogram of the held scores instead of the sampled rung, staging and radix levels)
is built for every shape of at most ``BRACKET_MAX_VECS`` (4) vectors a thread while K is at
most a quarter of the envelope (``tools/tune_bracket.py``, ``tune_bracket.log``, run 3, and
the decode grid ``bench_grid_lean.json``): n = 4,096 at b = 1 takes 5.2 / 5.5 us of kernel
time for K = 512 / 1024 (ncu; the sampled path 6.2 / 9.6), and at b = 512 14.6 / 14.7 us
against 15.9 / 17.8 (raw kernel times); at n = 16,384 on 1024 x 4 the two paths measure
even (8.9 against 9.3 us, ncu, b = 1). At K = 2048 on 4,096 scores the radix selection over
the registers measured faster (15.4 against 16.8 us at b = 512), but with four vectors a
thread the bracket wins at any K (``BRACKET_WIDE_K_VECS``; ``tools/tune_meet.py --set
bracket``, ``benchmarks/results/h100/tune_bracket_k.log``: 512 x 4 at K = 2048 on 6,144
scores 9.8 / 21.9 us against 12.7 / 26.6 at b = 128 / 512); with eight vectors a
thread the bracket code spills at 64 registers, and with four at 64 registers it spills in
the prefill and full modes and with values; those configurations keep the sampled path
(``bracket=False``). Decode rows without values or deterministic ties of 8,193-16,384 scores at
most one row a SM run 512 x 8 at 128 registers with the bracket rather than 1024 x 4 at 64
while K is at most ``HALF_WARPS_MAX_K`` (half the warps, so half the per-warp steps; the H100,
raw kernel times, ``benchmarks/results/h100/tune_512x8_full.log``: n = 16,384, b = 64 / 128,
K = 512 10.0 / 11.5 against 10.3 / 11.7 us; rows of K+1 to n/8 scores 7.9 / 8.1 against
8.4 / 8.7), without early loads (``EARLY_LOADS_MAX_N``: with them full rows took 9.4 / 11.1 us
but short rows 9.2 / 10.7).

The cluster-register family (``gvr_kernels.cluster``: one thread-block cluster per row, the
row in the registers of its CTAs, the bracket's counts or the sample and the survivors
through DSMEM) serves float32 envelopes of 16,385-65,536, and up to 131,072 (at K > 512, or
at every K in 16-CTA clusters where the device schedules them), while the launch's CTAs take
at most half the SMs (:func:`_cluster_core`, measured with
``tools/tune_cluster.py``, table ``tune_cluster.log``): at b = 1, n = 65,536 its bracket path
takes 8.5 / 10.0 / 12.3 us of kernel time for K = 512 / 1024 / 2048 (ncu,
``ncu_b1_cluster_bracket.log``; 11.2 / 13.3 / 15.8 for the sampled cluster path before it,
``ncu_b1.log``); past half the SMs the split row is as fast or faster. Float32 envelopes of
8,193-16,384, and of 4,097-8,192 at K = 2048, run on a cluster of four 512-thread CTAs
a row while those take at most half the SMs, else of two (:func:`_small_cluster`): the single
1024 x 4 register CTA issues every instruction of a 16,384-score row from one SM (about 850
warp instructions a thread, 32 warps: some 3.5 us of issue at b = 1), and spread over four
SMs the row takes 7.5-8.3 us against 9.7-10.5 at b = 1 and 9.4-9.7 against 10.2-11.1 on two
SMs a row at b = 32 (eager, ``bench_small_cluster_new.json`` against
``bench_small_cluster_old.json``, one machine session; 12,288 scores 8.2-9.5 against
9.2-10.6); at 6,144 / 8,192 scores and K <= 1024 the register CTA stays as fast or faster
(by up to 0.8 us at 6,144), at K = 2048 the cluster is 0.3-2.2 us faster (at 6,144 scores the
register row takes no bracket; at 8,192 it does and still measured 0.3-1.4 us slower). K of
1,025-2,047 was not measured and keeps the register route; 4,097-6,143 scores at K = 2048 run
the shapes measured at 6,144 (the 512 x 4 register CTA without bracket against four 512 x 1
cluster CTAs), not measured at those lengths.

Every streaming route that does not skip blocks reads with L2 hints (``StreamingConfig.l2_hints``:
the sample's lines evict-last, the pass evict-first), so the sampled sectors are not read twice
from DRAM where the launch does not fit L2 (``tools/tune_bandwidth.py``, ``tune_l2.log``, raw
kernel times): b = 512, n = 262,144 158.6-159.0 us against 161.6-162.5 (ncu: 537 MB read from
DRAM, the logits' size, against 552 MB), b = 128, n = 262,144 45.7-47.2 against 48.1-48.9,
and no shape slower.

Rows past two 512-thread CTAs per SM with K up to ``BULK_MAX_K`` take four 256-thread register
CTAs per SM with a staging cut to 2,048-4,096 entries (``BULK_ROWS_PER_SM``).

Register-resident decode rows issue their loads before their ``kv_lens`` entry arrives
(``RegisterConfig.early_loads``) while the launch has at most one row a SM and the CTA holds at
most ``EARLY_LOADS_MAX_N`` scores; past that they wait for it. Measured on the H200
(``ab_early_loads.log``, raw kernel times, the lower of two runs a variant): full rows 0.2-0.5 us
sooner at b <= 32 and 0.6-1.0 us at b = 128-512
(n = 4,096 / 16,384), but a launch whose rows are all far shorter than the envelope reads the
CTAs' whole capacity: b = 128 and 512 rows of 513-2,047 scores in a 16,384 envelope took
1.6 / 2.7 us longer. Past one row a SM the launch is bandwidth-bound and those bytes cost; up to
it the extra reads overlap the selection (b = 8 and 32: +0.2 us). The cluster-register family
always loads early: it serves at most half the SMs' worth of rows.

bfloat16 and float16 logits (``dtype``) run on the streaming family's 16-bit configurations
(16-byte vectors of 8 scores, 16-bit keys, two scores per compare): the same cores with four
vectors per thread per tile on the 512-thread core (rows > SMs: b = 512, n = 262,144 bf16
116.5 / 94.5 against 130.4 / 101.4 us with two, K = 512 / 2048; prefill windows with values
and deterministic ties keep two, four spill there) and two on the 1024-thread cores (as fast
or faster at b <= 128). The bulk L2 prefetch (``prefetch``) measured neutral or slower for
every format and shape once the hot loop was one compare per score; no route uses it (H200,
raw kernel times in ``benchmarks/results/h200/tune_bandwidth.log``). The register-resident
family serves 16-bit envelopes up to 4,096 and the cluster-register family 16-bit envelopes
by the float32 rules, on the same CTA shapes with half the vectors (the same register slots:
eight scores a vector), except where the 16-bit code spills at 64 registers (the compile
audit): no 16-bit cluster of 1024-thread CTAs where only its bracket was routed or with
deterministic ties (``tune_register16.log``, ``tune_cluster16.log``: bfloat16 at b = 1,
n = 65,536, 10.1 / 10.5 us against 12.6 / 15.4 for the split streaming row, K = 512 / 2048;
n = 131,072 on sixteen CTAs 11.6 / 12.1 against 14.2 / 15.4).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace

from gvr_reference.blockskip import BLOCK, MASK_BLOCKS
from gvr_reference.keys import KEY_FORMATS
from gvr_reference.ladder import MAX_ROW_LENGTH, RowPlan, row_plan
from gvr_reference.ragged import MIN_PART

from .cluster.config import ClusterConfig
from .register.config import RegisterConfig
from .spec import DeviceSpec
from .streaming.config import CLUSTER_SIZES, MODES, PRELOAD_MAX, StreamingConfig

__all__ = [
    "Route",
    "route_static",
    "route_dynamic",
    "cluster_split_route",
    "routed_configs",
    "max_workspace_words",
    "SPLIT_MIN_N",
    "STREAMING_DENSE_MIN",
    "MIN_PART_ELEMS",
    "RAGGED_MIN_ROWS",
    "RAGGED_MIN_N",
    "RAGGED_BULK_MIN_N",
    "RAGGED_BULK_MAX_ROWS",
    "RAGGED_BULK_EXTRA_PER_SM",
    "RAGGED_BULK_FEW_MIN_N",
    "RAGGED_BULK_FEW_ROWS_PER_SM",
    "REGISTER_MAX_N",
    "REGISTER_WIDE_N",
    "BRACKET_MAX_VECS",
    "BRACKET_WIDE_K_VECS",
    "HALF_WARPS_MAX_K",
    "REGISTER_MID_MAX_ROWS_PER_SM",
    "EARLY_LOADS_MAX_N",
    "CLUSTER_MAX_N",
    "CLUSTER_WIDE_N",
    "CLUSTER_BRACKET_MIN_K",
    "CLUSTER_ROW_N",
    "CLUSTER_MIN_N",
    "CLUSTER_ANY_K_N",
    "CLUSTER_LOW_K",
    "FAMILY_NAMES",
    "MAX_K",
    "SMALL_ROW_N",
    "DTYPES",
]

#: The logits formats the kernels read, by torch dtype name.
DTYPES = tuple(KEY_FORMATS)
#: 16-byte vectors per thread per tile of a 16-bit configuration ...
UNROLL_16BIT = 2
#: ... and of the 512-thread core (rows > SMs), where the bytes in flight per SM bound the
#: time (every variant but prefill windows with values and deterministic ties, which spill).
UNROLL_16BIT_MANY_ROWS = 4

#: Rows at least this long may be cut across several CTAs when rows are few.
SPLIT_MIN_N = 32768
#: A split row gives each CTA at least this many scores (ragged split launches too).
MIN_PART_ELEMS = MIN_PART
#: Split decode and prefill launches of at least this many rows and this long an envelope
#: take the ragged split (``StreamingConfig.ragged``; ``tools/tune_ragged.py``,
#: ``tune_ragged.log`` run 2, raw kernel times): at n = 262,144 on serving-like ragged rows
#: 17.7 / 19.5 us against 18.9 / 21.0 for the static split at b = 32 and 18.2 / 21.3 against
#: 23.9 / 25.3 at b = 64 (K = 512 / 2048); its in-kernel assignment costs about 2 us on rows
#: of equal length (26.8 against 24.8 us at b = 32), and at b = 8 or n = 65,536 it measured
#: slower on ragged rows too.
RAGGED_MIN_ROWS = 32
RAGGED_MIN_N = 131073
#: Decode and prefill launches of more rows than SMs, at most ``RAGGED_BULK_MAX_ROWS`` (the
#: 512-thread core measures one row a thread when it hands out the CTAs) and an envelope of at
#: least ``RAGGED_BULK_MIN_N`` run the 512-thread core as a ragged split of ``rows + extra``
#: CTAs, ``extra = min(rows - 1, RAGGED_BULK_EXTRA_PER_SM * SMs)``: rows of equal length get
#: one CTA each (``extra < rows``), as on the single-CTA route, while a row much longer than
#: the batch's mean gets its share of the extra CTAs instead of streaming alone on one CTA
#: after every other row has finished. Measured on the H200 (``tools/tune_ragged.py``,
#: ``tune_ragged_bulk.log``, raw kernel times, K = 512 / 2048): serving-like ragged rows at
#: n = 262,144 take 20.1 / 21.4 us against 42.7 / 40.2 at b = 133, 26.5 / 25.1 against
#: 42.2 / 42.9 at b = 256 and 39.6 / 38.9 against 52.5 / 53.0 at b = 512; rows of equal length
#: pay the hand-out, 2-5 us (b = 512: 156.7 / 167.8 against 154.0 / 162.7). At n = 131,072
#: ragged rows measured faster at b = 133 / 256 but slower at b = 512, K = 2048 (38.9 against
#: 36.5), and at 65,536 even or slower (``tune_ragged_bulk_run1.log`` too, with 32,768);
#: twice the SMs in extra CTAs was never clearly faster. A float32 launch whose block maxima
#: are read (``block_skip``) keeps one CTA a row.
RAGGED_BULK_MIN_N = 131073
RAGGED_BULK_MAX_ROWS = 512
RAGGED_BULK_EXTRA_PER_SM = 1
#: Launches of at most ``RAGGED_BULK_FEW_ROWS_PER_SM`` rows per SM take that ragged split from
#: the shorter envelope ``RAGGED_BULK_FEW_MIN_N`` (``tools/tune_meet.py --set rows2``,
#: ``benchmarks/results/h100/tune_rows2.log``, the H100, raw kernel times, K = 512): serving-like
#: ragged rows at n = 131,072 take 17.6 us against 26.3 at b = 160 and 21.3 against 27.3 at
#: b = 256, at n = 65,536 15.1 against 18.8 and 18.0 against 18.8 (K = 2048: 17.9 against
#: 19.6); rows of equal length pay 2-5 % (n = 131,072: 47.3 against 45.9 us at b = 160, 61.3
#: against 59.9 at b = 256). At n = 32,768 ragged rows gained 4-5 % and rows of equal length
#: lost 7 %. The 65,536 envelope itself, through the API (``benchmarks/results/h100/
#: ab_ragged_65536.log``, the H100, the two routes in one machine session, both orders, beside
#: gvr_2): serving-like ragged rows (``bench_topk.ragged_lengths``) at b = 133 / 200 / 256
#: take 0.74x-0.94x / 0.85x-0.94x / 0.86x-1.02x the one-CTA-a-row time (CUDA-graph replay
#: against gvr_2: 1.05x-1.15x -> 0.81x-0.86x at b = 133), rows of equal length 1.01x-1.08x
#: (still 0.71x-0.92x gvr_2's time).
RAGGED_BULK_FEW_MIN_N = 65536
RAGGED_BULK_FEW_ROWS_PER_SM = 2
#: Envelopes at most this long run on 512-thread CTAs (two per SM) at any batch.
SMALL_ROW_N = 4096
#: Largest K the kernels serve.
MAX_K = 2048
#: Launches of more than this many rows per SM with K at most ``BULK_MAX_K`` run envelopes up
#: to 8,192 on four 256-thread register CTAs per SM (``tools/tune_register.py --configs``,
#: ``tune_register_bulk.json``, raw kernel times, K = 512 / 1024): at b = 512, n = 2,048 9.8 /
#: 10.0 us against 12.5 / 12.0 for two 512-thread CTAs per SM; n = 4,096 13.3 / 13.9 against
#: 15.0 / 15.1; n = 8,192 16.8 / 18.6 against 19.7 / 20.6; at b = 2,048 24-37 % less. At
#: b = 256 (rows within two CTAs per SM) they measured even or slower, and at K = 2048 the
#: 512-thread shapes stay faster.
BULK_ROWS_PER_SM = 2
BULK_MAX_K = 1024
#: Envelopes at most this long run on the register-resident family at any batch.
REGISTER_MAX_N = 16384
#: ... and at most this long when the rows fit the SMs (one 1024-thread CTA each).
REGISTER_WIDE_N = 32768
#: Register shapes of at most this many vectors a thread take the bracket histogram path
#: (with eight, its code spills at 64 registers; at 128, one 512 x 8 CTA per SM, plain decode
#: rows take it too).
BRACKET_MAX_VECS = 4
#: ... while K is at most a quarter of the envelope, and at any K for float32 shapes of this
#: many vectors a thread in 512- or 1024-thread CTAs (``tools/tune_meet.py --set bracket``,
#: ``benchmarks/results/h100/tune_bracket_k.log``, the H100: 512 x 4 rows of 6,144 scores at
#: K = 2048 took 0.77x / 0.82x the radix selection's time at b = 128 / 512; with two vectors,
#: at 4,096 scores, 0.98x-1.05x, and 1.07x at b = 1 with one).
BRACKET_WIDE_K_VECS = 4
#: Plain decode rows of 8,193-16,384 scores at most one row a SM run on 512 x 8 at 128
#: registers with the bracket (half the warps of 1024 x 4, so half the per-warp steps: crowd
#: tests, warp scans, slot atomics, barrier arrivals) while K is at most this; at K = 1024 the
#: two measured even, at K = 2048 1024 x 4 faster (the H100, raw kernel times,
#: ``benchmarks/results/h100/tune_512x8_full.log``, ``tune_512x8_k1024_full.log``).
HALF_WARPS_MAX_K = 512
#: Plain decode launches (float32, no values or deterministic ties) of more than 5/4 rows a SM
#: over envelopes of 8,193-16,384 scores stream (the 512-thread streaming core at two CTAs per
#: SM) rather than run 512 x 8 register rows at two CTAs per SM: the H100, raw kernel times,
#: full rows, ``benchmarks/results/h100/tune_bulk_stream.log``: b = 192 / 256 / 512 at
#: n = 10,240 and 16,384 0.86x-0.98x the register rows' time (1.01x at n = 10,240, K = 512,
#: b = 512; n = 16,384, K = 1024: 15.1 / 15.9 / 27.0 against 16.7 / 18.2 / 28.9 us), at
#: b = 133 0.92x-1.02x; 134-191 rows not measured.
REGISTER_MID_MAX_ROWS_PER_SM = 5 / 4
#: Register rows load before their length arrives (``RegisterConfig.early_loads``) only where
#: the CTA holds at most this many scores: at 16,384 a launch of rows shorter than the
#: envelope reads up to 64 KiB a row it does not need (the H100, 512 x 8 at b = 64 / 128,
#: K = 512: rows of K+1 to n/8 scores 9.2 / 10.7 us against 7.9 / 8.1 without, serving-like
#: ragged rows 9.2 / 10.8 against 8.4 / 8.6; full rows 9.4 / 11.1 against 10.0 / 11.5;
#: ``tune_512x8_short.log``, ``tune_512x8_ragged.log``).
EARLY_LOADS_MAX_N = 8192
#: Envelopes up to this run on the cluster-register family while its CTAs take at most half
#: the SMs (``_cluster_core``).
CLUSTER_MAX_N = 65536
#: ... and up to this with sixteen 512 x 4 CTAs, or eight 1024 x 4 CTAs at K above
#: ``CLUSTER_BRACKET_MIN_K``.
CLUSTER_WIDE_N = 131072
#: 1024-thread cluster CTAs take the bracket path only above this K.
CLUSTER_BRACKET_MIN_K = 512
#: Scores a 1024 x 4 CTA of a cluster holds (a 512 x 4 CTA: half).
CLUSTER_ROW_N = 16384
#: Float32 envelopes above this (and up to ``REGISTER_MAX_N``) run on a cluster of two or
#: four 512-thread CTAs while they take at most half the SMs (``_small_cluster``) at K of at
#: least ``CLUSTER_LOW_K`` ...
CLUSTER_MIN_N = 4096
#: ... and above this at every K.
CLUSTER_ANY_K_N = 8192
#: The K from which envelopes of ``CLUSTER_MIN_N + 1`` to ``CLUSTER_ANY_K_N`` take the cluster
#: (measured at K = 512, 1024 and 2048 only: K of 1,025-2,047 keep the register route).
CLUSTER_LOW_K = 2048
#: CTA size of those clusters.
SMALL_CLUSTER_THREADS = 512
#: The cluster family serves a launch while its CTAs take at most ``1 / CLUSTER_SM_SHARE``
#: of the SMs (``_cluster_core``) ...
CLUSTER_SM_SHARE = 2
#: ... and the small clusters of ``_small_cluster`` at most ``1 / SMALL_CLUSTER_SM_SHARE``.
#: Clusters over every SM measured slower where it counts (``tools/tune_meet.py --set fill``,
#: ``benchmarks/results/h200/tune_fill.log``, raw kernel times): four 512-thread CTAs a row at
#: b = 32, n = 16,384 9.1 -> 12.3-13.1 us, eight at b = 16, n = 65,536 13.1 / 12.7 -> 14.7 /
#: 15.8 us (K = 512 / 2048); the few cells that gained 4-7 % sit beside cells of their shapes
#: that lost.
SMALL_CLUSTER_SM_SHARE = 2
#: A float32 launch that passes block maxima skips blocks (``StreamingConfig.block_skip``)
#: when its logits take at least this many bytes (``rows * n_env * 4``) ...
BLOCK_SKIP_MIN_BYTES = 128 << 20
#: ... or at least this many with an envelope of at least ``BLOCK_SKIP_LONG_N`` scores.
#: Measured on the H200 (raw kernel times, ``benchmarks/results/h200/bench_blockskip_tune.json``
#: and ``bench_blockskip.json``): with rows of 131,072 or more, every launch of 32 MiB or more
#: ran faster with the maxima (gaussian 1.04-1.35x, sink-and-window rows 1.04-3.3x); with
#: shorter rows only from 128 MiB on (at 32-64 MiB rows of 32,768-65,536 scores, where K is a
#: large share of the row, ran 0-4 % slower: gaussian rows at K = 2048 and the real stdlib
#: rows). 128 MiB is also the gate of TensorRT-LLM's draft block-skip (PR #18122). Smaller
#: launches ignore the maxima, and so do 16-bit launches: their block-skip pass measured
#: slower on gaussian rows at every size (0.90-0.96x at 16-256 MiB,
#: ``bench_blockskip_bf16.json``; the 16-bit dense pass is bound by its compares, not by DRAM,
#: so the mask tests cost more than the skipped reads save).
BLOCK_SKIP_LONG_MIN_BYTES = 32 << 20
BLOCK_SKIP_LONG_N = 131072
#: The kernel families the router picks from, in the order it tries them.
FAMILY_NAMES = ("register", "cluster", "streaming")
#: The cluster split (``StreamingConfig.cluster``) of eight CTAs a row in place of the
#: static workspace split of a float32 decode launch without values or deterministic ties of
#: ``CLUSTER_SPLIT_MIN_ROWS`` to ``CLUSTER_SPLIT_MAX_ROWS`` rows, at K above
#: ``CLUSTER_SPLIT_MIN_K`` (:func:`_split_cluster`).
#: Measured on the H200 (``tools/tune_variants.py``, ``benchmarks/results/h200/
#: tune_variants.log``, raw kernel times, the workspace split against the cluster split with
#: dense rows): b = 8, n = 262,144, K = 2048 15.4 us against 17.8; the real kjv-131k rows
#: (b = 12) 14.9 / 17.0 against 15.8 / 18.4 at K = 1024 / 2048; and through the API on the
#: H100 (``benchmarks/results/h100/bench_cluster_routes.json``, against ``bench_main.json``'s
#: workspace split): b = 8, n = 262,144 16.6 / 16.9 against 17.4 / 18.2 us eager. At K = 512
#: the same H100 run measured it slower (b = 8, n = 131,072 / 262,144 15.6 / 17.9 against
#: 14.8 / 17.0; ragged rows 16.0 against 14.5), and so were sixteen CTAs a row at b = 1
#: (n = 262,144: 14.5 / 14.1 / 14.2 against 13.3 / 13.3 / 14.5 us for K = 512 / 1024 /
#: 2048, though the H200's raw K = 2048 time was 13.2 against 15.2, and eight CTAs' 14.0):
#: those keep the split, and so do two rows (not measured).
#: Since the workspace split's meeting lost its fences and its second atomic (about 2 us a
#: row), measured again on the H100 (``benchmarks/results/h100/tune_meet.log``, raw kernel
#: times, uniform full rows, the cluster split against the workspace split the router gives
#: without it): the workspace split is faster or even at K = 1024 (0.87x-1.01x over 3-12 rows
#: of 131,072 and 262,144 scores) and at K = 2048 where its CTAs read at most
#: ``CLUSTER_SPLIT_MIN_CHUNK`` scores (b = 4, n = 262,144 on 32 CTAs a row 0.93x; b = 8 / 12,
#: n = 131,072 on 16 / 11 0.97x / 1.00x), slower with longer chunks (b = 8 / 12,
#: n = 262,144 on 16 / 11 CTAs a row 1.07x / 1.09x). So the cluster split of eight takes
#: K = 2048 launches whose workspace split would read more than that a CTA, and the cluster
#: family's eight 1024-thread CTAs a row (:func:`_cluster_split_replaces`) give way to the
#: workspace split where its chunks are that short (b = 8, n = 131,072, K = 1024: 12.7 us
#: against 14.5).
CLUSTER_SPLIT_MIN_ROWS = 3
CLUSTER_SPLIT_MAX_ROWS = 12
CLUSTER_SPLIT_MIN_K = 1024
CLUSTER_SPLIT_MIN_CHUNK = 12288
#: ... and from this many rows (a static split of two to four CTAs a row, envelopes up to
#: ``RAGGED_MIN_N - 1``) a cluster of two: b = 64, n = 65,536, 12.1-13.4 us against
#: 12.9-25.0 on rows of 2,049-12,288 scores, 14.0 / 14.4 against 15.8 / 22.4 on the ragged
#: rows (K = 1024 / 2048); b = 32, n = 65,536 and 131,072, K = 2048 15.5 / 18.9 against
#: 17.7 / 20.5 (K = 512 even: 15.3 against 15.2). Through the API on the H100
#: (``bench_cluster_routes.json`` against ``bench_main.json``): the ragged rows at b = 64,
#: n = 65,536 15.6 / 15.4 against 16.9 / 23.2 us eager (K = 512 / 2048); b = 32 over 65,536
#: and 131,072 scores 16.6-20.2 against 18.4-22.3 at K = 1024 / 2048, 17.4 / 20.2 against
#: 16.9 / 19.6 at K = 512. Clusters of four over 32 rows measured 1.4x slower (more than the
#: GPCs hold at once); rows 13-31 keep the workspace split (not measured). Measured again
#: after the workspace split's faster meeting (H100, ``tune_meet.log``): at K = 512 the
#: workspace split is faster (b = 32, n = 65,536 / 131,072 0.93x / 0.95x; b = 64,
#: n = 65,536 0.95x, its ragged rows 0.94x), so the pair takes K above
#: ``CLUSTER_PAIR_MIN_K`` only (K = 1024 0.96x / 0.98x at b = 32 kept the pair for the
#: short rows the H200 measured it on; K = 2048 1.05x-1.07x).
CLUSTER_PAIR_MIN_ROWS = 32
CLUSTER_PAIR_MIN_K = 512
#: K above this (at most 2048) with an envelope of ``REGISTER_MAX_N + 1`` to
#: ``REGISTER_WIDE_N`` (the register family's 1024 x 8 row) take the cluster split of
#: eight CTAs a row for float32 decode launches of at most ``CLUSTER_SPLIT_MAX_ROWS`` rows
#: without values or deterministic ties: rows of 4,097-12,288 scores in a 32,768 arena at
#: b = 1 / 8, K = 2048 10.9-12.0 / 11.1-12.6 us against 12.4-13.6 / 12.4-14.4; the real rows
#: 12.0 (cr4) and 11.9 (stdlib) against 17.2 and 13.9 at b = 8 (H200, raw kernel times);
#: through the API on the H100 13.1 / 12.9 against 17.7 / 14.0 us eager. (Since the
#: cluster-register family's four 512 x 4 CTAs a row serve these envelopes at every K while
#: they take at most half the SMs, this is reached only on devices of fewer than 96 SMs.)
CLUSTER_SPLIT_REGISTER_MIN_K = 1024
#: The routed cluster splits' ``dense_min``: rows the aim leaves unsampled past twice K are
#: sampled (the same cells without: up to 2.3x slower on short rows, even on full rows).
CLUSTER_SPLIT_DENSE_MIN = 2
#: The routed cluster splits' L2 prefetch depth (``StreamingConfig.prefetch``) where the chunk
#: streams (no preload holds it): a cluster split row has one or two CTAs per SM and its pass
#: waits on DRAM latency. Measured on an H100 (``benchmarks/results/h100/tune_pass.log``, raw
#: kernel times against the same launch without): 0.93x-0.97x on every cluster split cell
#: (b = 32, n = 65,536 / 131,072; b = 8, n = 262,144; serving-like ragged rows at b = 8 / 64),
#: where on one CTA a row with every SM busy it measured 1.01x-1.08x (no route takes it there).
CLUSTER_SPLIT_PREFETCH = 1
#: The streaming cores' ``dense_min`` for float32 decode launches without values or
#: deterministic ties (the cluster splits take :data:`CLUSTER_SPLIT_DENSE_MIN`): rows of more
#: than three K scores that the aim would leave unsampled (every score staged, then selected
#: on one CTA) are sampled. Measured on the H200 (``benchmarks/results/h200/tune_variants.log``,
#: raw kernel times): serving-like ragged rows on the 512-thread cores 0.92x / 0.93x at
#: K = 2048 (n = 65,536 / 262,144, b = 256) and 0.96x / 0.99x at K = 1024, the ragged and
#: workspace splits 0.99x-1.00x; full rows are sampled either way (1.00x). Three K rather than
#: two: rows just past twice K sampled lost up to 1.15x (b = 64, rows of 2,049, K = 1024).
STREAMING_DENSE_MIN = 3

#: Float32 decode launches without values or deterministic ties whose K is above
#: ``SPLIT_LOW_AIM_MIN_K`` aim the workspace and ragged splits' first rung at
#: ``SPLIT_LOW_AIM`` K survivors instead of three K: every survivor is published to the slab,
#: gathered and binned by the finishing CTA, so at K = 2048 the third K costs more than the
#: rarer retry it saves (a sample of 8,192 scores holds about 64 above the K-th score of a
#: 262,144-score row, and the rung at rank 128 sits 8 standard deviations above). Measured on
#: the H100 (``benchmarks/results/h100/tune_aim.log``, raw kernel times against the same
#: configuration aiming at three K, every launch exact): K = 2048 0.95x at b = 1,
#: n = 262,144, 0.94x at b = 8, n = 131,072, the ragged split at b = 32, n = 262,144 0.96x /
#: 0.93x (uniform / serving-like ragged rows); K = 1024 even (1.00x), K = 512 1.00x-1.03x
#: slower (a sample of 8,192 holds only 16 scores above the K-th there). The cluster splits
#: keep three K (not measured).
SPLIT_LOW_AIM_MIN_K = 1024
SPLIT_LOW_AIM = 2

#: The streaming cores the policy picks from (call-mode fields left at their defaults).
_SPLIT = StreamingConfig(
    threads=1024, capacity=16384, split=True, unroll=4, aim_mult=3, sample_max=8192
)
_SINGLE_1024 = StreamingConfig(
    threads=1024, capacity=16384, split=False, unroll=4, aim_mult=2, sample_max=8192
)
_SINGLE_512 = StreamingConfig(
    threads=512,
    capacity=8192,
    split=False,
    unroll=4,
    aim_mult=2,
    sample_max=8192,
    min_hits=64,
    aim_boost=2,
)


def _register_core(
    spec: DeviceSpec,
    rows: int,
    n_env: int,
    k: int,
    mode: str,
    with_values: bool,
    deterministic: bool,
    dtype: str = "float32",
):
    """The register-resident core for a launch, or None where the streaming family is faster
    or the row does not fit.

    The cores with 64 registers per thread (1024 threads, 512 at two CTAs per SM, or 256 at
    four: the bulk shapes of :func:`_register_shape`) hold
    every variant except those the compile audit finds spilling there
    (``tests/kernels/test_compile.py``): prefill windows with the deterministic tie mode, and
    for eight vectors per thread also prefill windows, values and the tie mode; those variants
    run one 512-thread CTA per SM (128 registers) or stream.

    The bracket histogram path (``RegisterConfig.bracket``) is built for every shape of at
    most ``BRACKET_MAX_VECS`` vectors a thread while K is at most a quarter of the envelope
    (at K = 2048 on 4,096 scores the radix selection over the registers measured faster),
    and at any K for float32 shapes of ``BRACKET_WIDE_K_VECS`` vectors in 512- or 1024-thread
    CTAs (the radix levels walk every register slot, so their cost grows with the vectors:
    at K = 2048 on 6,144 scores the bracket took 0.77x / 0.82x their time at b = 128 / 512),
    except where its code spills (the compile audit): at four vectors a thread and 64
    registers (1024 x 4, 512 x 4 at two CTAs per SM, 256 x 4 at four) only decode rows
    without values or deterministic ties take it.

    16-bit logits take the float32 shape with half the vectors (the same register slots, eight
    scores a vector), for envelopes up to ``SMALL_ROW_N`` (``tune_register16.log``, bfloat16,
    raw kernel times: n = 4,096 takes 6.6 / 7.2 us at b = 1 and 19.3 / 21.3 us at b = 512
    against 10.3 / 10.4 and 23.9 / 25.7 for the 16-bit streaming core, K = 512 / 2048; at
    n = 16,384 the streaming core measured as fast at b = 1, 10.4 / 11.1 against 9.9 / 12.5,
    and faster at b = 512, 24.6 / 31.2 against 32.4-54.1 / 38.9-60.5). Those shapes hold at
    most two vectors a thread, where the bracket code fits; at 64 registers with more the
    16-bit bracket code spills even for decode rows without values (the compile audit).
    """
    if dtype != "float32" and n_env > SMALL_ROW_N:
        return None
    lean = mode == "decode" and not with_values and not deterministic
    if lean and n_env > 8192 and rows > REGISTER_MID_MAX_ROWS_PER_SM * spec.sm_count:
        return None  # many rows of 8,193-16,384 scores: the streaming core is faster
    # Rows past two 512-thread CTAs per SM (float32, measured): the bulk shapes.
    bulk = rows > BULK_ROWS_PER_SM * spec.sm_count and k <= BULK_MAX_K and dtype == "float32"
    reg = _register_shape(spec, rows, n_env, k, mode, with_values, deterministic, bulk)
    if reg is None:
        return None
    fits = reg.vecs <= 2 or reg.threads * reg.resident <= 512 or lean
    wide_k = reg.threads >= 512 and dtype == "float32"
    reg = replace(
        reg,
        bracket=(reg.vecs <= BRACKET_MAX_VECS or (lean and reg.threads * reg.resident <= 512))
        and (4 * k <= n_env or (wide_k and reg.vecs >= BRACKET_WIDE_K_VECS))
        and fits,
        early_loads=mode == "decode"
        and rows <= spec.sm_count
        and reg.threads * reg.resident <= 512
        and reg.max_n <= EARLY_LOADS_MAX_N,
    )
    if dtype != "float32":
        reg = replace(reg, dtype=dtype, vecs=max(1, reg.vecs // 2))
    return reg


def _register_shape(
    spec: DeviceSpec,
    rows: int,
    n_env: int,
    k: int,
    mode: str,
    with_values: bool,
    deterministic: bool,
    bulk: bool = False,
):
    """The CTA shape of :func:`_register_core` (threads, vectors, residency, staging), or
    None; ``bulk``: the launch takes the bulk shapes where they hold the envelope."""
    few = rows <= spec.sm_count
    prefill = mode == "prefill"
    plain = not (prefill or with_values or deterministic)
    # Bulk: four 256-thread CTAs per SM, the staging cut to what K <= BULK_MAX_K needs, so
    # every SM holds twice the rows (with eight vectors a thread at 64 registers only plain
    # decode and full rows compile without spills).
    if n_env <= 2048:
        if bulk:
            return RegisterConfig(threads=256, vecs=2, resident=4, capacity=2048)
        return RegisterConfig(threads=512, vecs=1)
    if n_env <= 4096:
        if bulk and not (prefill and deterministic):
            return RegisterConfig(threads=256, vecs=4, resident=4, capacity=2048)
        return RegisterConfig(threads=512, vecs=2)
    if n_env <= 8192:
        if bulk and plain:
            return RegisterConfig(threads=256, vecs=8, resident=4, capacity=4096)
        two = not few and not (prefill and deterministic)
        return RegisterConfig(threads=512, vecs=4, resident=2 if two else 1)
    if n_env <= REGISTER_MAX_N:
        if few and plain and mode == "decode" and k <= HALF_WARPS_MAX_K:
            return RegisterConfig(threads=512, vecs=8)
        if few and not (prefill and deterministic):
            return RegisterConfig(threads=1024, vecs=4)
        return RegisterConfig(threads=512, vecs=8, resident=2 if plain and not few else 1)
    if n_env <= REGISTER_WIDE_N and few and not (prefill or deterministic):
        return RegisterConfig(threads=1024, vecs=8)
    return None


def _cluster_core(
    spec: DeviceSpec,
    rows: int,
    n_env: int,
    k: int,
    mode: str,
    with_values: bool,
    dtype: str = "float32",
    deterministic: bool = False,
):
    """The cluster-register core for a launch, or None where another family is faster.

    Measured on the H200 (``tools/tune_cluster.py``, ``tune_cluster.log`` runs 1-4; b = 1
    cells vary by 1-2 us between runs, so the rules compare shapes within a run): the
    cluster wins while its CTAs take at most half the SMs (beyond that, clusters wait for a
    whole group of free SMs: 128 CTAs in clusters of 4 or 8 ran 1.3x-1.6x slower than the
    split streaming row). Envelopes of 32,769-65,536 run on eight 512 x 4 CTAs with the
    bracket path at every K (K = 2048, b = 1: 10.6 / 12.9 / 14.4 us in runs 2-4 against
    13.8 / 14.4 / 14.8 for four 1024 x 4 CTAs), or on four 1024 x 4 CTAs when eight CTAs a
    row would pass half the SMs; envelopes up to 32,768 on four 512 x 4 CTAs at every K (the
    H100, ``benchmarks/results/h100/tune_cluster_k2048.log``, raw kernel times, the bracket
    path with the bit walk: K = 2048, b = 1 / 8 / 16 8.4 / 8.5 / 9.2 us on gaussian rows
    against 14.8 / 12.0 / 13.8 for the cluster split or the 1024 x 8 register row, the real
    32,768-score rows 9.0 / 8.9 against 12.5; the H200 runs before the bit walk and the crowd
    test's bracket, ``../h200/tune_cluster_k2048.log``, lost on ReLU-like rows, whose zeros
    sent them to the sampled path); envelopes of 65,537-131,072 on eight
    1024 x 4 CTAs only where their bracket path runs (K > 512, decode and full rows without
    values: b = 1, K = 2048, 15.9 / 15.5 against 16.9 / 16.8 us for the split streaming row
    in runs 3-4; its sampled path, 17.7-18.0, is slower than the split row), and on sixteen
    512 x 4 CTAs with the bracket at every K on devices that schedule the non-portable
    16-CTA cluster (``DeviceSpec.max_cluster_size``) while they take at most half the SMs
    (run 5, b = 1: 11.8 / 11.9 / 11.1 us for K = 512 / 1024 / 2048 against 14.5 / 15.0 /
    14.9 for the route before; at b = 8 their 128 CTAs ran 20.4-20.7 us against 15.6-18.9
    for the split row or eight 1024 x 4 CTAs). The bracket path
    (``ClusterConfig.bracket``) serves every 512-thread shape, and 1024-thread CTAs
    (64 registers) above K = 512 for decode and full rows without values: at K <= 512 the
    sampled path measured as fast, and for prefill windows or values the bracket code spills
    at 64 registers (the compile audit). Float32 envelopes of ``CLUSTER_MIN_N + 1`` to
    ``REGISTER_MAX_N`` take :func:`_small_cluster` (up to ``CLUSTER_ANY_K_N`` only at K of at
    least ``CLUSTER_LOW_K``).
    """
    limit = spec.sm_count // CLUSTER_SM_SHARE
    if CLUSTER_MIN_N < n_env <= REGISTER_MAX_N:
        if n_env <= CLUSTER_ANY_K_N and k < CLUSTER_LOW_K:
            return None
        return _small_cluster(spec, rows, n_env, dtype, spec.sm_count // SMALL_CLUSTER_SM_SHARE)
    if not REGISTER_MAX_N < n_env <= CLUSTER_WIDE_N:
        return None
    half = dtype != "float32"
    # 16-bit logits: the same CTAs and register slots with eight scores a vector; at 1024
    # threads (64 registers) their bracket code spills, and so does the sampled code with
    # deterministic ties (prefill windows with values on sm_90a, full rows on sm_100a: the
    # compile audit).
    wide_bracket = k > CLUSTER_BRACKET_MIN_K and mode != "prefill" and not with_values and not half
    if n_env > CLUSTER_MAX_N:
        if 16 * rows <= limit and spec.max_cluster_size >= 16:
            shape = (16, 512)
        else:
            shape = (8, 1024) if wide_bracket and 8 * rows <= limit else None
    elif n_env <= 2 * CLUSTER_ROW_N:
        shape = (4, 512) if 4 * rows <= limit else None
    elif 8 * rows <= limit:
        shape = (8, 512)
    else:
        shape = (4, 1024) if 4 * rows <= limit else None
    if shape is None or shape[0] > spec.max_cluster_size:
        return None
    if half and shape[1] == 1024 and deterministic:
        return None
    bracket = shape[1] == 512 or wide_bracket
    vecs = 2 if half else 4
    return ClusterConfig(
        cluster=shape[0], threads=shape[1], vecs=vecs, bracket=bracket, dtype=dtype
    )


def _small_cluster(spec: DeviceSpec, rows: int, n_env: int, dtype: str, limit: int):
    """The cluster for a float32 envelope of ``CLUSTER_MIN_N + 1`` to ``REGISTER_MAX_N``
    scores, or None: four 512-thread CTAs a row while they take at most ``limit`` SMs, else
    two, else None (the register family); each thread holds the fewest vectors (1, 2 or 4)
    that hold the envelope."""
    if dtype != "float32":
        return None
    for cluster in (4, 2):
        if cluster * rows <= limit and cluster <= spec.max_cluster_size:
            vecs = 1
            while cluster * SMALL_CLUSTER_THREADS * vecs * 4 < n_env:
                vecs *= 2
            return ClusterConfig(
                cluster=cluster, threads=SMALL_CLUSTER_THREADS, vecs=vecs, bracket=True
            )
    return None


@dataclass(frozen=True)
class Route:
    """The capture-stable half of a route: everything a launch freezes.

    Attributes:
        config: the typed compile configuration (its ``family`` names the kernel family).
        parts: the kernels' ``parts`` argument: CTAs per row meeting through a global
            workspace (``> 1`` only for split configurations; a cluster configuration
            launches its own cluster per row); for a ragged split
            (``StreamingConfig.ragged``) the launch's CTAs beyond one per row, which the
            kernel shares out by the rows' lengths (``gvr_reference.ragged``; 1 on a part
            of one SM). Whether a launch needs a workspace is ``workspace_words > 0``.
        grid: CTAs in the launch (``rows * parts``; ``rows + parts`` for a ragged split;
            ``rows * cluster`` for a cluster).
        workspace_words: uint32 words of zeroed workspace the launch needs (0: none).
        n_env: the envelope this route was made for.
    """

    config: StreamingConfig | RegisterConfig | ClusterConfig
    parts: int
    grid: int
    workspace_words: int
    n_env: int

    @property
    def family(self) -> str:
        """The kernel family of the configuration."""
        return self.config.family

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA (from the configuration)."""
        return self.config.smem_bytes

    @property
    def ladder(self):
        """The ladder parameters of the configuration."""
        return self.config.ladder


def _check_launch(rows: int, n_env: int, k: int, mode: str, dtype: str) -> None:
    """Raise ``ValueError`` (naming the argument) for a launch out of the routers' range."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if not 1 <= n_env < MAX_ROW_LENGTH:
        raise ValueError(f"n_env must be in [1, {MAX_ROW_LENGTH}), got {n_env}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in [1, {MAX_K}], got {k}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def route_static(
    spec: DeviceSpec,
    *,
    rows: int,
    n_env: int,
    k: int,
    mode: str = "decode",
    with_values: bool = False,
    deterministic: bool = False,
    dtype: str = "float32",
    families: tuple[str, ...] = FAMILY_NAMES,
    block_skip: bool = False,
) -> Route:
    """Choose the configuration and grid for a launch.

    Args:
        spec: the device.
        rows: rows in the launch (``>= 1``).
        n_env: longest row length the launch may see, in scores (compressed units);
            ``1 <= n_env < 2**26``.
        k: top-K size, ``1 <= k <= 2048``.
        mode: the kernels' window source: ``"decode"``, ``"prefill"`` or ``"full"``.
        with_values: the kernel also writes the selected values.
        deterministic: the K-th value's tie class yields its smallest indices.
        dtype: the logits format, one of :data:`DTYPES` (``"float32"``, ``"bfloat16"``,
            ``"float16"``).
        families: the families the router may pick (default: all of :data:`FAMILY_NAMES`;
            the streaming family serves every launch, so it is always allowed); tools and
            benchmarks use this to time a launch without a family.
        block_skip: the launch passes producer block maxima (``KernelArgs.block_max``): a
            float32 streaming route of at least :data:`BLOCK_SKIP_MIN_BYTES` of logits (or
            :data:`BLOCK_SKIP_LONG_MIN_BYTES` with an envelope of at least
            :data:`BLOCK_SKIP_LONG_N`) whose CTAs' chunks fit the live-block mask
            (``gvr_reference.blockskip.MASK_BLOCKS`` blocks) reads them
            (``StreamingConfig.block_skip``); any other route ignores them.

    Returns:
        The :class:`Route`. It is a pure function of its arguments, so a launch key made from
        them is stable under CUDA-graph capture.

    Raises:
        ValueError: an argument is out of range (naming it), or the device's shared memory is
            too small for ``k``.
    """
    _check_launch(rows, n_env, k, mode, dtype)
    unknown = set(families) - set(FAMILY_NAMES)
    if unknown:
        raise ValueError(f"families must be among {FAMILY_NAMES}, got {sorted(unknown)}")
    reg = clu = None
    launch = dict(
        rows=rows, n_env=n_env, k=k, mode=mode, with_values=with_values, deterministic=deterministic
    )
    # float32 decode launches without values or deterministic ties: where the cluster split
    # was measured
    lean = mode == "decode" and dtype == "float32" and not (with_values or deterministic)
    if "cluster" in families:
        clu = _cluster_core(spec, rows, n_env, k, mode, with_values, dtype, deterministic)
    # a lean launch whose cluster core the workspace split replaces (short chunks)
    to_split = False
    if clu is not None and clu.smem_bytes <= spec.smem_per_block:
        if _cluster_split_replaces(clu, mode):
            short = rows >= CLUSTER_SPLIT_MIN_ROWS and _short_split_chunks(spec, rows, n_env)
            if not (lean and short):
                return _routed_cluster_split(spec, clu.cluster, launch)
            to_split = True
        else:
            config = _resident_config(clu, launch)
            return Route(
                config=config, parts=1, grid=rows * clu.cluster, workspace_words=0, n_env=n_env
            )
    if "register" in families and not to_split:
        reg = _register_core(spec, rows, n_env, k, mode, with_values, deterministic, dtype)
    if reg is not None and reg.smem_bytes * reg.resident <= spec.smem_per_sm:
        if lean and _cluster_split_replaces_register(spec, reg, rows, k):
            return _routed_cluster_split(spec, 8, launch)
        config = _resident_config(reg, launch)
        return Route(config=config, parts=1, grid=rows, workspace_words=0, n_env=n_env)
    s = spec.sm_count
    parts = _static_parts(spec, rows, n_env)
    ragged = False
    # Block skip (the maxima passed): float32 launches past the working-set gate whose CTAs'
    # chunks fit the live-block mask (a longer chunk could never skip).
    nbytes = rows * n_env * 4
    big = nbytes >= BLOCK_SKIP_MIN_BYTES or (
        n_env >= BLOCK_SKIP_LONG_N and nbytes >= BLOCK_SKIP_LONG_MIN_BYTES
    )
    fits_mask = -(-n_env // parts) // BLOCK + 2 <= MASK_BLOCKS
    skips = block_skip and dtype == "float32" and big and fits_mask
    if parts > 1:
        # Rows of a decode or prefill launch may differ in length: the ragged split hands
        # the CTAs out by length in-kernel (full rows are all as long as the width).
        ragged = mode != "full" and rows >= RAGGED_MIN_ROWS and n_env >= RAGGED_MIN_N
        cluster = 0
        if lean and not (ragged or skips):
            cluster = _split_cluster(spec, rows, parts, k, n_env)
        if cluster:
            return _routed_cluster_split(spec, cluster, launch)
        core = replace(_SPLIT, ragged=ragged)
        if lean and k > SPLIT_LOW_AIM_MIN_K and not skips:
            core = replace(core, aim_mult=SPLIT_LOW_AIM)
    elif rows <= s and n_env > SMALL_ROW_N:
        core = _SINGLE_1024
    else:
        core = _SINGLE_512
        ragged = (
            mode != "full"
            and s < rows <= RAGGED_BULK_MAX_ROWS
            and (
                n_env >= RAGGED_BULK_MIN_N
                or (n_env >= RAGGED_BULK_FEW_MIN_N and rows <= RAGGED_BULK_FEW_ROWS_PER_SM * s)
            )
            and not skips
        )
        if ragged:
            core = replace(core, split=True, ragged=True)
    if skips and not core.prefetch:
        core = replace(core, block_skip=True)
    else:
        core = replace(core, l2_hints=True)
    # Smaller parts (consumer GPUs): halve the staging until it fits.
    while core.smem_bytes > spec.smem_per_block and core.capacity > 4 * k * core.aim_mult:
        core = replace(core, capacity=core.capacity // 2)
    if core.smem_bytes > spec.smem_per_block:
        raise ValueError(
            f"k={k} needs more shared memory per block than {spec.name} offers "
            f"({spec.smem_per_block} bytes)"
        )
    if dtype != "float32":
        unroll = UNROLL_16BIT
        if core.threads == 512 and not (mode == "prefill" and with_values and deterministic):
            unroll = UNROLL_16BIT_MANY_ROWS
        core = replace(core, dtype=dtype, unroll=unroll)
    config = replace(core, mode=mode, with_values=with_values, deterministic=deterministic)
    config = replace(config, preload=_preload(config, parts, n_env))
    if lean and not config.block_skip:
        config = replace(config, dense_min=STREAMING_DENSE_MIN)
    words = config.workspace_words_per_row
    if ragged:
        # The kernels' argument is the CTAs beyond one per row; a split row meets in one of
        # min(rows, extra) workspace row slots (``StreamingConfig.ragged``).
        extra = rows * (parts - 1) if parts > 1 else min(rows - 1, RAGGED_BULK_EXTRA_PER_SM * s)
        return Route(
            config=config,
            parts=extra,
            grid=rows + extra,
            workspace_words=min(rows, extra) * words,
            n_env=n_env,
        )
    return Route(
        config=config,
        parts=parts,
        grid=rows * parts,
        workspace_words=rows * words if parts > 1 else 0,
        n_env=n_env,
    )


def _cluster_split_replaces(clu: ClusterConfig, mode: str) -> bool:
    """Whether the cluster split of as many CTAs a row replaces the cluster family's route
    ``clu`` (:func:`route_static`): its eight 1024-thread CTAs a row (float32 envelopes of
    65,537-131,072 at K > 512, decode and full rows without values, :func:`_cluster_core`),
    for decode rows.

    Measured on the H200 at 8 rows (``benchmarks/results/h200/tune_cluster_split.log``, raw
    kernel times, uniform / serving-like ragged rows): K = 1024 14.9 / 14.2 us on the cluster
    family against 12.9 / 12.0 us on the cluster split, K = 2048 14.9 / 14.2 against 13.4 /
    12.1; through the API 15.3 -> 13.2 and 15.2 -> 13.6 us replayed
    (``bench_cluster_split_co.json``). Full rows were not measured. With dense rows
    (:data:`CLUSTER_SPLIT_DENSE_MIN`) the same cells measured even (b = 8, n = 131,072,
    K = 2048: 13.3 us either way, ``tune_variants.log``). A lean decode launch of at least
    :data:`CLUSTER_SPLIT_MIN_ROWS` rows whose static workspace split has short chunks
    (:func:`_short_split_chunks`) takes that split instead (:data:`CLUSTER_SPLIT_MIN_CHUNK`;
    fewer rows were not measured). Where else the cluster split replaces a route:
    :func:`_cluster_split_replaces_register` and :func:`_split_cluster`.
    """
    return mode == "decode" and clu.dtype == "float32" and (clu.cluster, clu.threads) == (8, 1024)


def _resident_config(core: RegisterConfig | ClusterConfig, launch: dict):
    """A register or cluster core with the call's mode, values and tie mode (``launch``: the
    keyword arguments of :func:`cluster_split_route`) and, on the bracket path, the bit walk
    (``bit_walk``; ``benchmarks/results/h200/tune_variants.log``, the H200: the routed time's
    geomean 0.99x over 25 cluster cells, 0.94x over 7 register cells, 0.90x-1.06x each)."""
    return replace(
        core,
        mode=launch["mode"],
        with_values=launch["with_values"],
        deterministic=launch["deterministic"],
        bit_walk=core.bracket,
    )


def _static_parts(spec: DeviceSpec, rows: int, n_env: int) -> int:
    """CTAs a row of the static workspace split of ``rows`` rows of an ``n_env`` envelope (1:
    one CTA a row): rows at least :data:`SPLIT_MIN_N` long, at most half the SMs of them, as
    many CTAs as the SMs share out, each at least :data:`MIN_PART_ELEMS` scores."""
    s = spec.sm_count
    if rows <= s // 2 and n_env >= SPLIT_MIN_N:
        return max(1, min(s // rows, -(-n_env // MIN_PART_ELEMS)))
    return 1


def _long_chunks(n_env: int, parts: int) -> bool:
    """Whether ``parts`` CTAs a row over an ``n_env`` envelope each read more than
    :data:`CLUSTER_SPLIT_MIN_CHUNK` scores."""
    return -(-n_env // parts) > CLUSTER_SPLIT_MIN_CHUNK


def _short_split_chunks(spec: DeviceSpec, rows: int, n_env: int) -> bool:
    """Whether the static workspace split of the launch (:func:`_static_parts`) has at least
    two CTAs a row, each reading at most :data:`CLUSTER_SPLIT_MIN_CHUNK` scores: where it
    measured faster than a cluster split or the cluster family's eight 1024-thread CTAs."""
    parts = _static_parts(spec, rows, n_env)
    return parts > 1 and not _long_chunks(n_env, parts)


def _split_cluster(spec: DeviceSpec, rows: int, parts: int, k: int, n_env: int) -> int:
    """The cluster size of the cluster split that replaces a workspace split of ``parts``
    CTAs a row (a static split: ``rows * parts <= SMs``) over an ``n_env`` envelope, or 0 to
    keep it: eight for :data:`CLUSTER_SPLIT_MIN_ROWS` to :data:`CLUSTER_SPLIT_MAX_ROWS` rows at
    K above :data:`CLUSTER_SPLIT_MIN_K` (where the split has at least eight CTAs a row, each
    reading more than :data:`CLUSTER_SPLIT_MIN_CHUNK` scores, and the device schedules
    eight), two from :data:`CLUSTER_PAIR_MIN_ROWS` rows at K above
    :data:`CLUSTER_PAIR_MIN_K`."""
    if rows <= CLUSTER_SPLIT_MAX_ROWS:
        fits = k > CLUSTER_SPLIT_MIN_K and 8 <= min(parts, spec.max_cluster_size)
        fits = fits and _long_chunks(n_env, parts)
        return 8 if fits and rows >= CLUSTER_SPLIT_MIN_ROWS else 0
    return 2 if rows >= CLUSTER_PAIR_MIN_ROWS and k > CLUSTER_PAIR_MIN_K else 0


def _cluster_split_replaces_register(spec: DeviceSpec, reg: RegisterConfig, rows: int, k: int):
    """Whether the cluster split of eight CTAs a row replaces the register route ``reg`` of
    a float32 decode launch without values or deterministic ties: the 1024 x 8 row
    (envelopes of ``REGISTER_MAX_N + 1`` to ``REGISTER_WIDE_N``) at K above
    :data:`CLUSTER_SPLIT_REGISTER_MIN_K`, for at most :data:`CLUSTER_SPLIT_MAX_ROWS` rows
    on a device that schedules clusters of eight."""
    return (
        k > CLUSTER_SPLIT_REGISTER_MIN_K
        and (reg.threads, reg.vecs) == (1024, 8)
        and rows <= CLUSTER_SPLIT_MAX_ROWS
        and spec.max_cluster_size >= 8
    )


def _routed_cluster_split(spec: DeviceSpec, cluster: int, launch: dict) -> Route:
    """The router's cluster split of ``cluster`` CTAs a row for ``launch`` (the keyword
    arguments of :func:`cluster_split_route`), with :data:`CLUSTER_SPLIT_DENSE_MIN` and,
    where no preload holds the chunk, :data:`CLUSTER_SPLIT_PREFETCH`."""
    route = cluster_split_route(spec, cluster=cluster, dense_min=CLUSTER_SPLIT_DENSE_MIN, **launch)
    if route.config.preload:
        return route
    return replace(route, config=replace(route.config, prefetch=CLUSTER_SPLIT_PREFETCH))


def cluster_split_route(
    spec: DeviceSpec,
    *,
    rows: int,
    n_env: int,
    k: int,
    cluster: int,
    mode: str = "decode",
    with_values: bool = False,
    deterministic: bool = False,
    dtype: str = "float32",
    dense_min: int = 0,
) -> Route:
    """A cluster split launch (``StreamingConfig.cluster``): the split core with each row's
    ``cluster`` CTAs in one thread-block cluster, meeting through distributed shared memory
    instead of the workspace (grid ``rows * cluster``, no workspace), with ``dense_min``
    (``StreamingConfig.dense_min``). :func:`route_static` chooses it (with
    :data:`CLUSTER_SPLIT_DENSE_MIN`) where :func:`_cluster_split_replaces`,
    :func:`_cluster_split_replaces_register` or :func:`_split_cluster` say; the device tests
    and ``tools/tune_cluster_split.py`` launch any cell through this.

    Raises:
        ValueError: ``cluster`` is not one of ``CLUSTER_SIZES`` or is larger than the device
            schedules (``spec.max_cluster_size``), or an argument is out of range (as
            :func:`route_static`).
    """
    if cluster not in CLUSTER_SIZES or cluster > spec.max_cluster_size:
        raise ValueError(
            f"cluster must be one of {CLUSTER_SIZES} and at most {spec.max_cluster_size} on "
            f"{spec.name}, got {cluster}"
        )
    _check_launch(rows, n_env, k, mode, dtype)
    core = replace(_SPLIT, l2_hints=True, cluster=cluster, dense_min=dense_min)
    if dtype != "float32":
        core = replace(core, dtype=dtype, unroll=UNROLL_16BIT)  # (as the 1024-thread cores)
    config = replace(core, mode=mode, with_values=with_values, deterministic=deterministic)
    config = replace(config, preload=_preload(config, cluster, n_env))
    if config.smem_bytes > spec.smem_per_block:
        raise ValueError(
            f"k={k} needs more shared memory per block than {spec.name} offers "
            f"({spec.smem_per_block} bytes)"
        )
    return Route(config=config, parts=cluster, grid=rows * cluster, workspace_words=0, n_env=n_env)


def _preload(config: StreamingConfig, parts: int, n_env: int) -> int:
    """Vectors a thread of a split float32 decode or full row loads before its sample
    (``StreamingConfig.preload``): its whole chunk at the envelope, ``ceil(ceil(n_env / 4) /
    parts / threads)``, when that is at most ``PRELOAD_MAX``; else 0. Measured on the H200
    (``benchmarks/results/h200/ab_preload.log``): at b = 1, n = 262,144 (32 CTAs, two vectors
    a thread) the pass went 1.9-2.1 -> 0.8-0.9 us and the row 0.7-1.0 us sooner; at b = 8
    (16 CTAs, four a thread) the sample read slower beside the chunk's loads and the row
    finished 0.2-0.4 us sooner."""
    if parts <= 1 or config.ragged or config.block_skip or config.mode == "prefill":
        return 0
    if config.dtype != "float32":
        return 0
    nvec = -(-n_env // 4)
    chunk = -(-nvec // parts)
    need = -(-chunk // config.threads)
    return need if need <= PRELOAD_MAX else 0


def route_dynamic(route: Route, n: int, k: int, lead: int = 0) -> RowPlan:
    """The per-row half: what a row of length ``n`` decides in-kernel.

    Args:
        route: the static route of the launch.
        n: the row's valid length (clamped by the kernel to the physical width).
        k: top-K size.
        lead: window start modulo 4 (prefill rows).

    Returns:
        The row's :class:`gvr_reference.ladder.RowPlan`.
    """
    return row_plan(n, k, lead, route.ladder)


def routed_configs(
    spec: DeviceSpec,
) -> Iterator[StreamingConfig | RegisterConfig | ClusterConfig]:
    """Every distinct configuration :func:`route_static` produces for ``spec``, over the shapes
    at both sides of every routing boundary, in every call mode with and without values and
    deterministic ties, for every logits dtype, with and without block maxima."""
    s = spec.sm_count
    seen: dict = {}
    h = s // 2
    bulk = BULK_ROWS_PER_SM * s
    edges = {1, 2, h // 8, h // 8 + 1, h // 4, h // 4 + 1, h // 2, h // 2 + 1, h, h + 1, s}
    edges |= {s + 1, bulk, bulk + 1}
    # the cluster split's row counts, and its chunks of every preload length (and none)
    edges |= {CLUSTER_SPLIT_MIN_ROWS, CLUSTER_SPLIT_MAX_ROWS, CLUSTER_SPLIT_MAX_ROWS + 1}
    edges |= {CLUSTER_PAIR_MIN_ROWS - 1, CLUSTER_PAIR_MIN_ROWS}
    chunks = {c * 4096 * p for c in CLUSTER_SIZES for p in range(1, PRELOAD_MAX + 1)}
    for rows in sorted(edges | {4 * s}):
        for n_env in sorted(chunks | {1 << 20}) + [
            2048,
            2049,
            SMALL_ROW_N,
            SMALL_ROW_N + 1,
            CLUSTER_MIN_N + 1,
            8192,
            8193,
            CLUSTER_ANY_K_N,
            CLUSTER_ANY_K_N + 1,
            REGISTER_MAX_N,
            REGISTER_MAX_N + 1,
            REGISTER_WIDE_N,
            REGISTER_WIDE_N + 1,
            SPLIT_MIN_N - 1,
            SPLIT_MIN_N,
            2 * CLUSTER_ROW_N + 1,
            CLUSTER_MAX_N,
            CLUSTER_MAX_N + 1,
            CLUSTER_WIDE_N,
            CLUSTER_WIDE_N + 1,
            262144,
        ]:
            for k, mode, with_values, det, dtype, skip in itertools.product(
                sorted({512, BULK_MAX_K, CLUSTER_SPLIT_REGISTER_MIN_K + 1, CLUSTER_LOW_K, MAX_K}),
                MODES,
                (False, True),
                (False, True),
                DTYPES,
                (False, True),
            ):
                try:
                    r = route_static(
                        spec,
                        rows=rows,
                        n_env=n_env,
                        k=k,
                        mode=mode,
                        with_values=with_values,
                        deterministic=det,
                        dtype=dtype,
                        block_skip=skip,
                    )
                except ValueError:  # K too large for this part's shared memory
                    continue
                seen.setdefault(r.config, None)
    yield from seen


def max_workspace_words(spec: DeviceSpec) -> int:
    """uint32 words of split workspace the largest launch on ``spec`` can need.

    Static and ragged splits of few rows have at most ``sm_count // 2`` rows, and a ragged
    split of many rows (:data:`RAGGED_BULK_MAX_ROWS` at most) meets in at most ``sm_count *
    RAGGED_BULK_EXTRA_PER_SM`` row slots; the workspace grows with the rows or slots (and, on
    parts with little shared memory, with K), so the largest is one of those routes at the
    longest envelope and the largest K.
    """
    longest = MAX_ROW_LENGTH - 1
    words = 0
    for rows in (max(1, spec.sm_count // 2), RAGGED_BULK_MAX_ROWS):
        for k in (1, MAX_K):
            try:
                r = route_static(spec, rows=rows, n_env=longest, k=k)
            except ValueError:  # K that does not fit this part's shared memory
                continue
            words = max(words, r.workspace_words)
    return words
