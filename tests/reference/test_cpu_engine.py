"""The numba CPU engine: its building blocks, each of its paths, its buffers and layouts, and
every workload family, against the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import cpu_engine, oracle, validate, workloads
from gvr_reference._numba_core import count_key_at_least, flat_rows, key_of, threshold_form
from gvr_reference.keys import order_key
from topk_sortref import sort_topk

SPECIAL_BITS = np.array(
    [
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
        0x80800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
        0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,
    ],
    np.uint32,
)  # fmt: skip


def _bits_pool(seed: int = 0, count: int = 20000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([SPECIAL_BITS, rng.integers(0, 2**32, count, dtype=np.uint32)])


def test_numba_key_matches_order_key():
    bits = _bits_pool()
    expected = order_key(bits.view(np.float32))
    got = np.array([key_of(b) for b in bits], np.int64)
    np.testing.assert_array_equal(got, expected.astype(np.int64))


@pytest.mark.parametrize("seed", [0, 1])
def test_threshold_predicate_matches_keys(seed):
    """``count_key_at_least`` (raw-bit predicates) equals a count over order keys, for every
    kind of threshold: special values, both signs, NaN, and keys no float maps to."""
    bits = _bits_pool(seed, 5000)
    keys = order_key(bits.view(np.float32)).astype(np.int64)
    thresholds = set(keys.tolist()) | {
        0,
        1,
        0x7FFFFFFF,
        0x80000000,
        0x80000001,
        0xFF800001,
        0xFFFFFFFE,
        0xFFFFFFFF,
    }
    srow = bits.view(np.int32)
    for thr in sorted(thresholds)[:: 1 if seed == 0 else 7]:
        assert count_key_at_least(srow, bits, thr) == int((keys >= thr).sum()), hex(thr)
    high, tb, tu = threshold_form(0x80000000)
    assert not high and tu == 0x80000000


def test_flat_rows_views_without_copy():
    arena = np.zeros((3, 12), np.float32)
    view = arena[:, 1:9]
    flat, stride = flat_rows(view)
    assert stride == 12 and flat.shape == (2 * 12 + 8,) and np.shares_memory(flat, arena)
    flat, stride = flat_rows(arena[:, ::2])  # inner stride 2: copied
    assert stride == 6 and not np.shares_memory(flat, arena)
    flat, stride = flat_rows(arena[::-1])  # negative row stride: copied
    assert stride == 12 and not np.shares_memory(flat, arena)


def _crafted(kind: str) -> tuple[np.ndarray, int]:
    """Rows steering the engine down one path each (n >= 8 k and n >= 4096: the sampled
    path). n = 16421 is not a multiple of the 64-element filter block, so the tails run too."""
    rng = np.random.default_rng(11)
    n = 16421
    x = rng.standard_normal((3, n), dtype=np.float32)
    k = 512
    if kind == "sample_too_high":
        # The sample positions (i * n) // s with s = 1024 hold big values, nothing else does:
        # the threshold admits only the 1024 sampled elements, fewer than k.
        k = 2048
        x[:, (np.arange(1024) * n) // 1024] = 50.0 + rng.random(1024).astype(np.float32)
    elif kind == "overflow":
        # One tie class: the candidates overflow the capacity and the radix path takes over.
        # (k = 64 expects sparse candidates, so the overflow hits the block-wise check.)
        x[:], k = 1.0, 64
    elif kind == "overflow_dense":
        x[:] = 1.0  # the same when dense candidates were expected (branch-free scan)
    elif kind == "overflow_low":
        x[:], k = -0.0, 64  # the same at a threshold at or below zero
    elif kind == "low_threshold":
        x = -np.abs(x)  # dense candidates: the branch-free scan, low threshold form
    elif kind == "low_threshold_sparse":
        x, k = -np.abs(x), 64  # about 1% candidates: the branching scan, low form
        x[:, -5:] = -1e-4  # hits in the scan's tail after the last full block
    elif kind == "branching_scan":
        k = 200  # about 2% candidates: the branching scan without block skips
    elif kind == "sparse_skip":
        k = 8  # about 50 candidates expected, far below 1/64 of the row: blocks are skipped
    elif kind == "radix":
        k = 4000  # n < 8 k
    elif kind == "nan_threshold":
        x[:, ::3] = np.nan
    elif kind == "inf_threshold":
        x[:, ::5] = np.inf
    return x, k


PATHS = [
    "plain",
    "sample_too_high",
    "overflow",
    "overflow_dense",
    "overflow_low",
    "low_threshold",
    "low_threshold_sparse",
    "branching_scan",
    "sparse_skip",
    "radix",
    "nan_threshold",
    "inf_threshold",
]


@pytest.mark.parametrize("kind", PATHS)
@pytest.mark.parametrize("sorted_mode", [False, True])
def test_engine_paths_match_oracle(kind, sorted_mode):
    x, k = _crafted(kind)
    got, values = cpu_engine.dense(x, k, sorted=sorted_mode, return_values=True)
    want, want_values = oracle.topk_dense(x, k, sorted=sorted_mode, return_values=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(values.view(np.uint32), want_values.view(np.uint32))


def test_sort_reference_agrees_on_crafted_rows():
    x, k = _crafted("sample_too_high")
    np.testing.assert_array_equal(
        cpu_engine.dense(x[:1], k), sort_topk(x[:1], [0], [x.shape[1]], k)
    )


def test_buffers_filled_in_place():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3000), dtype=np.float32)
    out = np.full((5, 64), 99, np.int32)
    values = np.zeros((5, 64), np.float32)
    got_i, got_v = cpu_engine.dense(x, 64, out=out, values=values)
    assert got_i is out and got_v is values
    np.testing.assert_array_equal(out, oracle.topk_dense(x, 64))
    validate.assert_dense(x, 64, out, values=values)


def test_non_contiguous_buffers():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 500), dtype=np.float32)
    big_i = np.full((4, 40), -7, np.int32)
    big_v = np.zeros((4, 40), np.float32)
    out, values = big_i[:, 5:25], big_v[:, 5:25]
    cpu_engine.dense(x, 20, out=out, values=values)
    np.testing.assert_array_equal(out, oracle.topk_dense(x, 20))
    assert (big_i[:, :5] == -7).all() and (big_i[:, 25:] == -7).all()
    validate.assert_dense(x, 20, out, values=values)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x[:, ::2],  # inner stride 2
        lambda x: x[::-1],  # negative row stride
        lambda x: np.asfortranarray(x),
        lambda x: x[:, 3:],  # unaligned start
    ],
    ids=["inner-stride", "reversed", "fortran", "offset"],
)
def test_layouts(make):
    rng = np.random.default_rng(4)
    x = make(rng.standard_normal((6, 9001), dtype=np.float32))
    for k in (7, 300, 2000):
        np.testing.assert_array_equal(cpu_engine.dense(x, k), oracle.topk_dense(x, k))


def test_read_only_logits():
    x = np.random.default_rng(5).standard_normal((3, 5000), dtype=np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(cpu_engine.dense(x, 33), oracle.topk_dense(x, 33))


@pytest.mark.parametrize("rows, width, k", [(0, 10, 4), (3, 0, 4), (0, 0, 1), (2, 5, 9)])
def test_degenerate_shapes(rows, width, k):
    x = np.ones((rows, width), np.float32)
    got, values = cpu_engine.dense(x, k, return_values=True)
    want, want_values = oracle.topk_dense(x, k, return_values=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(values, want_values)
    assert got.shape == (rows, k) and got.dtype == np.int32 and values.dtype == np.float32


def test_deterministic_flag_does_not_change_answers():
    x = workloads.make_logits(6, "tie_flood", 8, 20000, 256)
    a = cpu_engine.dense(x, 256, deterministic=True)
    b = cpu_engine.dense(x, 256, deterministic=False)
    np.testing.assert_array_equal(a, b)


def test_serial_and_parallel_paths_agree():
    x = workloads.make_logits(8, "dsa_like", 64, 20000, 512)
    assert x.size > cpu_engine.SERIAL_WORK  # the whole batch takes the parallel kernel
    together = cpu_engine.dense(x, 512)
    one_by_one = np.concatenate([cpu_engine.dense(x[r : r + 1], 512) for r in range(64)])
    np.testing.assert_array_equal(together, one_by_one)


@pytest.mark.parametrize("family", workloads.family_names())
def test_families_decode(family):
    batch = workloads.make_decode_batch(
        len(family), batch=6, next_n=2, compress_ratio=4, k=128, width=5003,
        row_stride=5120, family=family, lengths="edge",
    )  # fmt: skip
    got, values = cpu_engine.decode(
        batch.logits, batch.kv_lens, batch.k, next_n=2, compress_ratio=4, return_values=True
    )
    np.testing.assert_array_equal(got, batch.reference())
    batch.check(got, values).raise_if_failed()


@pytest.mark.parametrize("family", workloads.family_names())
def test_families_prefill_sorted(family):
    batch = workloads.make_prefill_batch(
        len(family) + 1, rows=10, k=100, width=9001, row_stride=9004, family=family
    )
    got = cpu_engine.prefill(batch.logits, batch.row_starts, batch.row_ends, 100, sorted=True)
    np.testing.assert_array_equal(got, batch.reference(sorted=True))
    batch.check(got).raise_if_failed()


@pytest.mark.parametrize("family", workloads.family_names())
def test_families_dense_long(family):
    batch = workloads.make_dense_batch(len(family) + 2, rows=3, k=512, width=40000, family=family)
    got = cpu_engine.dense(batch.logits, 512)
    np.testing.assert_array_equal(got, batch.reference())


def test_warmup_runs():
    assert cpu_engine.warmup() in ("memory", "disk", "compiled")
    # the row loops are loaded in this process now
    assert cpu_engine.warmup() == "memory"


@pytest.mark.parametrize("on_disk, source", [(True, "disk"), (False, "compiled")])
def test_warmup_reports_where_the_loops_came_from(monkeypatch, on_disk, source):
    from types import SimpleNamespace

    fresh = SimpleNamespace(signatures=[])
    monkeypatch.setattr(cpu_engine, "topk_rows_at_serial", fresh)
    monkeypatch.setattr(cpu_engine, "topk_rows_at", fresh)
    monkeypatch.setattr(cpu_engine, "_kernels_on_disk", lambda: on_disk)
    monkeypatch.setattr(cpu_engine, "_announced", True)
    monkeypatch.setattr(cpu_engine, "dense", lambda *a, **kw: None)
    assert cpu_engine.warmup() == source
