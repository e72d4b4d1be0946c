"""The register-resident family's plan and CPU model: the arithmetic, the sample, every path."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference.keys import order_key
from gvr_reference.model import Path
from gvr_reference.register_model import (
    RegisterParams,
    register_plan,
    sample_positions,
    simulate_row,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(
    threads=st.sampled_from([256, 512, 1024]),
    vecs=st.integers(1, 8),
    lead=st.integers(0, 3),
    data=st.data(),
)
def test_sample_positions_are_the_valid_slots(threads, vecs, lead, data):
    p = RegisterParams(threads, vecs)
    n = data.draw(st.integers(1, p.max_n))
    pos = sample_positions(n, lead, p)
    assert ((pos >= 0) & (pos < n)).all()
    assert np.unique(pos).size == pos.size
    # Brute force: thread t's slot (t % vecs, (t // vecs) % 4), kept when its whole vector
    # lies inside the window and its lane is not before the window start.
    nvec = (lead + n) >> 2
    want = []
    for t in range(threads):
        v = t + (t % vecs) * threads
        q = (t // vecs) % 4
        if v < nvec and 4 * v + q - lead >= 0:
            want.append(4 * v + q - lead)
    assert pos.tolist() == want


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


def test_every_path():
    p = RegisterParams(512, 4)
    k = 512
    g = np.random.default_rng(3)
    n = p.max_n
    x = g.standard_normal(n).astype(np.float32)
    assert simulate_row(x[:k], k, p).path == Path.SHORT
    assert simulate_row(x[: 4 * k], k, p).path == Path.UNSAMPLED
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
    # A misaligned window of the full capacity still fits; one more score does not.
    assert simulate_row(x, k, p, lead=3).path != Path.WHOLE_ROW
    assert simulate_row(longer[: n + 1], k, p, lead=3).path == Path.WHOLE_ROW
    # More keys at or above the rung than the staging holds: selected from the registers.
    small = RegisterParams(512, 4, capacity=1024)
    z = x.copy()
    off = np.setdiff1d(np.arange(n), pos)[:1500]
    z[off] = 50 + np.arange(off.size, dtype=np.float32) / 64
    over = simulate_row(z, k, small)
    assert over.path == Path.RESCUE_OVERFLOW and over.count1 > 1024 and not over.crowded
    # A tie class the sample sees as one crowded key: keys above it staged, ties counted.
    t = x.copy()
    t[g.random(n) < 0.3] = 2.5
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
