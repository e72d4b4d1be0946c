"""The integer ladder and the CPU model of the streaming kernel."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference.bracket import EDGE_BIAS_MAX, EDGE_BIAS_MIN, bin_edge, bracket, bracket_bins
from gvr_reference.keys import order_key
from gvr_reference.ladder import PY_OPS, LadderParams, row_plan, sample_vector
from gvr_reference.model import (
    LINEAR_BINS,
    LINEAR_CROSS_MAX,
    RUNG_BINS,
    SPLIT_BINS_MIN_K,
    ModelConfig,
    Path,
    linear_select,
    narrow_threshold,
    rung_bins,
    rung_bracket,
    rung_edge,
    rung_with_ties,
    sample_positions,
    sample_rung,
    select_rule,
    simulate_row,
    split_bins,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SINGLE = LadderParams(capacity=16384, aim_mult=2)
SPLIT = LadderParams(capacity=16384, aim_mult=3)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, (1 << 26) - 1),
    k=st.integers(1, 2048),
    lead=st.integers(0, 3),
    split=st.booleans(),
)
def test_row_plan_stays_inside_the_row(n, k, lead, split):
    p = SPLIT if split else SINGLE
    plan = row_plan(n, k, lead, p)
    assert plan.nvec == (lead + n) // 4
    assert plan.tail_start == max(4 * plan.nvec - lead, 0)
    if 4 * plan.nvec - lead >= 0:
        assert 0 <= n - plan.tail_start <= 3
    if plan.unsampled:
        assert n <= 4 * k * p.aim_mult
        return
    assert 1 <= plan.sample_vecs <= max(plan.nvec, 1)
    assert 4 * plan.sample_vecs <= p.sample_max
    # the last sampled vector is a whole vector of the row
    assert sample_vector(plan.sample_vecs - 1, plan.sample_step) < plan.nvec
    assert 1 <= plan.j1 <= plan.j2 <= 4 * plan.sample_vecs
    # int32 safety of the products the device evaluates
    assert k * p.aim_mult * 4 * plan.sample_vecs < 2**31


@pytest.mark.parametrize("aim_mult", [2, 3])
@pytest.mark.parametrize("vec", [4, 8])
def test_sampled_rows_hold_a_whole_vector(vec, aim_mult):
    """Every row the ladder samples holds at least one whole vector, so its sample lies inside
    the window: 16-bit rows (eight scores a vector) of 5-7 scores at K = 1 used to be sampled
    with none (the sample then read past the window end) and the model raised."""
    p = LadderParams(capacity=8192, aim_mult=aim_mult, vec=vec, min_hits=64, aim_boost=2)
    fmt = "bfloat16" if vec == 8 else "float32"
    for k in range(1, 9):
        for n in range(k + 1, 40):
            for lead in range(vec):
                plan = row_plan(n, k, lead, p)
                assert plan.unsampled or plan.nvec >= 1, (n, k, lead)
                if plan.nvec == 0:
                    row = np.arange(n, dtype=np.float32)
                    trace = simulate_row(row, k, ModelConfig(p, dtype=fmt), lead)
                    assert trace.path == Path.UNSAMPLED


def test_row_plan_ops_are_pluggable():
    calls = []

    def spy(name, fn):
        def wrapped(*a):
            calls.append(name)
            return fn(*a)

        return wrapped

    class Ops:
        min = staticmethod(spy("min", min))
        max = staticmethod(spy("max", max))
        select = PY_OPS.select

    assert row_plan(100000, 512, 1, SINGLE, Ops()) == row_plan(100000, 512, 1, SINGLE)
    assert {"min", "max"} <= set(calls)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_select_rule_is_exact(data):
    n = data.draw(st.integers(1, 400))
    pool = data.draw(st.sampled_from(["wide", "ties", "tiny"]))
    if pool == "wide":
        keys = np.array(
            data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)), np.uint32
        )
    elif pool == "ties":
        keys = np.array(
            data.draw(
                st.lists(st.sampled_from([0, 5, 0x80000000, 0xFFFFFFFF]), min_size=n, max_size=n)
            ),
            np.uint32,
        )
    else:
        keys = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.uint32)
    k = data.draw(st.integers(1, n))
    thr, need_eq = select_rule(keys, k)
    assert int((keys > thr).sum()) == k - need_eq
    assert int((keys == thr).sum()) >= need_eq
    kth = np.sort(keys)[::-1][k - 1]
    assert need_eq == 0 or thr == kth


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300), data=st.data())
def test_narrow_threshold_brackets_the_rank(keys, data):
    keys = np.array(keys, np.uint32)
    j = data.draw(st.integers(1, keys.size))
    t, reached = narrow_threshold(keys, j)
    assert reached == int((keys >= t).sum())
    assert reached >= j
    # either within 2j, or the rung is a single key whose tie class makes it larger
    assert reached <= 2 * j or int((keys > t).sum()) < j


def _float_keys(draw_values):
    return order_key(np.array(draw_values, np.float32))


_SCORES = st.one_of(
    st.floats(-1e6, 1e6, width=32),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45]),
)


@st.composite
def _narrow_keys(draw):
    """Keys a few units in the last place apart, around any finite value: brackets whose
    bias lies far from 2**23 (the case the edge arithmetic must decline)."""
    base = int(_float_keys([draw(st.floats(-(2.0**100), 2.0**100, width=32))])[0])
    spread = draw(st.integers(1, 1 << 20))
    offsets = draw(st.lists(st.integers(0, spread), min_size=2, max_size=60))
    keys = np.clip(base + np.array(offsets, np.int64), 0x00800000, 0xFF7FFFFF)
    return keys.astype(np.uint32)


@settings(max_examples=300, deadline=None)
@given(
    sample=st.one_of(st.lists(_SCORES, min_size=1, max_size=400).map(_float_keys), _narrow_keys()),
    zeros=st.integers(0, 3),
    data=st.data(),
)
def test_sample_rung_brackets_the_rank(sample, zeros, data):
    """The float32 rung (linear level, then radix above its edge) keeps the radix rung's
    contract on any sample: lanes before the window (key 0), infinities, NaN, ties, values a
    few units in the last place apart. On the linear level the count is the histogram's,
    which may leave out sample keys equal to ``T`` that were binned below its bin."""
    keys = np.concatenate([np.zeros(zeros, np.uint32), sample])
    j = data.draw(st.integers(1, keys.size))
    reach = data.draw(st.integers(j, 2 * j + 8))
    t, reached, ties = sample_rung(keys, j, reach)
    at_or_above = int((keys.astype(np.int64) >= t).sum())
    assert j <= reached <= at_or_above
    assert at_or_above - reached <= int((keys == t).sum()) * (ties == 0)
    if ties:
        assert ties == int((keys == t).sum()) and int((keys > t).sum()) < j
    else:
        assert reached <= reach


@settings(max_examples=200, deadline=None)
@given(
    keys=st.one_of(
        st.lists(st.floats(-(2.0**100), 2.0**100, width=32), min_size=2, max_size=200).map(
            _float_keys
        ),
        _narrow_keys(),
    )
)
def test_rung_edges_bound_their_bins(keys):
    """The linear bins are non-decreasing in the key, and every key of bin ``b`` or above
    is at least ``rung_edge(b)``, while the keys below the edge are in lower bins but for
    the edge's own value."""
    keys = np.sort(keys)
    br = rung_bracket(keys)
    if br is None:
        return
    bins = rung_bins(keys, br)
    assert (np.diff(bins) >= 0).all() and bins.min() >= 1 and bins.max() <= RUNG_BINS - 1
    for b in range(int(bins.min()), int(bins.max()) + 1):
        e = rung_edge(b, br)
        assert (keys[bins >= b] >= e).all()
        assert (bins[keys < e] < b).all()


def test_sample_rung_settles_gaussian_rows_in_one_level():
    """On a gaussian sample the linear level's crossing bin is the rung (no radix level),
    while the radix rung needs a second level: the key's top byte puts every score of
    [2, 8) in one bin."""
    rng = np.random.default_rng(3)
    keys = order_key(rng.standard_normal(4096).astype(np.float32))
    j, reach = 31, 62
    br = rung_bracket(keys)
    hist = np.bincount(rung_bins(keys, br), minlength=RUNG_BINS)
    suffix = np.cumsum(hist[::-1])[::-1]
    b = int(np.flatnonzero(suffix >= j).max())
    t, reached, ties = sample_rung(keys, j, reach)
    assert (t, ties) == (rung_edge(b, br), 0) and j <= reached == int(suffix[b]) <= reach
    assert reached == int((keys >= t).sum())
    # the radix rung's first level (the keys' top byte) leaves more than reach
    radix = np.cumsum(np.bincount(keys >> 24, minlength=256)[::-1])[::-1]
    assert int(radix[np.flatnonzero(radix >= j).max()]) > reach


def test_sample_rung_finds_a_tie_class_above_its_edge():
    """A crowd of one value: the linear bin holding it is too full, and the radix levels over
    the keys from its edge to the largest end on the single key, with its ties counted (a
    crowded rung), as the radix rung from the bottom does."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(4096).astype(np.float32)
    x[:300] = np.float32(2.5)
    keys = order_key(x)
    t, reached, ties = sample_rung(keys, 40, 80)
    assert t == int(order_key(np.array([2.5], np.float32))[0])
    assert ties == int((keys == t).sum()) >= 300 and reached == int((keys >= t).sum())
    assert (t, reached, ties) == rung_with_ties(keys, 40, 0, 0xFFFFFFFF, 80)


def test_sample_rung_declines_a_bracket_whose_edges_are_inexact():
    """A range narrow against its distance from zero gives a bracket bias outside
    [2**22, 2**24), where the edge's two subtractions round: there the edge of bin 34 of
    [3, 3 + 2**-14] lands one key above the bin's key 3 + 2**-17. Such samples take the radix
    rung, and a near-constant row (the top value 25 times, more than reach1) is modelled
    without error."""
    keys = order_key(np.array([3.0, 3.0 + 2.0**-17, 3.0 + 2.0**-14], np.float32))
    wide = bracket(int(keys[0]), int(keys[2]), RUNG_BINS)
    assert wide is not None and not EDGE_BIAS_MIN <= float(wide.bias) < EDGE_BIAS_MAX
    assert int(order_key(np.array([bin_edge(34, wide)], np.float32))[0]) == int(keys[1]) + 1
    assert rung_bracket(keys) is None
    assert sample_rung(keys, 2, 2) == rung_with_ties(keys, 2, 0, 0xFFFFFFFF, 2)
    assert sample_rung(keys, 2, 1) == rung_with_ties(keys, 2, 0, 0xFFFFFFFF, 1)
    g = np.random.default_rng(0)
    x = np.float32(3.0) + np.float32(2.0**-22) * g.integers(0, 332, 262144).astype(np.float32)
    trace = simulate_row(x, 64, ModelConfig(SINGLE))
    assert trace.path in (Path.FIRST, Path.TIE, Path.RETRY)


def test_sample_rung_without_a_bracket_is_the_radix_rung():
    """Samples with no finite bracket (constant, an infinite or NaN end) and 16-bit key
    spaces take the radix levels from the bottom."""
    const = np.full(512, int(order_key(np.array([1.0], np.float32))[0]), np.uint32)
    assert rung_bracket(const) is None
    assert sample_rung(const, 10, 20) == rung_with_ties(const, 10, 0, 0xFFFFFFFF, 20)
    for end in (np.inf, -np.inf, np.nan):
        x = np.random.default_rng(6).standard_normal(600).astype(np.float32)
        x[17] = end
        keys = order_key(x)
        assert rung_bracket(keys) is None
        assert sample_rung(keys, 7, 14) == rung_with_ties(keys, 7, 0, 0xFFFFFFFF, 14)
    k16 = np.random.default_rng(5).integers(0, 0xFFFF, 1000).astype(np.uint32)
    assert sample_rung(k16, 20, 40, 0xFFFF) == rung_with_ties(k16, 20, 0, 0xFFFF, 40)


def _sampled(n, k, p):
    plan = row_plan(n, k, 0, p)
    return sample_positions(plan, 4), plan


@pytest.mark.parametrize("parts", [1, 8])
def test_model_reaches_every_path(parts):
    p = SPLIT if parts > 1 else SINGLE
    cfg = ModelConfig(p, parts=parts)
    k, n = 2048, 131072
    rng = np.random.default_rng(0)
    pos, plan = _sampled(n, k, p)
    base = rng.standard_normal(n).astype(np.float32)

    def path(x):
        return simulate_row(x, k, cfg).path

    assert path(base[: k - 3]) == Path.SHORT
    assert path(base[: 3 * k]) == Path.UNSAMPLED
    assert path(base) == Path.FIRST
    huge = base.copy()
    huge[pos] = 1000 + np.arange(pos.size, dtype=np.float32)
    assert path(huge) == Path.RESCUE_UNDERESTIMATE
    # A crowd above the rung that the sample never sees: more survivors than the staging.
    hidden = base.copy()
    off = np.setdiff1d(np.arange(n), pos)[: p.capacity + 1]
    hidden[off] = 50 + np.arange(off.size, dtype=np.float32) / 1024
    assert path(hidden) == Path.RESCUE_OVERFLOW
    # A tie class the sample sees as one crowded key: the rung is that key, the keys above
    # it are staged, the ties are counted.
    flood = base.copy()
    flood[rng.random(n) < 0.3] = 7.0
    trace = simulate_row(flood, k, cfg)
    assert trace.path == Path.TIE and trace.crowded
    keys = order_key(flood)
    assert trace.count1 == int((keys > trace.t1).sum()) < k
    assert trace.eq1 == int((keys == trace.t1).sum()) >= k - trace.count1
    assert trace.t1 == int(order_key(np.float32([7.0]))[0])
    # Crowded, with k keys above it: an ordinary selection among the keys above the rung.
    above = flood.copy()
    unseen = np.setdiff1d(np.flatnonzero(flood != 7.0), pos)[: 2 * k]  # the sample misses them
    above[unseen] = 9 + np.arange(2 * k, dtype=np.float32) / 64
    trace = simulate_row(above, k, cfg)
    assert trace.path == Path.FIRST and trace.crowded and trace.count1 >= k
    top = base.copy()
    top[pos[: plan.j1]] = 1000 + np.arange(plan.j1, dtype=np.float32)
    assert path(top) == (Path.RETRY if parts == 1 else Path.RESCUE_UNDERESTIMATE)


def test_model_counts_match_the_keys():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(70000).astype(np.float32)
    trace = simulate_row(x, 512, ModelConfig(SINGLE))
    assert trace.path == Path.FIRST
    assert trace.count1 == int((order_key(x) >= trace.t1).sum())
    assert 512 <= trace.count1 <= SINGLE.capacity


@pytest.mark.parametrize("k", [1024, 2048])
@pytest.mark.parametrize("shape", ["gaussian", "heavy_tail", "negative", "ties"])
def test_split_bins_take_the_top_keys_above_the_crossing_bin(k, shape):
    """The survivor bins of a split row: the keys in the bins above the crossing bin are
    exactly the ``above`` largest, all of them in the top ``k``, and the crossing bin holds
    the ``k``-th; the top ``k`` are those plus the rule among the crossing bin's keys."""
    g = np.random.default_rng([21, k, len(shape)])
    n = 200003
    x = g.standard_normal(n).astype(np.float32)
    if shape == "heavy_tail":
        x[g.choice(n, 3 * k, replace=False)] = 1e4 * g.random(3 * k).astype(np.float32) + 50
    elif shape == "negative":
        x -= np.float32(40.0)
    elif shape == "ties":
        x = np.round(x * 64) / 64
    params = LadderParams(capacity=16384, sample_max=8192, aim_mult=3)
    bins = split_bins(x, k, ModelConfig(params, parts=25))
    assert bins is not None
    assert split_bins(x, k, ModelConfig(params, parts=1)) is None
    keys = order_key(x).astype(np.int64)
    t1 = simulate_row(x, k, ModelConfig(params, parts=25)).t1
    survivor = keys >= t1
    b = np.where(survivor, np.minimum((keys - t1) >> bins.shift, 255), -1)
    assert (b > bins.crossing).sum() == bins.above < k <= bins.above + bins.count
    assert (b == bins.crossing).sum() == bins.count
    kth = np.sort(keys)[::-1][k - 1]
    assert keys[b > bins.crossing].min(initial=2**32) > kth
    assert ((b == bins.crossing) & (keys == kth)).any()
    assert np.diff(b[np.argsort(keys, kind="stable")]).min() >= 0  # non-decreasing in the key


def test_split_bins_only_for_rows_that_meet_on_them():
    """No bins for a crowded rung, too few survivors, or too many for the staging."""
    params = LadderParams(capacity=16384, sample_max=8192, aim_mult=3)
    cfg = ModelConfig(params, parts=8)
    g = np.random.default_rng(22)
    n, k = 131072, 2048
    x = g.standard_normal(n).astype(np.float32)
    plan = row_plan(n, k, 0, params)
    pos = sample_positions(plan, 4)
    crowded = x.copy()
    crowded[g.random(n) < 0.3] = 7.0
    under = x.copy()
    under[pos] = 1000.0 + np.arange(pos.size, dtype=np.float32)
    over = x.copy()
    free = np.setdiff1d(np.arange(n), pos)
    over[free[: params.capacity + 5]] = 50.0 + np.arange(params.capacity + 5) / 1024
    for row, path in ((crowded, None), (under, Path.RESCUE_UNDERESTIMATE), (over, None)):
        assert split_bins(row.astype(np.float32), k, cfg) is None
        if path is not None:
            assert simulate_row(row.astype(np.float32), k, cfg).path == path
    assert split_bins(x, k, cfg) is not None
    assert split_bins(x, SPLIT_BINS_MIN_K - 1, cfg) is None  # below the K the bins pay from


def _linear_topk(keys: np.ndarray, k: int, lo: int, hi: int | None = None) -> np.ndarray | None:
    """The top ``k`` positions of ``keys`` as the linear selection takes them over the
    bracket ``[lo, hi]`` (``hi`` the largest key unless given; keys above it in the top bin):
    every key of a bin above the crossing bin, then the crossing bin's keys by (key
    descending, position ascending); None where :func:`linear_select` leaves the row to the
    radix levels."""
    hi = int(keys.max()) if hi is None else hi
    sel = linear_select(keys, k, lo, hi)
    if sel is None:
        return None
    bins = np.minimum(bracket_bins(keys, bracket(sel.lo, hi, LINEAR_BINS)), LINEAR_BINS - 1)
    above = np.flatnonzero(bins > sel.crossing)
    cross = np.flatnonzero(bins == sel.crossing)
    cross = cross[np.lexsort((cross, -keys[cross].astype(np.int64)))]
    assert above.size == sel.above < k <= sel.above + sel.count == sel.above + cross.size
    assert sel.ranked == (cross.size != k - above.size)
    return np.concatenate([above, cross[: k - above.size]])


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(2, 6000),
    k=st.integers(1, 2048),
    family=st.sampled_from(["gaussian", "piled", "steps", "signed", "tiny"]),
    seed=st.integers(0, 2**31 - 1),
    from_zero=st.booleans(),
    capped=st.booleans(),
)
def test_linear_select_is_the_deterministic_top_k(n, k, family, seed, from_zero, capped):
    """The linear selection's answer (bins above the crossing bin, then the crossing bin's
    largest keys, smallest positions first) is the top ``k`` with the deterministic tie rule,
    on every row it serves; also bracketed below the largest key (``capped``: as a workspace
    split's finishing CTA bins by its sample's largest key, the keys above in the top bin)."""
    k = min(k, n)
    g = np.random.default_rng(seed)
    x = g.standard_normal(n).astype(np.float32)
    if family == "piled":  # a tie class and a pile of near values
        x[g.random(n) < 0.2] = np.float32(0.5)
        near = g.random(n) < 0.2
        x[near] = np.float32(0.5) + np.float32(2**-20) * g.integers(0, 8, int(near.sum()))
    elif family == "steps":
        x = np.round(x * 4).astype(np.float32)
    elif family == "signed":
        x[g.random(n) < 0.5] = np.float32(-0.0)
    elif family == "tiny":  # a spread of a few units in the last place
        x = (np.float32(1.0) + np.float32(2**-23) * g.integers(0, 50, n)).astype(np.float32)
    keys = order_key(x)
    lo = 0 if from_zero else int(np.sort(keys)[::-1][k - 1])
    staged = keys[keys >= lo] if lo else keys
    hi = None
    if capped:  # one of the largest few percent
        hi = int(np.sort(staged)[::-1][g.integers(0, max(staged.size // 30, 1))])
    got = _linear_topk(staged, k, lo, hi)
    if got is None:
        return
    want = np.lexsort((np.arange(staged.size), -staged.astype(np.int64)))[:k]
    assert np.array_equal(np.sort(got), np.sort(want))


def test_linear_select_paths():
    """Which rows the linear selection serves: a gaussian row whole or ranked; a tie class
    past :data:`LINEAR_CROSS_MAX` at the boundary, an infinite score, a ``-inf`` score on a
    row selected from key 0: the radix levels."""
    g = np.random.default_rng(3)
    x = g.standard_normal(20000).astype(np.float32)
    k = 512
    keys = order_key(x)
    t = int(np.sort(keys)[::-1][3 * k])
    sel = linear_select(keys[keys >= t], k, t, int(keys.max()))
    assert sel is not None and sel.lo == t and sel.above < k
    v = np.sort(x)[::-1][k - 40]
    near = x.copy()
    near[g.choice(x.size, 90, replace=False)] = v + np.float32(1e-6) * np.arange(90)
    kn = order_key(near)
    sel = linear_select(kn[kn >= t], k, t, int(kn.max()))
    assert sel is not None and sel.ranked and 2 <= sel.count <= LINEAR_CROSS_MAX
    tied = x.copy()
    tied[g.choice(x.size, LINEAR_CROSS_MAX + 50, replace=False)] = v
    kt = order_key(tied)
    assert linear_select(kt[kt >= t], k, t, int(kt.max())) is None
    inf = x.copy()
    inf[7] = np.inf
    ki = order_key(inf)
    assert linear_select(ki[ki >= t], k, t, int(ki.max())) is None
    # ... also bracketed by a finite top below it (a split row's sample's largest key)
    assert linear_select(ki[ki >= t], k, t, int(keys.max())) is None
    # keys above a bracket's top count in its top bin
    top = int(np.sort(keys)[::-1][20])
    sel = linear_select(keys[keys >= t], k, t, top)
    assert sel is not None and sel.above < k <= sel.above + sel.count
    # selected from key 0 (an unsampled row): the low end is the smallest staged key ...
    sel = linear_select(keys, k, 0, int(keys.max()))
    assert sel is not None and sel.lo == int(keys.min())
    # ... unless it is -inf
    neg = x.copy()
    neg[3] = -np.inf
    kneg = order_key(neg)
    assert linear_select(kneg, k, 0, int(kneg.max())) is None
