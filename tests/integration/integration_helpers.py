"""Shared pieces of the integration tests: devices, seeds, workload transfer, checks.

Every answer is checked by the CPU validator of ``gvr_reference`` on fresh random inputs (the
seed is printed; replay a run with ``GVR_TEST_SEED``), with ``+3e38`` poison beyond every
valid window, so any read outside a row's window corrupts the answer.
"""

from __future__ import annotations

import os
import time
import zlib

import numpy as np
import pytest
import torch

SEED = int(os.environ.get("GVR_TEST_SEED", time.time_ns() % (1 << 31)))

#: Each device-parametrized test runs on the CPU engine, and on the kernels where a GPU is.
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]

NEG_FLT_MAX = float(np.finfo(np.float32).min)


def rng(*salt) -> np.random.Generator:
    """A generator seeded by the run's seed and the test's salt."""
    return np.random.default_rng([SEED, *(zlib.crc32(str(s).encode()) for s in salt)])


def tensor(a, device, dtype=None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    if dtype is not None:
        t = t.to(dtype)
    return t.to(device)


def logits_of(batch, device) -> torch.Tensor:
    """The batch's arena on ``device`` and the ``[rows, width]`` view with its row stride."""
    return tensor(batch.arena, device)[:, : batch.width]


def check(batch, indices: torch.Tensor, values: torch.Tensor | None = None) -> None:
    """Validate an answer for a workload batch; raise with the validator's summary."""
    v = None if values is None else values.cpu().numpy()
    report = batch.check(indices.cpu().numpy(), v)
    assert report.ok, f"seed {SEED}\n{report.summary()}"
