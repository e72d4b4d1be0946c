"""The block-skip CPU model (``gvr_reference.blockskip``): exact on every kind of row whenever
the bounds hold (exact maxima or loose upper bounds), reads few blocks where the winners
cluster, falls back when the bounds say nothing, and the contract check finds a bound that is
too low."""

import numpy as np
import pytest
from gvr_reference.blockskip import (
    BLOCK,
    block_maxima,
    contract_violations,
    simulate_block_skip,
)
from gvr_reference.keys import order_key


def _exact(row, start, n, k, idx):
    keys = order_key(row[start : start + n])
    want = np.sort(keys)[::-1][: min(k, n)]
    got = np.sort(keys[idx])[::-1]
    return idx.size == min(k, n) and np.unique(idx).size == idx.size and np.array_equal(got, want)


def _locality_row(rng, n, sink=64, recent=4096):
    """A sink and a recent window well above gaussian noise (the rows block-skip is for)."""
    x = rng.standard_normal(n).astype(np.float32)
    x[:sink] += 8
    x[-recent:] += 6
    return x


def test_producer_is_the_block_max_with_nan_and_padding():
    x = np.arange(70, dtype=np.float32)[None, :].copy()
    x[0, 40] = np.nan
    m = block_maxima(x)
    assert m.shape == (1, 3)
    assert m[0, 0] == 31 and np.isnan(m[0, 1]) and m[0, 2] == 69
    assert contract_violations(x, m).size == 0


def test_a_bound_too_low_is_caught():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    m = block_maxima(x)
    m[1, 7] = np.nextafter(m[1, 7], np.float32(-np.inf))  # one ulp too low
    m[2, 0] = np.float32(1e30)  # too high is allowed
    assert contract_violations(x, m).tolist() == [[1, 7]]
    x[0, 5] = np.nan  # a NaN needs a NaN bound
    assert [0, 0] in contract_violations(x, m).tolist()
    with pytest.raises(ValueError, match="block_max must have shape"):
        contract_violations(x, m[:, :-1])
    with pytest.raises(ValueError, match="block"):
        block_maxima(x, block=24)


@pytest.mark.parametrize("k", [512, 2048])
def test_locality_rows_are_answered_from_a_few_blocks(k):
    rng = np.random.default_rng(k)
    n = 131072
    for _ in range(4):
        x = _locality_row(rng, n)
        t = simulate_block_skip(x, block_maxima(x[None, :])[0], k)
        assert _exact(x, 0, n, k, t.indices)
        assert t.path == "skip"
        assert t.blocks_read < t.blocks // 4  # far fewer than the row's


@pytest.mark.parametrize("k", [512, 2048])
def test_gaussian_rows_are_exact_whichever_rung(k):
    rng = np.random.default_rng(1 + k)
    for n in (65536, 262144):
        x = rng.standard_normal(n).astype(np.float32)
        t = simulate_block_skip(x, block_maxima(x[None, :])[0], k)
        assert _exact(x, 0, n, k, t.indices)
        if n == 262144:
            # exact maxima of whole blocks: the k-th largest bound leaves k scores, and here
            # they fit the staging (at n = 65536, K = 2048 they may not: then the fallback)
            assert t.path == "skip"


def test_loose_bounds_and_spikes_stay_exact():
    rng = np.random.default_rng(3)
    n, k = 65536, 1024
    x = _locality_row(rng, n, recent=4096)
    loose = block_maxima(x[None, :])[0] + rng.uniform(0, 4, n // BLOCK).astype(np.float32)
    t = simulate_block_skip(x, loose, k)
    assert _exact(x, 0, n, k, t.indices)
    # a spike in every block: every bound equal, so the bounds tell nothing
    s = rng.standard_normal(n).astype(np.float32)
    s[::BLOCK] = 100
    t = simulate_block_skip(s, block_maxima(s[None, :])[0], k)
    assert _exact(s, 0, n, k, t.indices)
    # bounds of +inf everywhere: nothing concluded, the normal path
    t = simulate_block_skip(x, np.full(n // BLOCK, np.inf, np.float32), k)
    assert t.path in ("skip", "fallback") and _exact(x, 0, n, k, t.indices)
    # a staging too small for the candidates falls back, exactly
    t = simulate_block_skip(s, block_maxima(s[None, :])[0], k, capacity=k // 2)
    assert t.path == "fallback" and _exact(s, 0, n, k, t.indices)


def test_prefill_windows_cover_partial_blocks():
    rng = np.random.default_rng(4)
    width, k = 20000, 256
    x = _locality_row(rng, width)
    m = block_maxima(x[None, :])[0]
    for start, n in ((0, 20000), (5, 300), (17, 19983), (1000, 257), (31, 8000), (4000, 100)):
        t = simulate_block_skip(x, m, k, start=start, n=n)
        assert _exact(x, start, n, k, t.indices), (start, n, t.path)
    with pytest.raises(ValueError, match="window"):
        simulate_block_skip(x, m, k, start=19990, n=20)


def test_special_values_keep_the_order_key_rules():
    rng = np.random.default_rng(5)
    n, k = 8192, 64
    x = rng.standard_normal(n).astype(np.float32)
    x[:512] = -0.0
    specials = rng.choice(np.arange(512, n), 80, replace=False)
    x[specials[:40]] = np.nan
    x[specials[40:]] = np.inf
    t = simulate_block_skip(x, block_maxima(x[None, :])[0], k)
    assert _exact(x, 0, n, k, t.indices)
    assert np.isnan(x[t.indices]).sum() == 40  # NaN ranks above +inf
