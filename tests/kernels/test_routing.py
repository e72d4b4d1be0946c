"""The routing policy of gvr-kernels: pure functions of the device spec and capture-stable
shape facts; the route's shared-memory and workspace figures come from its configuration."""

from __future__ import annotations

import collections
import itertools
from dataclasses import replace

import numpy as np
import pytest
from gvr_kernels.cluster import ClusterConfig
from gvr_kernels.register import RegisterConfig
from gvr_kernels.routing import (
    _SPLIT,
    BRACKET_WIDE_K_VECS,
    BULK_MAX_K,
    BULK_ROWS_PER_SM,
    CLUSTER_ANY_K_N,
    CLUSTER_LOW_K,
    CLUSTER_MAX_N,
    CLUSTER_MIN_N,
    CLUSTER_SPLIT_DENSE_MIN,
    CLUSTER_SPLIT_PREFETCH,
    CLUSTER_SPLIT_REGISTER_MIN_K,
    CLUSTER_WIDE_N,
    HALF_WARPS_MAX_K,
    MIN_PART_ELEMS,
    PRELOAD_MAX,
    RAGGED_BULK_EXTRA_PER_SM,
    RAGGED_BULK_FEW_MIN_N,
    RAGGED_BULK_FEW_ROWS_PER_SM,
    RAGGED_BULK_MAX_ROWS,
    RAGGED_BULK_MIN_N,
    RAGGED_MIN_N,
    RAGGED_MIN_ROWS,
    REGISTER_MAX_N,
    REGISTER_WIDE_N,
    SMALL_ROW_N,
    SPLIT_LOW_AIM,
    SPLIT_LOW_AIM_MIN_K,
    SPLIT_MIN_N,
    STREAMING_DENSE_MIN,
    _cluster_core,
    _cluster_split_replaces,
    _register_core,
    _short_split_chunks,
    _split_cluster,
    _static_parts,
    cluster_split_route,
    max_workspace_words,
    route_dynamic,
    route_static,
    routed_configs,
)
from gvr_kernels.spec import B200, H200, DeviceSpec
from gvr_kernels.streaming import StreamingConfig
from gvr_kernels.streaming.config import CTL_WORDS
from gvr_reference.ladder import row_plan
from gvr_reference.ragged import UNIT, ragged_parts


def test_route_static_policy():
    s = H200.sm_count
    r = route_static(H200, rows=1, n_env=262144, k=2048, mode="full")
    assert r.parts == min(s, 262144 // MIN_PART_ELEMS) and r.config.split
    assert route_static(H200, rows=1, n_env=4096, k=512).config.threads == 512
    assert r.grid == r.parts and r.workspace_words == 4 + 2 * r.config.capacity
    assert route_static(H200, rows=1, n_env=SPLIT_MIN_N - 1, k=512).parts == 1
    # decode and prefill rows may differ in length: the ragged split where it measured faster
    assert not r.config.ragged
    for mode, rows, n_env, ragged in (
        ("decode", 32, 262144, True),
        ("prefill", 66, 131073, True),
        ("full", 32, 262144, False),
        ("decode", 31, 262144, False),
        ("decode", 64, 131072, False),
    ):
        rt = route_static(H200, rows=rows, n_env=n_env, k=512, mode=mode)
        assert rt.config.split and rt.config.ragged == ragged, (mode, rows, n_env)
    assert route_static(H200, rows=s // 2 + 1, n_env=262144, k=512).parts == 1
    assert route_static(H200, rows=s, n_env=262144, k=512).config.threads == 1024
    assert route_static(H200, rows=s + 1, n_env=262144, k=512).config.threads == 512
    for rows in (1, 2, 7, 33, 66):
        rt = route_static(H200, rows=rows, n_env=1 << 20, k=1024)
        assert rt.grid <= s and rt.grid % rows == 0
        if rt.config.ragged:  # the argument: the CTAs beyond one a row
            assert rt.parts == rt.grid - rows and rt.workspace_words == rows * (
                rt.config.workspace_words_per_row
            )


def test_ragged_split_of_many_rows():
    """More rows than SMs (up to RAGGED_BULK_MAX_ROWS) with a long envelope (up to
    RAGGED_BULK_FEW_ROWS_PER_SM rows per SM, a shorter one): the 512-thread core as a ragged
    split of ``rows + extra`` CTAs, ``extra = min(rows - 1, SMs)``, so rows of one length get
    one CTA each; a split row meets in one of ``min(rows, extra)`` slots."""
    s = H200.sm_count
    assert RAGGED_BULK_FEW_ROWS_PER_SM == 2
    for rows, n_env, mode, ragged in (
        (s + 1, RAGGED_BULK_MIN_N, "decode", True),
        (256, 262144, "prefill", True),
        (RAGGED_BULK_MAX_ROWS, 200000, "decode", True),
        (RAGGED_BULK_MAX_ROWS + 1, 262144, "decode", False),
        # up to two rows per SM from the shorter envelope
        (256, RAGGED_BULK_MIN_N - 1, "decode", True),
        (2 * s, RAGGED_BULK_FEW_MIN_N, "prefill", True),
        (2 * s + 1, RAGGED_BULK_MIN_N - 1, "decode", False),
        (256, RAGGED_BULK_FEW_MIN_N - 1, "decode", False),
        (256, 262144, "full", False),
        (s, 262144, "decode", False),
    ):
        r = route_static(H200, rows=rows, n_env=n_env, k=2048, mode=mode)
        c = r.config
        assert c.family == "streaming" and c.threads == (512 if rows > s else 1024)
        assert c.ragged == ragged and c.split == ragged, (rows, n_env, mode)
        if ragged:
            extra = min(rows - 1, RAGGED_BULK_EXTRA_PER_SM * s)
            assert (r.parts, r.grid) == (extra, rows + extra)
            assert r.workspace_words == min(rows, extra) * c.workspace_words_per_row
            # equal rows: one CTA each; the extra CTAs have no work
            even = ragged_parts(np.full(rows, n_env), r.grid, MIN_PART_ELEMS)
            assert (even == 1).all()
            # one long row among short ones takes many
            lens = np.full(rows, 1000)
            lens[7] = n_env
            units = -(-n_env // UNIT)
            share = extra * units // (units + (rows - 1) * -(-1000 // UNIT))
            want = min(1 + share, units // (MIN_PART_ELEMS // UNIT))
            assert ragged_parts(lens, r.grid, MIN_PART_ELEMS)[7] == want >= 8
        else:
            assert (r.parts, r.grid, r.workspace_words) == (1, rows, 0)
    # with the producer's block maxima a long float32 row stays on one CTA
    r = route_static(H200, rows=256, n_env=262144, k=512, block_skip=True)
    assert not r.config.split and r.config.block_skip
    assert (
        max_workspace_words(H200)
        >= route_static(H200, rows=RAGGED_BULK_MAX_ROWS, n_env=1 << 25, k=2048).workspace_words
    )
    assert route_static(H200, rows=3, n_env=99999, k=7) == route_static(
        H200, rows=3, n_env=99999, k=7
    )


def test_route_static_follows_the_device():
    small = DeviceSpec("small", "sm_90a", 40, 232448, 233472)
    assert route_static(small, rows=10, n_env=262144, k=512).parts == 4
    assert route_static(small, rows=41, n_env=262144, k=512).config.threads == 512
    tiny_smem = DeviceSpec("tiny", "sm_90a", 40, 101376, 102400)
    r = route_static(tiny_smem, rows=100, n_env=262144, k=512)
    assert r.smem_bytes <= tiny_smem.smem_per_block


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(rows=0, n_env=10, k=1), "rows"),
        (dict(rows=1, n_env=0, k=1), "n_env"),
        (dict(rows=1, n_env=1 << 26, k=1), "n_env"),
        (dict(rows=1, n_env=10, k=0), "k"),
        (dict(rows=1, n_env=10, k=2049), "k"),
        (dict(rows=1, n_env=10, k=1, mode="sideways"), "mode"),
        (dict(rows=1, n_env=10, k=1, dtype="float64"), "dtype"),
    ],
)
def test_route_static_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        route_static(H200, **kwargs)


def test_route_dynamic_is_the_ladder():
    r = route_static(H200, rows=4, n_env=262144, k=1024)
    assert route_dynamic(r, 123457, 1024, lead=2) == row_plan(123457, 1024, 2, r.ladder)


@pytest.mark.parametrize("mode", ["decode", "prefill", "full"])
@pytest.mark.parametrize("rows", [1, 3, 66, 67, 132, 133, 600])
@pytest.mark.parametrize("n_env", [100, 4096, 4097, 16384, 32767, 32768, 262144])
def test_route_figures_come_from_the_config(mode, rows, n_env):
    r = route_static(
        H200, rows=rows, n_env=n_env, k=512, mode=mode, with_values=True, deterministic=True
    )
    c = r.config
    assert isinstance(c, (StreamingConfig, RegisterConfig, ClusterConfig))
    assert r.family == c.family
    clustered = REGISTER_MAX_N < n_env <= CLUSTER_MAX_N and 4 * rows <= H200.sm_count // 2
    # small clusters (K = 512: envelopes above CLUSTER_ANY_K_N), two or four CTAs a row
    small = CLUSTER_ANY_K_N < n_env <= REGISTER_MAX_N and 2 * rows <= H200.sm_count // 2
    clustered = clustered or small
    wide = n_env <= REGISTER_WIDE_N and rows <= H200.sm_count and mode != "prefill"
    wide = wide and not r.config.deterministic
    if clustered:
        assert r.family == "cluster"
    else:
        assert r.family == ("register" if n_env <= REGISTER_MAX_N or wide else "streaming")
    assert (c.mode, c.with_values, c.deterministic) == (mode, True, True)
    assert r.smem_bytes == c.smem_bytes
    if getattr(c, "ragged", False):
        extra = r.parts
        assert r.grid == rows + extra and extra >= 1
        assert r.workspace_words == min(rows, extra) * c.workspace_words_per_row
    else:
        assert r.grid == rows * (c.cluster if clustered else r.parts)
        assert r.workspace_words == (rows * c.workspace_words_per_row if r.parts > 1 else 0)
    assert (r.parts > 1) == c.split


def test_smem_bytes_is_the_layout():
    c = StreamingConfig(threads=512, capacity=8192, sample_max=4096)
    names = [name for name, _, _ in c.shared_layout()]
    assert names == ["hist", "ctl", "sample", "stage_bits", "stage_idx"]
    ctl = -(-4 * CTL_WORDS // 16) * 16  # (each array 16-byte aligned)
    assert c.smem_bytes == 4 * 256 + ctl + 4 * 4096 + 8 * 8192


def test_routed_configs_are_distinct_and_cover_both_sides_of_each_boundary():
    cfgs = list(routed_configs(H200))
    assert len(cfgs) == len(set(cfgs))
    streaming = [c for c in cfgs if c.family == "streaming"]
    # three cores x modes x values x ties x dtypes, and the ragged split of decode and prefill
    # (of few rows on the 1024-thread core, of many on the 512-thread one); and the block-skip
    # form of those whose launches reach BLOCK_SKIP_MIN_BYTES
    skip = [c for c in streaming if c.block_skip]
    streaming = [c for c in streaming if not c.block_skip]
    # the cluster split of float32 decode launches with dense rows: 8 CTAs a row where the
    # cluster family's route it replaces runs (without values, in both tie modes:
    # ``_cluster_split_replaces``), and 2 or 8 in place of the register family's 1024 x 8 row
    # or a static workspace split (without values or ties)
    xsplit = [c for c in streaming if c.cluster]
    streaming = [c for c in streaming if not c.cluster]
    assert {(c.cluster, c.mode, c.dtype, c.split, c.ragged, c.dense_min) for c in xsplit} == {
        (cluster, "decode", "float32", True, False, CLUSTER_SPLIT_DENSE_MIN) for cluster in (2, 8)
    }
    assert {(c.with_values, c.deterministic) for c in xsplit} == {(False, False), (False, True)}
    assert all(not c.deterministic for c in xsplit if c.cluster == 2)
    # (an L2 prefetch where no preload holds the chunk)
    assert all(c.prefetch == (0 if c.preload else CLUSTER_SPLIT_PREFETCH) for c in xsplit)
    # the 1024-thread workspace and ragged splits of float32 decode launches without values
    # or ties at K above SPLIT_LOW_AIM_MIN_K aim lower, in every preload form
    low = [c for c in streaming if c.split and c.threads == 1024 and c.aim_mult == SPLIT_LOW_AIM]
    streaming = [c for c in streaming if c not in low]
    assert {(c.mode, c.dtype, c.with_values, c.deterministic) for c in low} == {
        ("decode", "float32", False, False)
    }
    assert {replace(c, aim_mult=_SPLIT.aim_mult) for c in low} <= set(streaming)
    assert {(c.ragged, c.preload) for c in low} == {(True, 0)} | {(False, p) for p in (0, 2, 3, 4)}
    # and the preloading form of the float32 decode / full split (three chunk sizes)
    pre = [c for c in streaming if c.preload]
    streaming = [c for c in streaming if not c.preload]
    assert len(streaming) == 3 * 3 * 4 * 3 + 2 * 2 * 4 * 3
    assert {replace(c, preload=0) for c in pre} <= set(streaming) and len(pre) == 3 * 2 * 4
    # (block-skip launches keep the plain ladder; their float32 decode counterparts without
    # values or ties sample dense rows)
    lean = [c.mode == "decode" and not (c.with_values or c.deterministic) for c in skip]
    assert {
        replace(c, block_skip=False, l2_hints=True, dense_min=STREAMING_DENSE_MIN if d else 0)
        for c, d in zip(skip, lean, strict=True)
    } <= set(streaming)
    assert all(not c.prefetch for c in skip) and len(skip) > 3 * 4 * 3
    split = {(c.mode, c.ragged, c.threads) for c in streaming if c.split}
    assert split == {(m, False, 1024) for m in ("decode", "prefill", "full")} | {
        (m, True, t) for m in ("decode", "prefill") for t in (512, 1024)
    }
    assert {c.dtype for c in streaming} == {"float32", "bfloat16", "float16"}
    for c in streaming:
        many = c.threads == 512 and not (c.mode == "prefill" and c.with_values and c.deterministic)
        assert c.unroll == (4 if c.dtype == "float32" or many else 2), c.name
    assert all(c.prefetch == 0 for c in streaming)  # measured neutral or worse (tune_bandwidth)
    # L2 hints on every streaming route that does not skip blocks
    assert all(c.l2_hints for c in streaming) and not any(c.l2_hints for c in skip)
    assert {c.dtype for c in cfgs if c.family == "cluster"} == {"float32", "bfloat16", "float16"}
    # 16-bit clusters: two vectors a thread, no bracket on 1024-thread CTAs (it spills there)
    for c in cfgs:
        if c.family == "cluster" and c.dtype != "float32":
            assert c.vecs == 2 and (c.bracket == (c.threads == 512)), c.name
    assert {c.dtype for c in cfgs if c.family == "register"} == {"float32", "bfloat16", "float16"}
    assert {c.threads for c in cfgs} == {256, 512, 1024}
    assert any(c.split for c in cfgs) and any(not c.split for c in cfgs)
    cluster = {(c.cluster, c.threads, c.vecs) for c in cfgs if c.family == "cluster"}
    assert cluster == {(4, 512, 4), (8, 512, 4), (4, 1024, 4), (8, 1024, 4), (16, 512, 4)} | {
        (4, 512, 2), (8, 512, 2), (4, 1024, 2), (16, 512, 2)
    } | {(4, 512, 1), (2, 512, 2), (2, 512, 4)}  # fmt: skip
    register = {
        (c.threads, c.vecs, c.resident)
        for c in cfgs
        if c.family == "register" and c.dtype == "float32"
    }
    half = {
        (c.threads, c.vecs, c.resident)
        for c in cfgs
        if c.family == "register" and c.dtype != "float32"
    }
    # 16-bit: envelopes up to 4,096 only, the float32 shapes there with half the vectors
    assert half == {(512, 1, 1)}
    assert register == {
        (512, 1, 1),
        (512, 2, 1),
        (512, 4, 1),
        (512, 4, 2),
        (1024, 4, 1),
        (512, 8, 2),
        (512, 8, 1),
        (1024, 8, 1),
        (256, 2, 4),
        (256, 4, 4),
        (256, 8, 4),
    }

    # The B200 preset keeps the portable cluster size: no 16-CTA cluster.
    portable = {c.name for c in cfgs if getattr(c, "cluster", 0) != 16}
    # (at one or two rows its eight 1024-thread cluster rows take the cluster split, where the
    # H200 runs sixteen-CTA clusters and takes it nowhere else at those envelopes: the
    # workspace split's chunks are short there, ``_short_split_chunks``)
    b200 = {c.name for c in routed_configs(B200)}
    assert portable <= b200 and all("_split_x8_" in name for name in b200 - portable)


def test_register_family_where_it_is_measured_faster():
    s = H200.sm_count
    for n_env, rows in ((100, 1), (4096, 512), (16384, s + 1), (REGISTER_WIDE_N, s)):
        r = route_static(H200, rows=rows, n_env=n_env, k=2048)
        assert r.family == "register" and r.config.max_n >= n_env and r.parts == 1
    assert route_static(H200, rows=s + 1, n_env=REGISTER_WIDE_N, k=512).family == "streaming"
    assert route_static(H200, rows=1, n_env=REGISTER_WIDE_N + 1, k=512).family == "cluster"
    # (four 512 x 4 cluster CTAs a row take those rows while they fill at most half the SMs)
    r = route_static(H200, rows=1, n_env=REGISTER_WIDE_N, k=2048)
    assert (r.family, r.config.cluster) == ("cluster", 4)
    assert route_static(H200, rows=s // 8 + 1, n_env=REGISTER_WIDE_N, k=2048).family == "register"
    kw = dict(rows=s // 8 + 1, n_env=REGISTER_WIDE_N, k=2048, with_values=True)
    assert route_static(H200, **kw).family == "register"
    kw = dict(n_env=REGISTER_WIDE_N + 1, k=512, families=("streaming", "register"))
    assert route_static(H200, rows=1, **kw).family == "streaming"
    # Two 512-thread CTAs per SM once rows outnumber the SMs, except where the values and tie
    # variants need more registers than that leaves (plain decode rows stream past 5/4 rows a
    # SM: test_half_warps_for_plain_decode_rows_up_to_16384).
    assert route_static(H200, rows=s + 1, n_env=16384, k=512).config.resident == 2
    assert route_static(H200, rows=4 * s, n_env=16384, k=512, mode="full").config.resident == 2
    assert route_static(H200, rows=4 * s, n_env=16384, k=512, with_values=True).config.resident == 1
    # Variants that spill at the widest core's register budget stream instead.
    wide = dict(rows=s // 8 + 1, n_env=REGISTER_WIDE_N, k=2048)
    assert route_static(H200, **wide, with_values=True).family == "register"
    assert route_static(H200, **wide, mode="prefill").family == "streaming"
    assert route_static(H200, **wide, deterministic=True).family == "streaming"
    det_prefill = dict(rows=8, n_env=16384, k=512, mode="prefill", deterministic=True)
    assert route_static(H200, **det_prefill).config.threads == 512


def test_half_warps_for_plain_decode_rows_up_to_16384():
    """Plain decode rows of 8,193-16,384 scores at most one row a SM: 512 x 8 at 128 registers
    with the bracket (no early loads) while K <= HALF_WARPS_MAX_K, else 1024 x 4; values and
    tie variants keep 1024 x 4; past 5/4 rows a SM plain decode rows stream."""
    s = H200.sm_count
    for rows in (34, 100, s):
        for n_env in (8193, 12288, 16384):
            cfg = route_static(H200, rows=rows, n_env=n_env, k=HALF_WARPS_MAX_K).config
            assert (cfg.threads, cfg.vecs, cfg.resident) == (512, 8, 1), (rows, n_env)
            assert cfg.bracket and cfg.bit_walk and not cfg.early_loads
            for k in (HALF_WARPS_MAX_K + 1, 2048):
                cfg = route_static(H200, rows=rows, n_env=n_env, k=k).config
                assert (cfg.threads, cfg.vecs) == (1024, 4), (rows, n_env, k)
            for kw in (dict(with_values=True), dict(deterministic=True)):
                cfg = route_static(H200, rows=rows, n_env=n_env, k=512, **kw).config
                assert (cfg.threads, cfg.vecs, cfg.bracket) == (1024, 4, False), kw
    # many rows: the register rows at two CTAs per SM up to 5/4 rows a SM, then streaming
    limit = (5 * s) // 4
    for k in (512, 1024, 2048):
        for n_env in (8193, 16384):
            assert route_static(H200, rows=limit, n_env=n_env, k=k).family == "register"
            assert route_static(H200, rows=limit + 1, n_env=n_env, k=k).family == "streaming"
            assert route_static(H200, rows=512, n_env=n_env, k=k).family == "streaming"
        # 8,192 scores keep the register family (512 x 4 at two CTAs a SM, or the bulk shapes)
        assert route_static(H200, rows=512, n_env=8192, k=k).family == "register"
    # ... and the values variant keeps its register row
    assert route_static(H200, rows=512, n_env=16384, k=512, with_values=True).family == "register"


def test_register_decode_rows_load_early_up_to_one_row_a_sm():
    s = H200.sm_count
    # 128 registers a thread (threads * resident <= 512), decode, at most one row a SM.
    for rows, n_env, k in ((1, 4096, 512), (32, 4096, 2048), (s, 2048, 512), (s, 8192, 512)):
        cfg = route_static(H200, rows=rows, n_env=n_env, k=k).config
        assert cfg.family == "register" and cfg.early_loads, (rows, n_env, k)
        assert "_early" in cfg.name
    # 64 registers a thread (1024 x 4 at n = 16,384 past K = 512; 1024 x 8), more scores a
    # CTA than EARLY_LOADS_MAX_N (512 x 8 at K <= 512), past one row a SM, or rows with no
    # length to wait for: the loads follow the window.
    for rows, n_env, mode in ((s, 16384, "decode"), (32, REGISTER_WIDE_N, "decode"),
                              (s + 1, 2048, "decode"), (4 * s, 4096, "decode"),
                              (1, 4096, "prefill"), (1, 4096, "full")):  # fmt: skip
        cfg = route_static(H200, rows=rows, n_env=n_env, k=512, mode=mode).config
        assert cfg.family == "register" and not cfg.early_loads, (rows, n_env, mode)
        assert "early" not in cfg.name
    with pytest.raises(ValueError, match="early_loads"):
        RegisterConfig(threads=1024, early_loads=True)
    with pytest.raises(ValueError, match="early_loads"):
        RegisterConfig(threads=512, mode="prefill", early_loads=True)
    assert ClusterConfig(cluster=4, threads=512, vecs=2).early_loads
    assert not ClusterConfig(cluster=4, threads=1024, vecs=2).early_loads
    assert not ClusterConfig(cluster=4, threads=512, vecs=2, mode="full").early_loads


def test_cluster_family_where_it_is_measured_faster():
    """Envelopes of 16,385-65,536 float32 scores while the clusters take at most half the
    SMs: four 512 x 4 CTAs up to 32,768 at K <= 1024, eight 512 x 4 CTAs above it at every K,
    four 1024 x 4 CTAs where eight a row would pass half the SMs; up to 131,072 eight
    1024 x 4 CTAs where their bracket path runs (``tune_cluster.log``)."""
    half = H200.sm_count // 2
    cases = [
        (1, 32768, 512, (4, 512)),
        (16, 32768, 1024, (4, 512)),
        (1, 65536, 512, (8, 512)),
        (8, 65536, 1024, (8, 512)),
        (9, 65536, 1024, (4, 1024)),
        (1, 65536, 2048, (8, 512)),
        (half // 8, CLUSTER_MAX_N, 2048, (8, 512)),
        (half // 4, CLUSTER_MAX_N, 2048, (4, 1024)),
    ]
    for rows, n_env, k, shape in cases:
        for mode in ("decode", "prefill", "full"):
            r = route_static(H200, rows=rows, n_env=n_env, k=k, mode=mode, deterministic=True)
            c = r.config
            assert r.family == "cluster", (rows, n_env, k, mode)
            assert (c.cluster, c.threads) == shape and c.max_n >= n_env
            assert r.grid == rows * c.cluster and r.parts == 1 and r.workspace_words == 0
            assert c.mode == mode and c.deterministic
    # Up to 32,768 scores four 512 x 4 CTAs serve every K (K = 2048 too: its bracket path
    # beat the 1024 x 8 register row and the cluster split) while they take half the SMs.
    for k in (1025, 2048):
        for kw in (dict(), dict(mode="prefill"), dict(with_values=True, deterministic=True)):
            r = route_static(H200, rows=half // 4, n_env=32768, k=k, **kw)
            assert (r.family, r.config.cluster, r.config.threads) == ("cluster", 4, 512)
            assert r.config.bracket and r.config.vecs == 4
            r = route_static(H200, rows=half // 4 + 1, n_env=32768, k=k, **kw)
            assert r.family != "cluster"
    assert route_static(H200, rows=half // 4 + 1, n_env=65536, k=512).family == "streaming"
    # Up to 131,072: sixteen 512 x 4 CTAs (non-portable clusters) in every mode and at every
    # K while they take at most half the SMs, then eight 1024 x 4 CTAs only where their
    # bracket path runs.
    for k in (512, 2048):
        for kw in (dict(), dict(mode="prefill"), dict(with_values=True, deterministic=True)):
            r = route_static(H200, rows=half // 16, n_env=CLUSTER_WIDE_N, k=k, **kw)
            c = r.config
            assert (r.family, c.cluster, c.threads, c.bracket) == ("cluster", 16, 512, True)
            assert r.grid == 16 * (half // 16) and c.max_n == CLUSTER_WIDE_N
    wide = route_static(H200, rows=half // 16 + 1, n_env=CLUSTER_MAX_N + 1, k=1024, mode="full")
    assert wide.family == "cluster" and wide.config.bracket and wide.config.cluster == 8
    # (float32 decode launches there take the cluster split, _cluster_split_replaces, but
    # those without values or deterministic ties take a workspace split of short chunks:
    # _short_split_chunks)
    kw = dict(rows=half // 16 + 1, n_env=CLUSTER_MAX_N + 1, k=1024)
    wide = route_static(H200, **kw, deterministic=True)
    assert wide.family == "streaming" and wide.config.cluster == 8
    wide = route_static(H200, **kw)
    assert wide.family == "streaming" and wide.config.split and not wide.config.cluster
    assert route_static(H200, rows=half // 16 + 1, n_env=CLUSTER_MAX_N + 1, k=512).family == (
        "streaming"
    )
    for kw in (dict(mode="prefill"), dict(with_values=True)):
        r = route_static(H200, rows=half // 16 + 1, n_env=131072, k=2048, **kw)
        assert r.family == "streaming"
    assert route_static(H200, rows=half // 8 + 1, n_env=131072, k=2048).family == "streaming"
    portable = replace(H200, max_cluster_size=8)
    r = route_static(portable, rows=1, n_env=CLUSTER_MAX_N + 1, k=1024)
    assert (r.config.cluster, r.config.threads) == (8, 1024)
    assert route_static(portable, rows=1, n_env=CLUSTER_MAX_N + 1, k=512).family == "streaming"
    assert route_static(H200, rows=1, n_env=131073, k=2048).family == "streaming"
    assert route_static(H200, rows=1, n_env=65536, k=512, dtype="bfloat16").family == "cluster"
    small = DeviceSpec("no clusters", "sm_90a", 132, 232448, 233472, max_cluster_size=1)
    assert route_static(small, rows=1, n_env=65536, k=512).family == "streaming"
    with pytest.raises(ValueError, match="families"):
        route_static(H200, rows=1, n_env=10, k=1, families=("bogus",))


def test_small_clusters_where_they_are_measured_faster():
    """Float32 envelopes of 8,193-16,384 at every K, and of 4,097-8,192 at K of at least
    CLUSTER_LOW_K (2048), run on four 512-thread CTAs a row while those take at most half the
    SMs, then on two, then on the register family; each thread holds the fewest vectors that
    hold the envelope (``bench_small_cluster_new.json`` against ``_old``)."""
    half = H200.sm_count // 2
    cases = [
        # (rows, n_env, k) -> (cluster, vecs), None for the register family
        ((1, 16384, 512), (4, 2)),
        ((half // 4, 16384, 2048), (4, 2)),
        ((half // 4 + 1, 16384, 1024), (2, 4)),
        ((half // 2, 16384, 512), (2, 4)),
        ((half // 2 + 1, 16384, 512), None),
        ((1, CLUSTER_ANY_K_N + 1, 512), (4, 2)),
        ((1, 12288, 512), (4, 2)),
        ((1, CLUSTER_ANY_K_N, 512), None),
        ((1, CLUSTER_ANY_K_N, 1024), None),
        ((1, CLUSTER_ANY_K_N, 1025), None),  # not measured: the register row
        ((1, CLUSTER_ANY_K_N, CLUSTER_LOW_K - 1), None),
        ((1, CLUSTER_ANY_K_N, CLUSTER_LOW_K), (4, 1)),
        ((half // 2, CLUSTER_ANY_K_N, 2048), (2, 2)),
        ((1, CLUSTER_MIN_N + 1, 2048), (4, 1)),
        ((half // 2, CLUSTER_MIN_N + 1, 2048), (2, 2)),
        ((1, CLUSTER_MIN_N, 2048), None),
    ]
    for (rows, n_env, k), want in cases:
        for kw in (dict(), dict(mode="prefill"), dict(with_values=True, deterministic=True)):
            r = route_static(H200, rows=rows, n_env=n_env, k=k, **kw)
            c = r.config
            if want is None:
                assert r.family == "register", (rows, n_env, k, kw)
                continue
            assert r.family == "cluster", (rows, n_env, k, kw)
            assert (c.cluster, c.threads, c.vecs, c.bracket) == (*want[:1], 512, want[1], True)
            assert c.max_n >= n_env > c.max_n // 2
            assert r.grid == rows * c.cluster and r.parts == 1 and r.workspace_words == 0
    # 16-bit logits keep their route there (not measured on clusters).
    for dtype in ("bfloat16", "float16"):
        assert route_static(H200, rows=1, n_env=16384, k=512, dtype=dtype).family != "cluster"
    # A part without clusters keeps the register family.
    small = DeviceSpec("no clusters", "sm_90a", 132, 232448, 233472, max_cluster_size=1)
    assert route_static(small, rows=1, n_env=16384, k=512).family == "register"


def test_register_bracket_at_any_k_with_four_vectors():
    """Float32 register rows of ``BRACKET_WIDE_K_VECS`` vectors a thread in 512- or 1024-thread
    CTAs take the bracket path (with the bit walk) at K above a quarter of the envelope too;
    fewer vectors keep the radix selection over the registers there, as do 16-bit rows, and
    at a quarter or less every shape of at most four vectors takes the bracket."""
    s = H200.sm_count
    for rows in (64, s, s + 1, 2 * s, 4 * s):
        for n_env in (4097, 6144, 8191):
            c = route_static(H200, rows=rows, n_env=n_env, k=2048).config
            assert (c.family, c.threads, c.vecs) == ("register", 512, BRACKET_WIDE_K_VECS)
            assert c.bracket and c.bit_walk and 4 * 2048 > n_env, (rows, n_env, c.name)
            # the modes its code holds at two CTAs per SM: decode rows without values
            for kw in (dict(with_values=True), dict(mode="prefill")):
                other = route_static(H200, rows=rows, n_env=n_env, k=2048, **kw).config
                if other.family == "register" and other.vecs == 4:
                    assert other.bracket == (other.resident == 1), (rows, kw, other.name)
        # two vectors (4,096 scores) and one (2,048): the radix selection above a quarter
        for n_env, k in ((4096, 2048), (2048, 1024), (1500, 512)):
            c = route_static(H200, rows=rows, n_env=n_env, k=k).config
            assert c.family == "register" and c.vecs < BRACKET_WIDE_K_VECS, c.name
            assert not c.bracket and not c.bit_walk, (rows, n_env, k, c.name)
            assert route_static(H200, rows=rows, n_env=n_env, k=k // 2).config.bracket
    # 16-bit register rows (envelopes up to SMALL_ROW_N) keep the sampled path above a quarter
    for dtype in ("bfloat16", "float16"):
        c = route_static(H200, rows=s, n_env=SMALL_ROW_N, k=2048, dtype=dtype).config
        assert c.family == "register" and not c.bracket, c.name


def test_bulk_register_shapes_past_two_ctas_per_sm():
    """Past two 512-thread CTAs per SM (K up to BULK_MAX_K, float32): four 256-thread CTAs
    per SM holding the row, the staging cut to what K needs; the variants that spill at 64
    registers with eight vectors a thread keep the 512-thread shape."""
    s = H200.sm_count
    bulk = BULK_ROWS_PER_SM * s + 1
    for n_env, vecs, cap in ((2048, 2, 2048), (4096, 4, 2048), (8192, 8, 4096)):
        for k in (512, BULK_MAX_K):
            c = route_static(H200, rows=bulk, n_env=n_env, k=k).config
            assert (c.family, c.threads, c.vecs, c.resident, c.capacity) == (
                "register", 256, vecs, 4, cap
            ), (n_env, k)  # fmt: skip
            assert c.max_n >= n_env and c.capacity >= c.max_k
            assert c.bracket == (vecs <= 4 and 4 * k <= n_env)
            assert c.smem_bytes * c.resident <= H200.smem_per_sm
            # within two CTAs per SM, at larger K, or 16-bit: the 512-thread shapes
            for kw in (
                dict(rows=bulk - 1, k=k),
                dict(rows=bulk, k=BULK_MAX_K + 1),
                dict(rows=bulk, k=k, dtype="bfloat16"),
            ):
                other = route_static(H200, n_env=n_env, **kw).config
                if "dtype" in kw and n_env > SMALL_ROW_N:  # 16-bit register rows stop there
                    assert other.family == "streaming", kw
                    continue
                assert other.family == "register" and other.threads == 512, kw
                assert other.capacity == 8192 and other.resident <= 2, kw
    # eight vectors a thread at 64 registers: plain decode and full rows only
    for kw in (dict(with_values=True), dict(mode="prefill"), dict(deterministic=True)):
        c = route_static(H200, rows=bulk, n_env=8192, k=512, **kw).config
        assert (c.threads, c.vecs) == (512, 4), kw
    assert route_static(H200, rows=bulk, n_env=8192, k=512, mode="full").config.threads == 256
    # four vectors a thread: every variant but deterministic prefill windows
    c = route_static(H200, rows=bulk, n_env=4096, k=512, mode="prefill", deterministic=True)
    assert c.config.threads == 512


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_logits_route_like_float32(dtype):
    """16-bit launches take the float32 route's family and CTA shape, with 16-bit keys and
    vectors of 8 scores: the register-resident family with half the vectors (the same
    register slots), the cluster family with two vectors a thread, the streaming cores with
    the same split and grid."""
    s = H200.sm_count
    shapes = (
        (1, 100), (1, 4096), (512, 4096), (4 * s, 16384), (1, 16384), (8, 32768), (8, 65536),
        (1, 262144), (512, 1 << 18),
    )  # fmt: skip
    seen = set()
    for rows, n_env in shapes:
        for mode, values in (("decode", False), ("prefill", True), ("full", False)):
            a = route_static(H200, rows=rows, n_env=n_env, k=512, dtype=dtype, mode=mode,
                             with_values=values)  # fmt: skip
            b = route_static(H200, rows=rows, n_env=n_env, k=512, mode=mode, with_values=values)
            assert a.config.dtype == dtype and a.config.key_format.vec == 8
            seen.add(a.family)
            if b.family == "register" and n_env > SMALL_ROW_N:
                # longer 16-bit rows measured as fast or faster on the streaming cores
                assert a.family == "streaming" and a.config.ladder.vec == 8
            elif b.family == "register":
                assert a.family == "register"
                # the bulk shapes are float32 only: 16-bit rows keep the shape of rows that
                # fit two CTAs per SM
                b = route_static(H200, rows=min(rows, BULK_ROWS_PER_SM * s), n_env=n_env, k=512,
                                 mode=mode, with_values=values)  # fmt: skip
                assert (a.config.threads, a.config.resident) == (
                    b.config.threads,
                    b.config.resident,
                )
                assert a.config.vecs == max(1, b.config.vecs // 2)
                assert a.config.max_n >= b.config.max_n
                # no bracket where the float32 core takes it only for being lean at 64
                # registers (the 16-bit bracket code spills there)
                assert a.config.bracket <= b.config.bracket
            elif b.family == "cluster" and a.family == "cluster":
                assert (a.config.cluster, a.config.threads) == (b.config.cluster, b.config.threads)
                assert (a.config.vecs, a.config.max_n) == (2, b.config.max_n)
                assert a.config.bracket == (a.config.threads == 512)
            elif b.family == "cluster":
                # no 16-bit cluster where its code spills, nor on the small float32 clusters
                # of 8,193-16,384 scores (not measured for 16-bit rows): the register family
                # where its wide shape holds the row, else streaming
                assert a.family in ("register", "streaming")
                assert a.family == "streaming" or a.config.max_n >= n_env
            else:
                assert a.family == "streaming" and a.config.ladder.vec == 8
                if b.family == "streaming" and not b.config.cluster:
                    # (the cluster split serves float32 decode launches only)
                    assert (a.parts, a.grid, a.config.threads) == (
                        b.parts,
                        b.grid,
                        b.config.threads,
                    )
                    assert a.workspace_words == b.workspace_words
    assert seen == {"register", "cluster", "streaming"}


def test_max_workspace_words_covers_every_split_route():
    words = max_workspace_words(H200)
    for rows in (1, 2, 33, H200.sm_count // 2, H200.sm_count + 1, 300, RAGGED_BULK_MAX_ROWS):
        for k in (1, 512, 2048):
            assert route_static(H200, rows=rows, n_env=1 << 22, k=k).workspace_words <= words
    # one SM: no split of few rows; a ragged split of many rows meets in one slot
    one = DeviceSpec("one SM", "sm_90a", 1, 232448, 233472)
    assert max_workspace_words(one) == StreamingConfig(split=True).workspace_words_per_row


def test_block_skip_routes_only_at_the_working_set_gate():
    for rows, n_env, dtype in ((512, 65536, "float32"), (64, 131072, "float32"),
                               (32, 262144, "float32"), (1024, 32768, "float32")):  # fmt: skip
        r = route_static(H200, rows=rows, n_env=n_env, k=2048, dtype=dtype, block_skip=True)
        plain = route_static(H200, rows=rows, n_env=n_env, k=2048, dtype=dtype)
        assert r.config.block_skip and not r.config.l2_hints and plain.config.l2_hints
        if plain.config.cluster:
            # the cluster split (no block skip) gives way to the workspace split it replaces
            parts = min(H200.sm_count // rows, -(-n_env // MIN_PART_ELEMS))
            assert r.config.split and not r.config.cluster and r.parts == parts
            continue
        if plain.config.ragged and rows > H200.sm_count:
            # the ragged split of many rows keeps one CTA a row when the maxima come
            plain = replace(plain, config=replace(plain.config, split=False, ragged=False))
            plain = replace(plain, parts=1, grid=rows, workspace_words=0)
        # (the maxima keep the plain ladder, no dense rows, and the split's aim of three K)
        want = replace(plain.config, block_skip=True, l2_hints=False, dense_min=0)
        if want.split and want.threads == 1024:
            want = replace(want, aim_mult=_SPLIT.aim_mult)
        assert r.config == want
        assert (r.parts, r.grid, r.workspace_words) == (
            plain.parts, plain.grid, plain.workspace_words,
        )  # fmt: skip
        extra = 4 * (264 + r.config.sample_max // 16)  # the live-block mask, the run maxima
        assert r.config.smem_bytes == plain.config.smem_bytes + extra
    # below the gate, 16-bit, or CTAs whose chunks exceed the live-block mask
    for rows, n_env, dtype in ((128, 65536, "float32"), (511, 65536, "float32"),
                               (1, 262144, "float32"), (512, 262144, "bfloat16"),
                               (31, 262144, "float32"), (63, 131072, "float32"),
                               (256, 524288, "float32"), (1, 40_000_000, "float32")):  # fmt: skip
        r = route_static(H200, rows=rows, n_env=n_env, k=512, dtype=dtype, block_skip=True)
        assert r == route_static(H200, rows=rows, n_env=n_env, k=512, dtype=dtype)


def test_block_skip_routes_fit_small_parts():
    small = DeviceSpec("small", "sm_90a", 40, 101376, 101376 * 2, 8, 40 << 20)
    for rows, n_env in ((512, 262144), (64, 262144), (1024, 65536)):
        r = route_static(small, rows=rows, n_env=n_env, k=512, block_skip=True)
        assert r.config.block_skip and r.smem_bytes <= small.smem_per_block, r.config.name


def test_block_skip_config_rules():
    with pytest.raises(ValueError, match="block_skip needs prefetch=0"):
        StreamingConfig(block_skip=True, prefetch=2)
    with pytest.raises(ValueError, match="l2_hints needs block_skip=False"):
        StreamingConfig(block_skip=True, l2_hints=True)
    assert StreamingConfig(l2_hints=True).name.endswith("_l2h")
    c = StreamingConfig(threads=512, capacity=8192, block_skip=True)
    assert c.name.endswith("_skip")
    assert [n for n, _, _ in c.shared_layout()][-2:] == ["skip", "runmax"]


def test_split_rows_preload_their_chunk_where_it_fits():
    """A split float32 decode or full row whose chunk at the envelope is at most PRELOAD_MAX
    vectors a thread loads it before the sample; longer chunks, ragged and block-skip splits,
    prefill windows and 16-bit rows do not."""
    for rows, n_env, want in ((1, 262144, 2), (2, 200003, 2), (9, 131072, 3), (8, 262144, 4)):
        r = route_static(H200, rows=rows, n_env=n_env, k=1024, mode="full")
        chunk = -(-((n_env + 3) // 4) // r.parts)
        assert r.config.preload == want == -(-chunk // r.config.threads), (rows, n_env)
        assert want <= PRELOAD_MAX and r.config.name.endswith(f"_pl{want}")
        # decode rows there take the same split, or (3-12 rows at K = 2048 whose split
        # chunks are long) the cluster split of eight: its chunks, preloaded where they fit
        for k in (1024, 2048):
            r = route_static(H200, rows=rows, n_env=n_env, k=k)
            vectors = -(-((n_env + 3) // 4) // r.parts)
            need = -(-vectors // r.config.threads)
            assert r.config.preload == (need if need <= PRELOAD_MAX else 0)
            long = rows > 2 and k == 2048 and not _short_split_chunks(H200, rows, n_env)
            assert r.config.cluster == (8 if long else 0), (rows, n_env, k)
            assert long == ((rows, n_env, k) == (8, 262144, 2048))
    assert route_static(H200, rows=16, n_env=262144, k=512).config.preload == 0  # 8 a thread
    assert route_static(H200, rows=33, n_env=262144, k=512).config.ragged
    assert route_static(H200, rows=33, n_env=262144, k=512).config.preload == 0
    assert route_static(H200, rows=1, n_env=262144, k=512, mode="prefill").config.preload == 0
    bf16 = route_static(H200, rows=1, n_env=262144, k=512, dtype="bfloat16")
    assert bf16.parts > 1 and bf16.config.preload == 0
    # (a block-skip launch is at least 32 MiB: its split chunks are far longer; one vector a
    # thread, the cluster split of eight over 32,768 scores, is routed only on devices of
    # fewer than 96 SMs)
    assert {c.preload for c in routed_configs(H200) if getattr(c, "preload", 0)} == {2, 3, 4}


def test_preload_config_rules():
    with pytest.raises(ValueError, match="preload needs split=True"):
        StreamingConfig(preload=2)
    with pytest.raises(ValueError, match="preload needs split=True"):
        StreamingConfig(split=True, ragged=True, preload=2)
    with pytest.raises(ValueError, match="preload needs split=True"):
        StreamingConfig(split=True, block_skip=True, preload=2)
    with pytest.raises(ValueError, match="preload needs a decode or full launch"):
        StreamingConfig(split=True, mode="prefill", preload=2)
    with pytest.raises(ValueError, match=r"preload must be in \[0, 4\], got 5"):
        StreamingConfig(split=True, preload=5)
    with pytest.raises(TypeError, match="preload must be an int"):
        StreamingConfig(split=True, preload=True)


def _offsets(layout, align: int) -> dict[str, int]:
    """Byte offset of each array of a shared-memory layout (``gvr_kernels.family.layout_bytes``'s
    allocation: in order, each aligned to ``align``)."""
    at, out = 0, {}
    for name, _, count in layout:
        at = -(-at // align) * align
        out[name] = at
        at += 4 * count
    return out


def test_bracket_scratch_words_precede_the_histogram():
    """``device.bracket.count_bracket`` counts the scores below the bracket in the 32 words
    just before the histogram it counts into: ``wsum`` must end where ``hist`` (register
    family) or ``bhist`` (cluster family, bracket configurations) begins."""
    from gvr_kernels.cluster.config import SMEM_ALIGN as CLUSTER_ALIGN
    from gvr_kernels.register.config import SMEM_ALIGN as REGISTER_ALIGN
    from gvr_kernels.registry import routable_configs

    seen = set()
    for cfg in routable_configs(H200):
        if isinstance(cfg, RegisterConfig):
            hist, align = "hist", REGISTER_ALIGN
        elif isinstance(cfg, ClusterConfig) and cfg.bracket:
            hist, align = "bhist", CLUSTER_ALIGN
        else:
            continue
        layout = cfg.shared_layout()
        sizes = {name: count for name, _, count in layout}
        off = _offsets(layout, align)
        assert sizes["wsum"] == 32, cfg.name
        assert off[hist] - off["wsum"] == 4 * 32, cfg.name
        seen.add(type(cfg))
    assert seen == {RegisterConfig, ClusterConfig}


def test_cluster_split_configurations_and_routes():
    """A cluster split (``StreamingConfig.cluster``) is a static split whose row is one
    thread-block cluster: no workspace, the split core's staging and ladder (so the CPU model
    of a split of the same capacity predicts its paths), the grid ``rows * cluster``, and
    ``dense_min`` as asked."""
    from gvr_kernels.registry import family_of
    from gvr_kernels.streaming.config import CLUSTER_SIZES, HIST_BINS

    for bad in (dict(cluster=4), dict(cluster=4, split=True, ragged=True)):
        with pytest.raises(ValueError, match="cluster"):
            StreamingConfig(**bad)
    with pytest.raises(ValueError, match="cluster"):
        StreamingConfig(split=True, cluster=3)
    with pytest.raises(TypeError, match="cluster"):
        StreamingConfig(split=True, cluster=True)
    with pytest.raises(ValueError, match="cluster"):
        StreamingConfig(split=True, cluster=2, block_skip=True)
    split = route_static(H200, rows=8, n_env=262144, k=2048, mode="full").config
    assert split.split and not split.cluster and split.mode == "full"
    for cluster in CLUSTER_SIZES:
        r = cluster_split_route(H200, rows=8, n_env=131072, k=2048, cluster=cluster)
        c = r.config
        assert (r.parts, r.grid, r.workspace_words) == (cluster, 8 * cluster, 0)
        assert c.cluster == cluster and c.split and not c.ragged and f"_x{cluster}_" in c.name
        assert c.dense_min == 0
        assert c.workspace_words_per_row == 0
        assert c.ladder == split.ladder and c.max_k == 2048
        # the split core's arrays, the cluster's histogram and its meeting words
        assert [a for a in c.shared_layout() if a[0] not in ("mhist", "ctl")] == [
            a for a in split.shared_layout() if a[0] != "ctl"
        ]
        assert ("mhist", "i32", HIST_BINS) in c.shared_layout()
        assert split.smem_bytes < c.smem_bytes <= H200.smem_per_block
        assert family_of(c).can_implement(c, H200)
        need = 131072 // 4 // cluster // 1024  # vectors a thread at the envelope
        assert c.preload == (need if need <= PRELOAD_MAX else 0)
    small = DeviceSpec("eight", "sm_90a", 132, 232448, 233472, 8, 50 * 1024 * 1024)
    assert not family_of(replace(c, cluster=16)).can_implement(replace(c, cluster=16), small)
    with pytest.raises(ValueError, match="cluster"):
        cluster_split_route(small, rows=1, n_env=262144, k=512, cluster=16)
    with pytest.raises(ValueError, match="k must be"):
        cluster_split_route(H200, rows=1, n_env=262144, k=4096, cluster=4)
    dense = cluster_split_route(H200, rows=8, n_env=131072, k=2048, cluster=8, dense_min=2)
    assert dense.config == replace(c, cluster=8, dense_min=2, preload=dense.config.preload)
    assert "_d2_" in dense.config.name
    half = cluster_split_route(H200, rows=2, n_env=65536, k=512, cluster=4, dtype="bfloat16")
    assert half.config.dtype == "bfloat16" and half.config.preload == 0
    # chosen by the router only for float32 decode launches
    for cfg in routed_configs(H200):
        if cfg.family == "streaming" and cfg.cluster:
            assert cfg.mode == "decode" and cfg.dtype == "float32" and not cfg.block_skip


@pytest.mark.parametrize("spec", [H200, B200], ids=["h200", "b200"])
def test_cluster_split_where_it_is_measured_faster(spec):
    """``route_static`` takes the cluster split, with ``CLUSTER_SPLIT_DENSE_MIN``, for float32
    decode launches only: eight CTAs where the cluster family would run eight 1024-thread
    CTAs a row (``_cluster_split_replaces``, either tie mode); eight in place of the register
    family's 1024 x 8 row at K above ``CLUSTER_SPLIT_REGISTER_MIN_K`` for at most 12 rows
    (``_cluster_split_replaces_register``); and in place of a static workspace split eight
    for at most 12 rows at K above ``CLUSTER_SPLIT_MIN_K``, two from 32 rows
    (``_split_cluster``); the last two without values or ties. Every other launch keeps its
    route."""
    s = spec.sm_count
    seen = collections.Counter()
    for rows, n_env, k, mode, values, det, dtype in itertools.product(
        (1, 2, 3, 8, 12, 13, 31, 32, 64, 66, 67),
        (16385, 32768, 65536, 65537, 131072, 131073, 262144),
        (512, 1025, 2048),
        ("decode", "prefill", "full"),
        (False, True),
        (False, True),
        ("float32", "bfloat16"),
    ):
        kw = dict(rows=rows, n_env=n_env, k=k, mode=mode, with_values=values, deterministic=det)
        r = route_static(spec, dtype=dtype, **kw)
        lean = mode == "decode" and dtype == "float32" and not (values or det)
        clu = _cluster_core(spec, rows, n_env, k, mode, values, dtype, det)
        reg = _register_core(spec, rows, n_env, k, mode, values, det, dtype)
        short = lean and rows >= 3 and _short_split_chunks(spec, rows, n_env)
        if clu is not None and _cluster_split_replaces(clu, mode) and short:
            # the workspace split of short chunks in place of the cluster core
            assert r.family == "streaming" and r.config.split and not r.config.cluster, kw
            assert r.parts == _static_parts(spec, rows, n_env) > 1, kw
            seen["short"] += 1
            continue
        if clu is not None and _cluster_split_replaces(clu, mode):
            want, why = 8, "cluster"
        elif clu is not None:
            want, why = 0, None
        elif reg is not None:
            fits = lean and k > CLUSTER_SPLIT_REGISTER_MIN_K and rows <= 12
            want = 8 if fits and (reg.threads, reg.vecs) == (1024, 8) else 0
            why = "register"
        else:
            parts = min(s // rows, -(-n_env // MIN_PART_ELEMS))
            static = rows <= s // 2 and n_env >= SPLIT_MIN_N and parts > 1
            ragged = rows >= RAGGED_MIN_ROWS and n_env >= RAGGED_MIN_N
            want = (
                _split_cluster(spec, rows, parts, k, n_env) if lean and static and not ragged else 0
            )
            why = "split"
        if want:
            seen[why] += 1
            xs = cluster_split_route(
                spec, cluster=want, dtype=dtype, dense_min=CLUSTER_SPLIT_DENSE_MIN, **kw
            )
            # (the L2 prefetch where no preload holds the chunk)
            depth = 0 if xs.config.preload else CLUSTER_SPLIT_PREFETCH
            assert r == replace(xs, config=replace(xs.config, prefetch=depth)), kw
            assert mode == "decode" and dtype == "float32" and not values
            assert r.grid == rows * want <= s and want <= spec.max_cluster_size
        else:
            assert not getattr(r.config, "cluster", 0) or r.family == "cluster", kw
            assert r.family == ("cluster" if clu is not None else r.family)
    # (the register row's replacement is reached only on devices of fewer than 96 SMs,
    # where four 512 x 4 CTAs a row pass half the SMs before 13 rows)
    assert set(seen) == {"cluster", "split", "short"}, seen
    # the measured cells (``tune_variants.log``, ``bench_cluster_routes.json``), and their
    # neighbours
    for rows, n_env, k, cluster in (
        (1, 262144, 2048, 0),  # (sixteen CTAs a row: slower through the API on the H100)
        (2, 262144, 1024, 0),
        (3, 262144, 1024, 0),  # (K = 1024: the workspace split, tune_meet.log)
        (4, 262144, 2048, 0),  # (32 CTAs a row, 8,192 scores each: the workspace split)
        (6, 262144, 2048, 0),  # (22 CTAs a row, 11,916 scores each)
        (7, 262144, 2048, 8),  # (18 CTAs a row would read 14,564 each)
        (8, 262144, 512, 0),  # (K = 512: slower)
        (8, 262144, 1024, 0),
        (8, 262144, 2048, 8),
        (12, 262144, 2048, 8),
        (8, 131072, 2048, 0),  # (16 CTAs a row, 8,192 scores each)
        (12, 131072, 1024, 0),
        (13, 131072, 1024, 0),
        (31, 131072, 1024, 0),
        (32, 65536, 2048, 2),
        (32, 65536, 1024, 2),
        (32, 131072, 512, 0),  # (the pair from K = 1025)
        (64, 65536, 512, 0),
        (64, 65536, 2048, 2),
        (32, 262144, 512, 0),  # the ragged split
        (1, 32768, 2048, 0),  # the cluster family at every K
        (12, 32768, 2048, 0),
        (1, 32768, 1024, 0),
    ):
        r = route_static(spec, rows=rows, n_env=n_env, k=k)
        split = r.config.cluster if r.family == "streaming" else 0
        assert split == cluster, (rows, n_env, k)
        for kw in (dict(mode="full"), dict(with_values=True), dict(dtype="bfloat16")):
            other = route_static(spec, rows=rows, n_env=n_env, k=k, **kw).config
            assert other.family == "cluster" or not getattr(other, "cluster", 0), kw
    if spec is H200:
        # the cluster core's eight 1024-thread CTAs a row give way to the workspace split of
        # 16 CTAs a row (8,192 scores each), though mode="full" keeps the cluster family
        short = route_static(H200, rows=8, n_env=131072, k=1024)
        assert short.family == "streaming" and short.parts == 16 and not short.config.cluster
        assert route_static(H200, rows=4, n_env=131072, k=1024).family == "cluster"  # x16
        full = route_static(H200, rows=8, n_env=131072, k=1024, mode="full")
        assert full.family == "cluster" and full.config.cluster == 8
    # (these launches are far below the block-skip sizes: the maxima change nothing)
    kw = dict(rows=8, n_env=131072, k=1024)
    assert route_static(spec, **kw, block_skip=True) == route_static(spec, **kw)


def test_streaming_routes_of_lean_decode_launches_sample_dense_rows():
    """Float32 decode launches without values or deterministic ties sample the rows their aim
    would leave unsampled past three K on every streaming route but the cluster splits (which
    take their own ``dense_min``); other launches, and launches reading block maxima, keep the
    plain ladder."""
    seen = set()
    for rows, n_env in (
        (1, 262144),
        (8, 262144),
        (64, 262144),
        (128, 65536),
        (256, 65536),
        (512, 65536),
        (256, 262144),
    ):
        for k in (512, 2048):
            for mode, values, det, dtype in (
                ("decode", False, False, "float32"),
                ("decode", True, False, "float32"),
                ("decode", False, True, "float32"),
                ("prefill", False, False, "float32"),
                ("decode", False, False, "bfloat16"),
            ):
                r = route_static(
                    H200, rows=rows, n_env=n_env, k=k, mode=mode, with_values=values,
                    deterministic=det, dtype=dtype,
                )  # fmt: skip
                cfg = r.config
                if cfg.family != "streaming" or cfg.cluster:
                    continue
                lean = mode == "decode" and dtype == "float32" and not (values or det)
                assert cfg.dense_min == (STREAMING_DENSE_MIN if lean else 0)
                seen.add((cfg.threads, cfg.split, cfg.ragged, lean))
                skip = route_static(H200, rows=rows, n_env=n_env, k=k, block_skip=True).config
                assert not skip.block_skip or skip.dense_min == 0
    # the one-CTA cores, the workspace split and the ragged splits, lean and not
    assert {(t, s, g) for t, s, g, lean in seen if lean} == {
        (1024, True, False),
        (1024, True, True),
        (1024, False, False),
        (512, False, False),
        (512, True, True),
    }


def test_splits_of_lean_decode_launches_aim_lower_at_large_k():
    """The workspace and ragged splits of float32 decode launches without values or ties aim
    their first rung at ``SPLIT_LOW_AIM`` K above ``SPLIT_LOW_AIM_MIN_K``, three K up to it;
    other launches, the cluster splits and the block-skip splits keep three K."""
    for rows, n_env, parts_ok in ((1, 262144, 32), (8, 131072, 16), (32, 262144, None)):
        for k in (SPLIT_LOW_AIM_MIN_K, SPLIT_LOW_AIM_MIN_K + 1, 2048):
            r = route_static(H200, rows=rows, n_env=n_env, k=k)
            assert r.config.split and not r.config.cluster
            assert r.config.ragged == (rows == 32)
            want = SPLIT_LOW_AIM if k > SPLIT_LOW_AIM_MIN_K else _SPLIT.aim_mult
            assert r.config.aim_mult == want, (rows, n_env, k)
            assert parts_ok is None or r.parts == parts_ok
            for kw in (dict(with_values=True), dict(deterministic=True), dict(mode="full")):
                other = route_static(H200, rows=rows, n_env=n_env, k=k, **kw)
                if other.family == "streaming":  # (full rows of 8 x 131,072: the cluster family)
                    assert other.config.split and other.config.aim_mult == _SPLIT.aim_mult, kw
            bf16 = route_static(H200, rows=rows, n_env=n_env, k=k, dtype="bfloat16")
            assert bf16.config.aim_mult == _SPLIT.aim_mult
    # the cluster split of eight keeps three K
    x8 = route_static(H200, rows=8, n_env=262144, k=2048).config
    assert x8.cluster == 8 and x8.aim_mult == _SPLIT.aim_mult
    # a launch that reads block maxima keeps it too
    skip = route_static(H200, rows=1, n_env=262144 * 3, k=2048, block_skip=True).config
    assert not skip.block_skip or skip.aim_mult == _SPLIT.aim_mult
