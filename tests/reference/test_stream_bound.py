"""The streaming pass's one-compare survivor test (``gvr_reference.keys.stream_bound``) equals
the order-key test ``key(x) >= T``: every threshold against every score for the 16-bit
formats, boundaries and random draws for float32; and the sample's vector positions."""

import numpy as np
import pytest
from gvr_reference.keys import KEY_FORMATS, above_bound, format_keys, stream_bound
from gvr_reference.ladder import LadderParams, row_plan, sample_vector


def _every_16bit_value(name):
    pats = np.arange(1 << 16, dtype=np.uint32)
    if name == "bfloat16":
        return (pats << np.uint32(16)).view(np.float32)
    return pats.astype(np.uint16).view(np.float16).astype(np.float32)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_every_16bit_threshold_against_every_16bit_score(name):
    fmt = KEY_FORMATS[name]
    x = _every_16bit_value(name)
    keys = format_keys(x, fmt)
    bad = [t for t in range(1 << 16) if not np.array_equal(above_bound(x, t, fmt), keys >= t)]
    assert bad == []


def test_float32_thresholds_at_every_boundary_and_at_random():
    fmt = KEY_FORMATS["float32"]
    rng = np.random.default_rng(7)
    special = [0, 1, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000,
               0x7FFFFFFF, 0x80000000, 0x80000001, 0x807FFFFF, 0xFF7FFFFF, 0xFF800000,
               0xFF800001, 0xFFC00000, 0xFFFFFFFF]  # fmt: skip
    bits = np.concatenate(
        [
            rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32),
            np.array(special, np.uint32),
        ]  # fmt: skip
    )
    x = bits.view(np.float32)
    keys = format_keys(x, fmt)
    thresholds = {0, 1, 2, 0x007FFFFE, 0x007FFFFF, 0x00800000, 0x7FFFFFFE, 0x7FFFFFFF,
                  0x80000000, 0x80000001, 0x80000002, 0xFF7FFFFF, 0xFF800000, 0xFF800001,
                  0xFFFFFFFE, 0xFFFFFFFF}  # fmt: skip
    thresholds |= set(int(t) for t in keys[:500])
    thresholds |= set(int(t) + 1 for t in keys[:500] if t < 0xFFFFFFFF)
    thresholds |= set(int(t) for t in rng.integers(0, 1 << 32, 500))
    bad = [t for t in sorted(thresholds) if not np.array_equal(above_bound(x, t, fmt), keys >= t)]
    assert bad == []


def test_bound_is_nan_below_every_key_and_inf_above_every_value():
    for fmt in KEY_FORMATS.values():
        assert stream_bound(0, fmt) == fmt.inf_bits + 1  # a NaN: every score passes
        assert stream_bound(fmt.key_neg_inf, fmt) == fmt.inf_bits + 1
        assert stream_bound(fmt.key_pos_inf + 1, fmt) == fmt.inf_bits  # +inf: NaN only
        assert stream_bound(fmt.key_max, fmt) == fmt.inf_bits
        # key(+0.0): the bound is -denorm_min, so both zeros pass
        assert stream_bound(fmt.sign, fmt) == fmt.sign | 1


@pytest.mark.parametrize("vec", [4, 8])
def test_sample_vectors_are_runs_of_four_inside_the_row(vec):
    p = LadderParams(capacity=8192, vec=vec)
    for n in (5000, 8191, 65536, 100_003, 262_144, 1 << 20):
        for k in (1, 512, 2048):
            plan = row_plan(n, k, 0, p)
            if plan.unsampled:
                continue
            v = sample_vector(np.arange(plan.sample_vecs), plan.sample_step)
            assert np.all(np.diff(v) > 0) and v[-1] < plan.nvec
            runs = v[: plan.sample_vecs // 4 * 4].reshape(-1, 4)
            assert np.all(np.diff(runs, axis=1) == 1) and np.all(runs[:, 0] % 4 == 0)
            if plan.sample_step == 1:
                assert np.array_equal(v, np.arange(plan.sample_vecs))
