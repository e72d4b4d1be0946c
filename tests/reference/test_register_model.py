"""The register-resident family's plan and CPU model: the arithmetic, the sample, every path."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from gvr_reference import validate
from gvr_reference.bracket import BIN0_BITS
from gvr_reference.keys import key_to_float, order_key
from gvr_reference.model import Path
from gvr_reference.register_model import (
    BRACKET_BINS,
    CROWD_MIN,
    KEY_FLT_MAX,
    KEY_NEG_FLT_MAX,
    RANK_MAX,
    RegisterParams,
    bracket,
    bracket_bins,
    bracket_low,
    bracket_topk,
    crossing,
    crowd_bound,
    crowd_harms,
    crowd_key,
    crowded_sample,
    fma32,
    near_pair,
    register_plan,
    sample_positions,
    simulate_row,
    thread_sample,
)
from gvr_reference.windows import RowWindows
from gvr_reference.workloads import FAMILIES, make_decode_batch
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(
    threads=st.sampled_from([256, 512, 1024]),
    vecs=st.integers(1, 8),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    data=st.data(),
)
def test_sample_positions_are_the_valid_slots(threads, vecs, dtype, data):
    p = RegisterParams(threads, vecs, dtype=dtype)
    vec = 4 if dtype == "float32" else 8
    assert p.vec == vec and p.max_n == vec * threads * vecs
    lead = data.draw(st.integers(0, vec - 1))
    n = data.draw(st.integers(1, p.max_n))
    pos = sample_positions(n, lead, p)
    assert ((pos >= 0) & (pos < n)).all()
    assert np.unique(pos).size == pos.size
    # Brute force: thread t's slot (t % vecs, (t // vecs) % vec), kept when its whole vector
    # lies inside the window and its lane is not before the window start.
    nvec = (lead + n) // vec
    want = []
    for t in range(threads):
        v = t + (t % vecs) * threads
        q = (t // vecs) % vec
        if v < nvec and vec * v + q - lead >= 0:
            want.append(vec * v + q - lead)
    assert pos.tolist() == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_rows_bracket_their_widening_and_sample_in_16bit_keys(dtype):
    """A 16-bit row's bracket path is the float32 bracket of its exact widening (the layout
    of eight scores a vector); the rows the bracket refuses take the rung in the 16-bit key
    space, whose selection is exact."""
    from gvr_reference.keys import format_keys, key_format, round_to_format
    from gvr_reference.model import rung_with_ties

    fmt = key_format(dtype)
    p = RegisterParams(512, 2, capacity=2048, dtype=dtype)
    g = np.random.default_rng(11)
    x = round_to_format(g.standard_normal(p.max_n - 5).astype(np.float32), fmt)
    k = 512
    t = simulate_row(x, k, p, lead=5)
    keys = order_key(x)
    assert t.path in (Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW)
    assert t.t1 == bracket_low(keys, k, 5, p)
    x[7] = np.inf  # the bracket refuses the row: the sampled path, in 16-bit keys
    t = simulate_row(x, k, p, lead=5)
    assert t.path in (Path.FIRST, Path.TIE, Path.RESCUE_OVERFLOW, Path.RESCUE_UNDERESTIMATE)
    pos = sample_positions(x.size, 5, p)
    j1 = register_plan(x.size, k, pos.size, p.aim_mult).j1
    k16 = format_keys(x, fmt)
    assert (t.t1, t.sample_size) == (rung_with_ties(k16[pos], j1, 1, fmt.key_max)[0], pos.size)
    assert 0 < t.t1 <= fmt.key_max
    assert t.count1 == int((k16 >= t.t1).sum()) - (int((k16 == t.t1).sum()) if t.crowded else 0)


def test_sample_spans_the_row():
    p = RegisterParams(1024, 8)
    pos = sample_positions(p.max_n, 0, p)
    assert pos.size == 1024
    hist = np.histogram(pos, bins=8, range=(0, p.max_n))[0]
    assert hist.min() >= 100  # every eighth of the row is sampled


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 1 << 15), k=st.integers(1, 2048), s=st.integers(0, 1024))
def test_plan_arithmetic(n, k, s):
    k = min(k, n - 1)
    plan = register_plan(n, k, s, 2)
    assert plan.unsampled == (n <= 4 * k or s == 0)
    if not plan.unsampled:
        assert 1 <= plan.j1 <= s
        assert plan.j1 == min(max(2 * k * s // n, 1), s)


def test_params_validation():
    for kw, name in (
        (dict(threads=100, vecs=1), "threads"),
        (dict(threads=256, vecs=0), "vecs"),
        (dict(threads=256, vecs=1, aim_mult=0), "aim_mult"),
        (dict(threads=256, vecs=1, capacity=0), "capacity"),
    ):
        with pytest.raises(ValueError, match=name):
            RegisterParams(**kw)
    assert RegisterParams(512, 4).max_n == 8192


def test_every_sampled_path():
    """Rows the bracket cannot serve (a +inf score at the top) take the sampled paths."""
    p = RegisterParams(512, 4)
    k = 512
    g = np.random.default_rng(3)
    n = p.max_n
    x = g.standard_normal(n).astype(np.float32)
    x[n - 1] = np.inf
    assert simulate_row(x[:k], k, p).path == Path.SHORT
    y4 = x[: 4 * k].copy()
    y4[-1] = np.inf
    assert simulate_row(y4, k, p).path == Path.UNSAMPLED
    first = simulate_row(x, k, p)
    assert first.path == Path.FIRST
    assert first.count1 == int((order_key(x) >= first.t1).sum()) >= k
    assert first.sample_size == 512
    y = x.copy()
    pos = sample_positions(n, 0, p)
    y[pos[: first.j1]] = 1e6 + np.arange(first.j1, dtype=np.float32)
    under = simulate_row(y, k, p)
    assert under.path == Path.RESCUE_UNDERESTIMATE and under.count1 < k
    longer = np.concatenate([x, x[:5]])
    assert simulate_row(longer, k, p).path == Path.WHOLE_ROW
    # No whole vector past the window start: the kernel reads the row from memory.
    assert simulate_row(x[:3], 2, p).path == Path.WHOLE_ROW
    assert simulate_row(x[:2], 1, p, lead=1).path == Path.WHOLE_ROW
    # A misaligned window of the full capacity still fits; one more score does not.
    assert simulate_row(x, k, p, lead=3).path != Path.WHOLE_ROW
    assert simulate_row(longer[: n + 1], k, p, lead=3).path == Path.WHOLE_ROW
    # More keys at or above the rung than the staging holds: selected from the registers.
    small = RegisterParams(512, 4, capacity=1024)
    z = x.copy()
    off = np.setdiff1d(np.arange(n - 1), pos)[:1500]
    z[off] = 50 + np.arange(off.size, dtype=np.float32) / 64
    over = simulate_row(z, k, small)
    assert over.path == Path.RESCUE_OVERFLOW and over.count1 > 1024 and not over.crowded
    # A tie class the sample sees as one crowded key (the crowd test sends the row here
    # even without the +inf): keys above it staged, ties counted.
    t = g.standard_normal(n).astype(np.float32)
    t[g.random(n) < 0.3] = 2.5
    assert crowded_sample(thread_sample(order_key(t), 0, small))
    tie = simulate_row(t, k, small)
    keys = order_key(t)
    assert tie.path == Path.TIE and tie.crowded
    assert tie.count1 == int((keys > tie.t1).sum()) < k <= tie.count1 + tie.eq1
    assert tie.eq1 == int((keys == tie.t1).sum())
    # The same crowd with more keys above it than the staging holds.
    free = np.setdiff1d(np.flatnonzero(t != 2.5), pos)[:1500]
    t[free] = 9 + np.arange(free.size, dtype=np.float32) / 64
    crowd_over = simulate_row(t, k, small)
    assert crowd_over.path == Path.RESCUE_OVERFLOW and crowd_over.crowded


def test_every_bracket_path():
    p = RegisterParams(512, 4, capacity=2048)
    k = 512
    g = np.random.default_rng(4)
    n = p.max_n
    seen = set()
    for _ in range(20):
        x = g.standard_normal(n).astype(np.float32)
        tr = simulate_row(x, k, p)
        seen.add(tr.path)
        keys = order_key(x)
        assert tr.t1 == bracket_low(keys, k, 0, p) >= int(keys[:k].min())
    assert {Path.BRACKET, Path.BRACKET_RANK} <= seen
    # A tie class at the top that the sample does not see (no crowd): narrowed from the
    # staging ...
    x = g.standard_normal(n).astype(np.float32)
    # Positions of the lower half of the threads only (the others' maxima keep the low end
    # below the class), none of them sampled.
    half = np.flatnonzero((np.arange(n) // 4) % p.threads < p.threads // 2)
    free = np.setdiff1d(half, sample_positions(n, 0, p))
    x[free[:600]] = 6.0
    tr = simulate_row(x, k, p)
    assert tr.path == Path.BRACKET_NARROW and RANK_MAX < tr.count1 <= p.capacity
    # ... or, past the capacity, from the registers.
    x[free[:3000]] = 6.0
    tr = simulate_row(x, k, p)
    assert tr.path == Path.BRACKET_OVERFLOW and tr.count1 > p.capacity


@pytest.mark.parametrize(
    "edit",
    [
        lambda x, k: x.__setitem__(5, np.inf),  # +inf at the top
        lambda x, k: x.__setitem__(7, np.nan),  # NaN at the top
        lambda x, k: x.__setitem__(slice(None), 1.0),  # a constant row: top == lo
        lambda x, k: x.__setitem__(slice(None), x * np.float32(1e-39)),  # subnormal width
    ],
)
def test_rows_the_bracket_refuses_take_the_sampled_path(edit):
    p = RegisterParams(512, 2)
    k = 512
    x = np.random.default_rng(5).standard_normal(p.max_n).astype(np.float32)
    edit(x, k)
    keys = order_key(x)
    assert bracket(int(keys[:k].min()), int(keys.max())) is None
    assert simulate_row(x, k, p).path in {Path.FIRST, Path.TIE, Path.UNSAMPLED}
    assert bracket_topk(x, k) is None


def test_bracket_low_end():
    """The low end is the first k's minimum, raised to the smallest per-thread maximum when
    at least k threads hold a score; either way at least k keys are at or above it."""
    p = RegisterParams(512, 2)
    g = np.random.default_rng(8)
    for n, k, lead in ((4096, 512, 0), (4096, 2048, 0), (1500, 512, 2), (2049, 256, 3)):
        keys = order_key(g.standard_normal(n).astype(np.float32))
        lo = bracket_low(keys, k, lead, p)
        assert (keys >= lo).sum() >= k
        assert lo >= int(keys[:k].min())
        if k > p.threads or (lead + n) >> 2 < k:
            assert lo == int(keys[:k].min())
    # A -inf among the first k: the per-thread maxima still give a finite bracket.
    x = g.standard_normal(4096).astype(np.float32)
    x[7] = -np.inf
    keys = order_key(x)
    assert bracket(int(keys[:512].min()), int(keys.max())) is None
    assert bracket(bracket_low(keys, 512, 0, p), int(keys.max())) is not None
    assert simulate_row(x, 512, p).path in {Path.BRACKET, Path.BRACKET_RANK}


def test_bracket_arithmetic_matches_ieee_float32():
    lo, top = order_key(np.array([-3.0, 5.0], np.float32))
    br = bracket(lo, top)
    assert br.scale == np.float32(np.float32(BRACKET_BINS - 4) / np.float32(8.0))
    assert br.bias == np.float32(2.0**23 + 2 + 3.0 * np.float64(br.scale))  # one rounding
    keys = order_key(np.array([-3.0, -2.99, 0.0, -0.0, 1.0, 5.0, -4.0, -np.inf], np.float32))
    b = bracket_bins(keys, br)
    # The low end opens bin 2 (its t is 2**23 + 2 within half a unit), the top closes bin
    # BRACKET_BINS - 2; below the bracket, bin 0 or 1, or not counted (-1).
    assert b[0] == 2 and b[5] == BRACKET_BINS - 2
    assert b[6] == -1 and b[7] == -1
    assert b[2] == b[3]  # -0.0 and +0.0 share a key and a bin
    assert b[4] == int(np.rint(np.float64(br.bias) + np.float64(br.scale))) - 2**23
    # Ends at the edge of the finite values still form a bracket; past them, none does.
    assert bracket(KEY_NEG_FLT_MAX, KEY_FLT_MAX) is None  # width overflows
    assert bracket(KEY_NEG_FLT_MAX, int(order_key(np.array([0.0], np.float32))[0])) is not None
    assert bracket(KEY_NEG_FLT_MAX - 1, KEY_FLT_MAX - 1) is None
    assert bracket(int(top), int(lo)) is None
    # A low end far from zero against the width: the bias cannot place it in bin 1.
    lo, top = order_key(np.array([1.0e7, 1.0e7 + 64.0], np.float32))
    assert bracket(lo, top) is None


def test_fma32_rounds_once():
    """``fma32`` is one IEEE rounding of the exact ``a * b + c``, where a float64 sum
    rounded again to float32 is not: the sum lies just below a float32 midpoint."""
    a, b, c = np.float32(1 + 2.0**-23), np.float32(1 - 2.0**-23), np.float32(2.0**24 + 2)
    assert np.float32(np.float64(a) * np.float64(b) + np.float64(c)) == np.float32(2.0**24 + 4)
    assert fma32(a, b, c) == np.float32(2.0**24 + 2)
    assert fma32(-a, b, -c) == np.float32(-(2.0**24 + 2))
    assert fma32(a, a, np.float32(2.0**24)) == np.float32(2.0**24 + 2)  # above the midpoint
    assert fma32(np.float32(-np.inf), np.float32(3.0), np.float32(5.0)) == -np.inf
    # just below the overflow midpoint 2**128 - 2**103, where the float64 sum lands on it
    flt_max = np.finfo(np.float32).max
    big = fma32(np.float32(55831.0), np.float32(601 * 2.0**103), np.float32(-1.0))
    assert big == flt_max
    assert fma32(np.float32(55831.0), np.float32(601 * 2.0**103), np.float32(1.0)) == np.inf
    g = np.random.default_rng(3)
    x, y, z = (g.standard_normal(1024).astype(np.float32) for _ in range(3))
    got = fma32(x, y, z)
    # each result is a float32 nearest the exact value (no neighbour lies closer)
    for p, q, r, t in zip(x, y, z, got, strict=True):
        exact = Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))
        err = abs(Fraction(float(t)) - exact)
        for side in (np.float32(np.inf), np.float32(-np.inf)):
            assert err <= abs(Fraction(float(np.nextafter(t, side))) - exact)


@settings(max_examples=300, deadline=None)
@given(
    lo=st.floats(-(2.0**100), 2.0**100, width=32),
    span=st.floats(2.0**-100, 2.0**100, width=32),
    data=st.data(),
)
def test_bins_are_monotone_in_the_key(lo, span, data):
    """The exactness premise: the bin never decreases as the key grows, over any bracket."""
    ends = np.array([lo, np.float32(lo) + np.float32(span)], np.float32)
    klo, ktop = (int(v) for v in order_key(ends))
    br = bracket(klo, ktop)
    if br is None:
        return
    inner = data.draw(st.lists(st.integers(klo, ktop), min_size=1, max_size=200))
    keys = np.unique(np.array([klo, ktop, *inner], np.uint32))
    # -0.0 has no canonical key of its own; every other key in range is a finite value.
    keys = keys[keys != np.uint32(0x7FFFFFFF)]
    assert np.isfinite(key_to_float(keys)).all()
    b = bracket_bins(keys, br)
    assert (np.diff(b) >= 0).all()
    # Every key of the bracket is counted (bin >= 1); its top closes one of the last bins.
    assert b.min() >= 1 and b.max() <= BRACKET_BINS - 1
    below = np.unique(np.array(data.draw(st.lists(st.integers(0, klo), max_size=50)), np.uint32))
    below = below[(below != np.uint32(0x7FFFFFFF)) & (below >= 0x007FFFFF)]  # values, -inf on
    if below.size:
        bb = bracket_bins(below, br)
        assert (np.diff(bb) >= 0).all() and bb.max() <= b.min() and bb.min() >= -1


def test_crossing():
    hist = np.array([5, 0, 3, 2, 0, 1])
    assert crossing(hist, 1) == (5, 0, 1)
    assert crossing(hist, 2) == (3, 1, 2)
    assert crossing(hist, 3) == (3, 1, 2)
    assert crossing(hist, 4) == (2, 3, 3)
    assert crossing(hist, 11) == (0, 6, 5)


def test_crowd_test():
    p = RegisterParams(512, 2)
    keys = order_key(np.random.default_rng(6).standard_normal(p.max_n).astype(np.float32))
    s = thread_sample(keys, 0, p)
    assert not crowded_sample(s)
    pos = sample_positions(p.max_n, 0, p)
    assert np.array_equal(s[s != 0], keys[pos])
    s2 = s.copy()
    s2[32 : 32 + CROWD_MIN] = 12345
    assert crowded_sample(s2)
    s2[32 + CROWD_MIN - 1] = 0  # invalid slots do not count
    assert not crowded_sample(s2)


def key_of(v: float) -> int:
    return int(order_key(np.array([v], np.float32))[0])


def test_crowd_key_is_the_largest_crowded_key():
    """``crowd_key``: the largest key some warp holds ``CROWD_MIN`` times (over every warp),
    0 where none does; ``crowded_sample`` is its being nonzero."""
    g = np.random.default_rng(8)
    s = g.choice(2**31, size=128, replace=False).astype(np.uint32) + 1
    assert crowd_key(s) == 0 and not crowded_sample(s)
    s[0:CROWD_MIN] = 500  # warp 0
    s[40 : 40 + CROWD_MIN] = 900  # warp 1
    s[48 : 48 + CROWD_MIN - 1] = 2**31 + 7  # warp 1, one short of a crowd
    assert crowd_key(s) == 900 and crowded_sample(s)
    s[40] = 0  # invalid slots do not count
    assert crowd_key(s) == 500


def test_crowd_bound_keeps_the_kernels_top_bits():
    """A float32 crowd key is read back as the largest key of its top 26 bits (the kernels'
    packed warp word); a 16-bit one whole."""
    assert crowd_bound(0x80001234) == 0x8000123F | 0x30
    assert crowd_bound(0x80001240) == 0x8000127F
    assert crowd_bound(0x80001234, "bfloat16") == 0x80001234
    for key in np.random.default_rng(9).integers(1, 2**32, 1000, dtype=np.uint64):
        b = crowd_bound(int(key))
        assert int(key) <= b <= int(key) + 63 and b >> 6 == int(key) >> 6


def test_crowd_harms_where_the_counting_pass_shares_a_word():
    """A crowd sends the row off the bracket exactly when its bound's ``t = fma(v, scale,
    bias)`` reaches ``2**23 - 16`` (a histogram bin, or a word lanes share just below it):
    inside the bracket and a few bins below its low end it does, far below it (the zeros of
    a ReLU-weighted row whose K-th score is positive) it does not."""
    lo, top = (key_of(v) for v in (1.0, 5.0))
    br = bracket(lo, top)
    width = 4.0 / (BRACKET_BINS - 4)  # one bin
    assert crowd_harms(key_of(3.0), br)
    assert crowd_harms(lo, br)
    assert crowd_harms(key_of(1.0 - 10 * width), br)
    assert not crowd_harms(key_of(1.0 - 20 * width), br)
    assert not crowd_harms(key_of(0.0), br)
    assert not crowd_harms(key_of(-np.inf), br)
    assert not crowd_harms(0, br)
    # the rule itself, key by key over the edge: monotone, and the bound's t decides
    start = key_of(1.0 - 30 * width)
    keys = np.linspace(start, lo, 301).astype(np.int64)
    harms = np.array([crowd_harms(int(k), br) for k in keys])
    assert harms.any() and not harms.all()
    assert (np.diff(harms.astype(int)) >= 0).all()
    for key, h in zip(keys, harms, strict=True):
        v = key_to_float(np.array([crowd_bound(int(key))], np.uint32))
        t = int(fma32(v, br.scale, br.bias).view(np.int32)[0])
        assert h == (t >= BIN0_BITS - 32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_zero_crowd_below_the_bracket_keeps_the_bracket(dtype):
    """Rows with 30% of their scores 0.0 and a positive K-th score crowd every warp's sample
    with zeros; the register model still takes the bracket, and with the zeros raised into
    the bracket (a tie class at the K-th score) the sampled path."""
    from gvr_reference.keys import key_format, round_to_format

    p = RegisterParams(512, 4, dtype=dtype)
    k = 512
    g = np.random.default_rng(10)
    x = g.standard_normal(p.max_n).astype(np.float32)
    x[g.random(p.max_n) < 0.3] = 0.0
    x = round_to_format(x, key_format(dtype))
    sample = thread_sample(order_key(x), 0, p)
    assert crowd_key(sample) == key_of(0.0)
    assert simulate_row(x, k, p).path in (Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW)
    kth = np.sort(x)[::-1][k - 1]
    y = np.where(x == 0.0, kth, x).astype(np.float32)
    t = simulate_row(y, k, p)
    assert t.path == Path.TIE and t.crowded


@settings(max_examples=400, deadline=None)
@given(
    lanes=st.sets(st.integers(0, 31), min_size=0, max_size=32),
    others=st.lists(st.integers(0, 3), min_size=32, max_size=32),
)
def test_every_crowded_warp_has_a_near_pair(lanes, others):
    """A warp whose keys hold one valid key ``CROWD_MIN`` times has a near pair
    (:func:`near_pair`: the kernel counts keys only in such warps), whatever lanes the key
    takes and whatever the other lanes hold (small keys, so other crowds and invalid lanes
    too); a warp of distinct valid keys has none."""
    warp = np.array(others, dtype=np.uint32)
    warp[sorted(lanes)] = 77
    if crowded_sample(warp):
        assert near_pair(warp)
    distinct = np.arange(1, 33, dtype=np.uint32)
    assert not near_pair(distinct) and not crowded_sample(distinct)


def test_near_pair_at_the_widest_spacing():
    """CROWD_MIN lanes evenly spaced (every 32 // CROWD_MIN lanes) are the hardest placement:
    the pair sits at the largest distance the kernel compares; with one of them invalid the
    warp is no crowd. The pair is only a filter: CROWD_MIN - 1 lanes five apart (0, 5, ...,
    30) are no crowd, yet lanes 30 and 0 make a near pair across the wrap (the kernel then
    counts the keys and finds fewer than CROWD_MIN); without lane 30 there is none."""
    step = 32 // CROWD_MIN
    warp = np.arange(100, 132, dtype=np.uint32)
    warp[::step] = 5
    assert crowded_sample(warp) and near_pair(warp)
    warp[0] = 0
    assert not crowded_sample(warp)
    sparse = np.arange(100, 132, dtype=np.uint32)
    sparse[:: step + 1] = 5
    assert not crowded_sample(sparse) and near_pair(sparse)
    sparse[30] = 200
    assert not near_pair(sparse)


@pytest.mark.parametrize("family", FAMILIES)
def test_bracket_selection_is_exact(family):
    """The bracket path's rule on the CPU agrees with the oracle on every value family."""
    k = 512
    batch = make_decode_batch(
        np.random.default_rng(7), batch=16, k=k, width=6000, row_stride=6000, family=family
    )
    for r in range(16):
        n = int(batch.kv_lens[r])
        x = batch.logits[r : r + 1, :n]
        if n <= k:
            continue
        idx = bracket_topk(x[0], k)
        if idx is None:
            continue
        rep = validate.check_topk(
            x, RowWindows(np.zeros(1), np.array([n])), k, idx[None].astype(np.int32)
        )
        assert rep.ok, (family, r, rep.summary())
