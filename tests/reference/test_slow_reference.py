"""Long runs: full-width rows of every family through the CPU engine, against the oracle and
the validator, and the oracle at its stated scale.

Optional: they run only when asked for, with ``pytest -m slow`` or ``GVR_SLOW=1``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from gvr_reference import cpu_engine, oracle, validate, workloads

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _only_when_asked(request):
    if "slow" not in (request.config.getoption("markexpr") or "") and not os.environ.get(
        "GVR_SLOW"
    ):
        pytest.skip("slow test: run with -m slow or GVR_SLOW=1")


@pytest.mark.parametrize("family", workloads.family_names())
@pytest.mark.parametrize("k", [512, 2048])
def test_full_width_families(family, k):
    batch = workloads.make_decode_batch(
        k + len(family), batch=8, next_n=2, compress_ratio=1, k=k, width=262_144,
        row_stride=262_400, family=family, lengths="ragged",
    )  # fmt: skip
    got, values = cpu_engine.decode(batch.logits, batch.kv_lens, k, next_n=2, return_values=True)
    np.testing.assert_array_equal(got, batch.reference())
    batch.check(got, values).raise_if_failed()


def test_oracle_and_validator_scale():
    """1,024 rows x 262,144: the oracle in well under a minute, the validator in seconds."""
    x = np.random.default_rng(0).standard_normal((1024, 262_144), dtype=np.float32)
    t0 = time.perf_counter()
    want = oracle.topk_dense(x, 2048)
    t1 = time.perf_counter()
    validate.assert_dense(x, 2048, want)
    t2 = time.perf_counter()
    np.testing.assert_array_equal(cpu_engine.dense(x, 2048), want)
    assert t1 - t0 < 60 and t2 - t1 < 10
