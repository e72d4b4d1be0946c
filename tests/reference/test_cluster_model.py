"""The cluster-register family's CPU model: the cluster-wide sample, every path, and the
invariant that makes the gathered survivors enough (they hold the top-K whenever
``count >= k``)."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference.cluster_model import ClusterParams, sample_positions, simulate_row
from gvr_reference.keys import order_key
from gvr_reference.model import Path
from gvr_reference.oracle import topk_windows
from gvr_reference.register_model import register_plan
from gvr_reference.windows import RowWindows
from gvr_reference.workloads import FAMILIES, make_decode_batch
from hypothesis import given, settings
from hypothesis import strategies as st

SMALL = ClusterParams(cluster=4, threads=64, vecs=2, capacity=1024)


@settings(max_examples=200, deadline=None)
@given(
    cluster=st.sampled_from([2, 4, 8]),
    threads=st.sampled_from([32, 64, 128]),
    vecs=st.integers(1, 4),
    lead=st.integers(0, 3),
    data=st.data(),
)
def test_sample_is_distinct_in_window_and_spans_every_cta(cluster, threads, vecs, lead, data):
    p = ClusterParams(cluster, threads, vecs)
    n = data.draw(st.integers(1, p.max_n - lead))
    pos = sample_positions(n, lead, p)
    assert np.unique(pos).size == pos.size
    assert pos.size == 0 or (pos.min() >= 0 and pos.max() < n)
    assert pos.size <= p.sample_slots
    if (lead + n) >> 2 == cluster * p.cta_vecs:
        # A full cluster: every thread of every CTA holds a valid slot (the window start
        # may drop the first vector's lanes before it).
        assert pos.size >= p.sample_slots - 1
        chunk = 4 * p.cta_vecs
        owners = np.unique((pos + lead) // chunk)
        assert owners.tolist() == list(range(cluster))


def _row(kind, g, p, k):
    n = p.max_n
    x = g.standard_normal(n).astype(np.float32)
    pos = sample_positions(n, 0, p)
    j1 = register_plan(n, k, int(pos.size), p.aim_mult).j1
    if kind == "above":  # the top sample ranks are huge: the rung is above the K-th key
        x[pos[:j1]] = 1000.0 + np.arange(j1, dtype=np.float32)
    elif kind == "unseen":  # more keys above the rung than the staging, off the sample
        off = np.setdiff1d(np.arange(n), pos)[: p.capacity + 100]
        x[off] = 50.0 + np.arange(off.size, dtype=np.float32) / 64
    elif kind == "crowd":
        x[g.random(n) < 0.3] = 2.5
    elif kind == "crowd_over":
        x[g.random(n) < 0.3] = 2.5
        free = np.setdiff1d(np.flatnonzero(x != 2.5), pos)[: p.capacity + 100]
        x[free] = 9.0 + np.arange(free.size, dtype=np.float32) / 64
    elif kind == "skew":  # one CTA's chunk holds the whole top
        x[: n // p.cluster] += 4.0
    return x


@pytest.mark.parametrize(
    "kind, path",
    [
        ("gaussian", Path.FIRST),
        ("skew", Path.FIRST),
        ("above", Path.RESCUE_UNDERESTIMATE),
        ("unseen", Path.RESCUE_OVERFLOW),
        ("crowd", Path.TIE),
        ("crowd_over", Path.RESCUE_OVERFLOW),
    ],
)
def test_forced_paths(kind, path):
    g = np.random.default_rng(7)
    k = 64
    x = _row(kind, g, SMALL, k)
    t = simulate_row(x, k, SMALL)
    assert t.path == path, (kind, t)
    assert t.sample_size == SMALL.sample_slots


def test_short_whole_and_unsampled_rows():
    k = 64
    x = np.random.default_rng(1).standard_normal(SMALL.max_n + 8).astype(np.float32)
    assert simulate_row(x[:k], k, SMALL).path == Path.SHORT
    assert simulate_row(x[: SMALL.max_n + 4], k, SMALL).path == Path.WHOLE_ROW
    assert simulate_row(x[:3], 2, SMALL, lead=0).path == Path.WHOLE_ROW  # no whole vector
    t = simulate_row(x[: 4 * k], k, SMALL)
    assert t.path == Path.UNSAMPLED and t.count1 == 4 * k
    tiny = ClusterParams(cluster=2, threads=32, vecs=4, aim_mult=4, capacity=32)
    assert simulate_row(x[: 4 * 16], 16, tiny).path == Path.RESCUE_OVERFLOW  # n > capacity


@pytest.mark.parametrize("family", FAMILIES)
def test_gathered_survivors_hold_the_answer(family):
    """On every value family: the path follows from the counts, and on the staging paths
    (``FIRST``, ``UNSAMPLED``) every key of the oracle's top-K is at or above the rung (above
    it on a crowded rung), which is why the leader's selection over the gather is exact;
    on ``TIE`` the keys above the rung are fewer than K and with its ties reach K."""
    k = 64
    batch = make_decode_batch(
        np.random.default_rng(abs(hash(family)) % 2**32), batch=24, k=k, width=SMALL.max_n,
        row_stride=SMALL.max_n, family=family, lengths="ragged",
    )  # fmt: skip
    want = topk_windows(batch.logits, batch.windows, k)
    for r in range(batch.rows):
        n = int(batch.kv_lens[r])
        row = batch.logits[r, :n]
        t = simulate_row(row, k, SMALL)
        if t.path in (Path.SHORT, Path.WHOLE_ROW):
            continue
        keys = order_key(np.ascontiguousarray(row, np.float32)).astype(np.int64)
        top = keys[want[r][want[r] >= 0]]
        lo = t.t1 + (1 if t.crowded else 0)
        if t.path in (Path.FIRST, Path.UNSAMPLED):
            assert k <= t.count1 <= SMALL.capacity
            assert top.min() >= lo
        elif t.path == Path.TIE:
            assert t.count1 < k <= t.count1 + t.eq1
            assert np.count_nonzero(keys > t.t1) == t.count1
        elif t.path == Path.RESCUE_OVERFLOW:
            assert t.count1 > SMALL.capacity
        else:
            assert t.path == Path.RESCUE_UNDERESTIMATE and t.count1 + t.eq1 < k


def test_invalid_params():
    with pytest.raises(ValueError, match="cluster"):
        ClusterParams(cluster=3, threads=64, vecs=1)
    with pytest.raises(ValueError, match="threads"):
        ClusterParams(cluster=2, threads=48, vecs=1)
    with pytest.raises(ValueError, match="vecs"):
        ClusterParams(cluster=2, threads=64, vecs=0)


def test_windows_batch_matches_rows():
    from gvr_reference.cluster_model import simulate_windows

    g = np.random.default_rng(3)
    x = g.standard_normal((3, SMALL.max_n)).astype(np.float32)
    w = RowWindows(np.array([0, 1, 2]), np.array([SMALL.max_n, 1000, 500]))
    traces = simulate_windows(x, w.starts, w.lengths, 64, SMALL)
    assert [t.path for t in traces] == [
        simulate_row(
            x[r, w.starts[r] : w.starts[r] + w.lengths[r]], 64, SMALL, lead=int(w.starts[r]) & 3
        ).path
        for r in range(3)
    ]


BRACKETED = ClusterParams(cluster=4, threads=64, vecs=2, capacity=64, bracket=True)


def test_bracket_forced_rows_reach_every_path():
    from gvr_reference.cluster_model import bracket_forced_rows

    k = 16
    p = BRACKETED
    x, kv, kind = bracket_forced_rows(np.random.default_rng(5), p, k, p.max_n + 64)
    paths = {}
    for r in range(x.shape[0]):
        paths.setdefault(int(kind[r]), set()).add(simulate_row(x[r, : kv[r]], k, p).path)
    assert paths[1] == {Path.BRACKET}
    assert paths[2] == {Path.BRACKET_NARROW}
    assert Path.BRACKET_OVERFLOW in paths[3]
    assert paths[0] <= {Path.BRACKET, Path.BRACKET_RANK}
    for kd in (4, 5, 6):  # a crowded sample, a NaN, +inf: the sampled path
        assert not paths[kd] & {Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW}
    assert paths[7] == {Path.SHORT} and paths[8] == {Path.WHOLE_ROW}
    assert paths[9] == {Path.BRACKET_RANK}
    sampled = ClusterParams(4, 64, 2, capacity=64)
    assert all(
        simulate_row(x[r, : kv[r]], k, sampled).path
        not in (Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW, Path.BRACKET_OVERFLOW)
        for r in range(x.shape[0])
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_bracket_forced_rows_reach_every_path(dtype):
    """The 16-bit forced rows (values of the format) of the routed 16-bit shape reach every
    bracket path, and their sampled fallbacks rung in the 16-bit key space."""
    from gvr_reference.cluster_model import bracket_forced_rows
    from gvr_reference.keys import format_bits, key_format

    k = 512
    p = ClusterParams(cluster=4, threads=512, vecs=2, capacity=2048, bracket=True, dtype=dtype)
    assert p.vec == 8 and p.max_n == 32768
    x, kv, kind = bracket_forced_rows(np.random.default_rng(5), p, k, p.max_n + 64)
    format_bits(x, key_format(dtype))  # every score is a value of the format
    traces = [simulate_row(x[r, : kv[r]], k, p) for r in range(x.shape[0])]
    paths = {}
    for r, t in enumerate(traces):
        paths.setdefault(int(kind[r]), set()).add(t.path)
    assert paths[1] == {Path.BRACKET}
    assert paths[2] == {Path.BRACKET_NARROW}
    assert paths[3] == {Path.BRACKET_OVERFLOW}
    assert paths[9] == {Path.BRACKET_RANK}
    assert paths[7] == {Path.SHORT} and paths[8] == {Path.WHOLE_ROW}
    for kd in (4, 5, 6):
        assert not paths[kd] & {Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW}
    sampled = [t for t in traces if t.path in (Path.FIRST, Path.TIE)]
    assert sampled and all(0 < t.t1 <= 0xFFFF for t in sampled)


@settings(max_examples=150, deadline=None)
@given(
    cluster=st.sampled_from([2, 4, 8]),
    threads=st.sampled_from([32, 64]),
    vecs=st.integers(1, 3),
    lead=st.integers(0, 3),
    family=st.sampled_from(sorted(FAMILIES)),
    data=st.data(),
)
def test_bracket_low_bounds_k_keys_and_the_rule_is_exact(
    cluster, threads, vecs, lead, family, data
):
    """The cluster's bracket low end has at least ``k`` keys at or above it, and the bracket
    rule over the whole row (every key of a higher bin, then the crossing bin by key and
    position) is the oracle's top-K: what every bracket path writes."""
    from gvr_reference.cluster_model import bracket_low
    from gvr_reference.register_model import BRACKET_BINS, bracket, bracket_bins, crossing

    p = ClusterParams(cluster, threads, vecs, bracket=True)
    n = data.draw(st.integers(2, p.max_n - lead))
    k = data.draw(st.integers(1, min(n - 1, 2048)))
    seed = data.draw(st.integers(0, 2**31))
    batch = make_decode_batch(
        np.random.default_rng(seed), batch=1, k=k, width=n, row_stride=n, family=family,
        lengths="full",
    )  # fmt: skip
    row = batch.logits[0, :n]
    keys = order_key(np.ascontiguousarray(row, np.float32))
    lo = bracket_low(keys, k, lead, p)
    assert np.count_nonzero(keys >= lo) >= k
    br = bracket(lo, int(keys.max()))
    if br is None:
        return
    bins = bracket_bins(keys, br)
    inside = np.flatnonzero(bins >= 0)  # counted, as the kernel counts them
    assert np.all(bins[keys >= lo] >= 1)
    cb, above, m = crossing(np.bincount(bins[inside], minlength=BRACKET_BINS), k)
    assert 1 <= k - above <= m
    high = inside[bins[inside] > cb]
    cand = inside[bins[inside] == cb]
    order = np.lexsort((cand, -keys[cand].astype(np.int64)))
    got = np.sort(np.concatenate([high, cand[order][: k - above]]))
    want = topk_windows(batch.logits, batch.windows, k, deterministic=True)[0]
    assert np.array_equal(got, np.sort(want))
