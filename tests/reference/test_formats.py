"""The 16-bit score formats of the reference: keys, rounding, the ladder's 8-score vectors, the
CPU model's 16-bit key space and the workloads' dtype option."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference.keys import (
    KEY_FORMATS,
    format_bits,
    format_keys,
    key_format,
    order_key,
    round_to_format,
)
from gvr_reference.ladder import LadderParams, row_plan
from gvr_reference.model import ModelConfig, Path, simulate_row
from gvr_reference.workloads import make_decode_batch, make_prefill_batch

torch = pytest.importorskip("torch")
HALF = ("bfloat16", "float16")


def _every_value(name):
    """Every 16-bit pattern of the format, widened to float32 by torch."""
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    return bits.view(getattr(torch, name)).float().numpy()


@pytest.mark.parametrize("name", HALF)
def test_16bit_keys_order_exactly_as_the_widened_float32_keys(name):
    fmt = key_format(name)
    x = _every_value(name)
    k16 = format_keys(x, fmt).astype(np.int64)
    k32 = order_key(x).astype(np.int64)
    assert k16.min() >= 0 and k16.max() == fmt.key_max == 0xFFFF
    o = np.argsort(k32, kind="stable")
    a, b = k32[o], k16[o]
    # strictly the same order: equal float32 keys <=> equal 16-bit keys, and monotone
    assert np.all(np.diff(b) >= 0)
    assert np.array_equal(np.diff(a) == 0, np.diff(b) == 0)
    nan = np.isnan(x)
    assert np.all(k16[nan] == fmt.key_max) and np.all(k16[~nan] < fmt.key_max)
    assert format_keys(np.float32([-np.inf]), fmt)[0] == fmt.key_neg_inf == k16[~nan].min()
    assert format_keys(np.float32([np.inf]), fmt)[0] == fmt.key_pos_inf
    assert format_keys(np.float32([-0.0, 0.0]), fmt).tolist() == [fmt.sign, fmt.sign]
    # the raw bits come back for every non-NaN pattern
    pat = np.arange(1 << 16, dtype=np.uint32)
    assert np.array_equal(format_bits(x, fmt)[~nan], pat[~nan])


@pytest.mark.parametrize("name", HALF)
def test_rounding_matches_torch_and_rejects_other_values(name):
    fmt = key_format(name)
    g = np.random.default_rng(1)
    x = np.concatenate(
        [
            g.standard_normal(20000).astype(np.float32) * 10.0 ** g.integers(-8, 8, 20000),
            np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.3e38, -3.3e38, 1e-40, 65519.0]),
        ]
    ).astype(np.float32)
    want = torch.from_numpy(x).to(getattr(torch, name)).float().numpy()
    got = round_to_format(x, fmt)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all()
    with pytest.raises(ValueError, match=f"not {name} values"):
        format_bits(np.float32([1.0 + 2.0**-20]), fmt)
    with pytest.raises(TypeError, match="float32"):
        format_keys(np.float64([1.0]), fmt)
    assert set(KEY_FORMATS) == {"float32", "bfloat16", "float16"}
    with pytest.raises(ValueError, match="dtype must be one of"):
        key_format("float64")


@pytest.mark.parametrize("n", [2049, 4096, 10007, 262144, 262151])
@pytest.mark.parametrize("lead", [0, 3, 7])
def test_ladder_vectors_of_eight_cover_the_window(n, lead):
    p = LadderParams(capacity=16384, vec=8)
    plan = row_plan(n, 512, lead, p)
    assert plan.nvec == (lead + n) // 8 and plan.tail_start == max(plan.nvec * 8 - lead, 0)
    assert 0 <= n - plan.tail_start < 8
    assert plan.sample_vecs * 8 <= p.sample_max and plan.sample_vecs <= max(plan.nvec, 1)
    with pytest.raises(ValueError, match="vec must be 4 or 8"):
        LadderParams(capacity=16, vec=2)


@pytest.mark.parametrize("name", HALF)
def test_model_narrows_the_16bit_key_space(name):
    """A gaussian row takes the first rung; a row whose rung is a bf16/fp16 tie class (common
    in 16-bit scores) takes the tie path, which the float32 model of the same widened row
    needs a finer key space to see the same way."""
    fmt = key_format(name)
    mcfg = ModelConfig(LadderParams(capacity=16384, aim_mult=2, vec=8), dtype=name)
    g = np.random.default_rng(2)
    x = round_to_format(g.standard_normal(131072).astype(np.float32), fmt)
    t = simulate_row(x, 2048, mcfg)
    assert t.path == Path.FIRST and t.t1 <= fmt.key_max and t.count1 >= 2048
    crowd = x.copy()
    crowd[g.random(131072) < 0.4] = 2.5
    t = simulate_row(crowd, 2048, mcfg)
    assert t.path == Path.TIE and t.crowded and t.t1 == format_keys(np.float32([2.5]), fmt)[0]


@pytest.mark.parametrize("name", HALF)
def test_workloads_round_to_the_dtype(name):
    fmt = key_format(name)
    b = make_decode_batch(3, batch=4, k=64, width=3000, family="gaussian", dtype=name)
    assert b.dtype == name
    format_bits(np.ascontiguousarray(b.arena), fmt)  # raises unless every score is a value
    p = make_prefill_batch(4, rows=5, k=64, width=2001, family="nan", dtype=name)
    format_bits(np.ascontiguousarray(p.arena), fmt)
    assert b.check(b.reference()).ok
    idx, val = b.reference(return_values=True)
    assert b.check(idx, val).ok
    pad = np.uint32(fmt.neg_max_widened_bits).view(np.float32)
    assert np.all(val[idx < 0] == pad)
    assert float(pad) == float(torch.finfo(getattr(torch, name)).min)
    # a float32 pad where the format's is due is a values_padding failure
    bad = np.where(idx < 0, np.finfo(np.float32).min, val).astype(np.float32)
    if (idx < 0).any():
        assert "values_padding" in str(b.check(idx, bad).summary())


@pytest.mark.parametrize("name", HALF)
def test_16bit_natural_ties_are_not_a_crowd(name):
    """16-bit rows tie everywhere (a gaussian fp16 row of 262,144 scores holds about a dozen
    copies of each value near its top): two sample keys sharing the rung's key do not make it
    crowded unless the class they show fills half the staging (``crowd_min_ties``), while a
    real crowd does; float32 keeps two."""
    from gvr_reference.model import crowd_min_ties

    fmt = key_format(name)
    p = LadderParams(capacity=8192, aim_mult=2, vec=8)
    mcfg = ModelConfig(p, dtype=name)
    assert crowd_min_ties(262144, 2048, 8192, 16) == 32 and crowd_min_ties(10, 2048, 8192) == 2
    g = np.random.default_rng(4)
    paths = []
    for _ in range(6):
        x = round_to_format(g.standard_normal(262144).astype(np.float32), fmt)
        paths.append(simulate_row(x, 2048, mcfg).path)
    assert Path.TIE not in paths and paths.count(Path.FIRST) >= 5
    x[g.random(262144) < 0.2] = 2.75
    t = simulate_row(x, 2048, mcfg)
    assert t.crowded and t.path == Path.TIE
