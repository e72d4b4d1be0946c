"""Dense rows: rows the aim would leave unsampled that the streaming ladder and the
register-resident plan sample with the dense aim (``gvr_reference.ladder.LadderParams.dense_min``,
``gvr_reference.register_model.RegisterParams.dense_min``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gvr_reference.keys import order_key
from gvr_reference.ladder import LadderParams, dense_aim, row_plan
from gvr_reference.model import ModelConfig, Path, sample_positions, simulate_row
from gvr_reference.register_model import RegisterParams, register_plan
from gvr_reference.register_model import simulate_row as register_row
from hypothesis import given, settings
from hypothesis import strategies as st

SPLIT = LadderParams(capacity=16384, aim_mult=3)
SINGLE = LadderParams(capacity=16384, aim_mult=2)


def test_dense_aim_is_eleven_eighths_of_k():
    assert [dense_aim(k) for k in (512, 1024, 2048, 7)] == [704, 1408, 2816, 9]


@pytest.mark.parametrize("base", [SPLIT, SINGLE], ids=["split", "single"])
def test_the_dense_band(base):
    """Rows of ``(dense_min * k, 2 aim]`` scores are sampled, with the rung at the dense aim's
    sample rank; every other row plans as without dense rows."""
    p = replace(base, dense_min=2)
    k = 2048
    top = 2 * k * base.aim_mult
    for n in (k + 1, 2 * k, 2 * k + 1, 3 * k, top, top + 1, 131072):
        plan, plain = row_plan(n, k, 0, p), row_plan(n, k, 0, base)
        if 2 * k < n <= top:
            assert plain.unsampled and not plan.unsampled, n
            s = 4 * plan.sample_vecs
            assert plan.j1 == max(dense_aim(k) * s // n, 1)
            assert plan.j1 < plan.j2 <= s
        else:
            assert plan == plain, n


def test_dense_min_is_validated():
    with pytest.raises(ValueError, match="dense_min"):
        LadderParams(capacity=16384, dense_min=1)
    assert LadderParams(capacity=16384, dense_min=3).dense_min == 3


@settings(max_examples=300, deadline=None)
@given(
    k=st.integers(1, 2048),
    lead=st.integers(0, 3),
    dense_min=st.sampled_from([2, 3, 4]),
    split=st.booleans(),
    in_band=st.booleans(),
    data=st.data(),
)
def test_dense_plans_stay_inside_the_row(k, lead, dense_min, split, in_band, data):
    """Half the rows drawn inside the dense band, half anywhere up to 2**20 scores."""
    base = SPLIT if split else SINGLE
    p = replace(base, dense_min=dense_min)
    top = 2 * k * base.aim_mult
    band = st.integers(dense_min * k + 1, top)
    n = data.draw(band if in_band and dense_min * k < top else st.integers(1, 1 << 20))
    plan, plain = row_plan(n, k, lead, p), row_plan(n, k, lead, base)
    if not (dense_min * k < n <= top):
        assert plan == plain
        return
    if plan.nvec < 1:
        assert plan.unsampled
        return
    s = 4 * plan.sample_vecs
    assert not plan.unsampled and plain.unsampled
    assert 1 <= plan.sample_vecs <= plan.nvec
    assert s <= p.sample_max
    # the rung's rank is the dense aim's share of the sample, never past the sample
    assert plan.j1 == max(dense_aim(k) * s // n, 1)
    assert 1 <= plan.j1 <= plan.j2 <= s


@pytest.mark.parametrize("n", [4097, 6144, 8193, 12288])
@pytest.mark.parametrize("parts", [1, 8])
def test_dense_rows_stage_a_few_thousand_survivors(n, parts):
    """Gaussian dense rows at K = 2048 take the first rung with k to 2 x 11 k / 8 survivors
    (the staging and the selection's keys), where without dense rows every score is staged."""
    k = 2048
    base = SPLIT if parts > 1 else SINGLE
    if n > 2 * k * base.aim_mult:
        pytest.skip("sampled without dense rows")
    cfg = ModelConfig(replace(base, dense_min=2), parts=parts)
    rng = np.random.default_rng([n, parts])
    counts = []
    for _ in range(20):
        x = rng.standard_normal(n).astype(np.float32)
        assert simulate_row(x, k, ModelConfig(base, parts=parts)).path == Path.UNSAMPLED
        trace = simulate_row(x, k, cfg)
        assert trace.path == Path.FIRST
        assert trace.count1 == int((order_key(x) >= trace.t1).sum())
        counts.append(trace.count1)
    assert k <= min(counts) and max(counts) <= 2 * dense_aim(k)
    assert np.mean(counts) < 0.75 * n


@pytest.mark.parametrize("parts", [1, 8])
def test_dense_rows_reach_every_sampled_path(parts):
    """The sampled paths of a dense row: its first rung, a rung too high (the retry rung on
    one CTA, the whole-row rescue on a split row), a tie class at the rung."""
    k = 2048
    n = 8193 if parts > 1 else 6144  # dense for both aims (2 aim = 12,288 / 8,192)
    base = SPLIT if parts > 1 else SINGLE
    p = replace(base, dense_min=2)
    cfg = ModelConfig(p, parts=parts)
    plan = row_plan(n, k, 0, p)
    assert row_plan(n, k, 0, base).unsampled and not plan.unsampled
    pos = sample_positions(plan, 4)
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    assert simulate_row(x, k, cfg).path == Path.FIRST
    top = x.copy()
    top[pos[: plan.j1]] = 1000 + np.arange(plan.j1, dtype=np.float32)
    assert simulate_row(top, k, cfg).path == (
        Path.RETRY if parts == 1 else Path.RESCUE_UNDERESTIMATE
    )
    # A tie class of 60 % of the row at the rung: crowded on the split row of 8,193 (its
    # sample sees enough ties), staged with the keys above it on one CTA (within the
    # capacity).
    flood = x.copy()
    flood[np.random.default_rng(4).random(n) < 0.6] = 0.5
    trace = simulate_row(flood, k, cfg)
    if parts > 1:
        assert trace.path == Path.TIE and trace.crowded
        assert trace.count1 < k <= trace.count1 + trace.eq1
    else:
        assert trace.path == Path.FIRST and k <= trace.count1 <= p.capacity


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 1 << 15), k=st.integers(1, 2048), s=st.integers(0, 1024))
def test_register_dense_plan(n, k, s):
    """The register-resident plan with dense rows: the band ``(2 k, 4 k]`` (``aim_mult = 2``)
    is sampled at the dense aim's rank; every other row plans as without."""
    k = min(k, n - 1)
    plan, plain = register_plan(n, k, s, 2, dense_min=2), register_plan(n, k, s, 2)
    if not 2 * k < n <= 4 * k:
        assert plan == plain
        return
    assert plan.unsampled == (s == 0)
    if s:
        assert plan.j1 == min(max(dense_aim(k) * s // n, 1), s)


@pytest.mark.parametrize("n", [4097, 6144, 8192])
def test_register_dense_rows_take_the_sampled_path(n):
    """Rows of a 1024 x 8 register CTA without the bracket (the routed K = 2048 shape at
    32,768 scores): unsampled at K = 2048 without dense rows, the first rung with
    k to 2 x 11 k / 8 staged keys with them; the answer's rule stays exact."""
    k = 2048
    plain = RegisterParams(1024, 8, bracket=False)
    p = replace(plain, dense_min=2)
    rng = np.random.default_rng(n)
    for _ in range(10):
        x = rng.standard_normal(n).astype(np.float32)
        assert register_row(x, k, plain).path == Path.UNSAMPLED
        trace = register_row(x, k, p)
        assert trace.path == Path.FIRST
        assert trace.count1 == int((order_key(x) >= trace.t1).sum())
        assert k <= trace.count1 <= 2 * dense_aim(k)
    with pytest.raises(ValueError, match="dense_min"):
        RegisterParams(1024, 8, dense_min=1)
