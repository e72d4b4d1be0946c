"""Wall-clock time per call, for the demo's side-by-side numbers (not a benchmark: warm L2,
few repetitions, host overhead included)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

__all__ = ["time_per_call"]


def time_per_call(fn: Callable[[], object], reps: int, device: torch.device) -> float:
    """Seconds per call of ``reps`` back-to-back calls of ``fn``.

    On CUDA the device is synchronised before and after the batch, so the figure covers host
    launch overhead and device time together.
    """
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / max(reps, 1)
