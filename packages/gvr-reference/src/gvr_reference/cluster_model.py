"""The cluster-register GVR kernel family: its per-row decisions and a CPU model of them.

A cluster-register kernel spreads one row over a thread-block cluster of ``cluster`` CTAs:
CTA ``r`` holds the row's vectors ``[r V, (r + 1) V)`` (``V = threads * vecs``) in its
registers, the last CTA also the 0-3 tail scores, so the row is read exactly once and no
CTA writes global memory before the answer. Per row:

1. **Sample.** Every thread of every CTA contributes one of its own scores (slot ``(j, q)``,
   ``j = t % vecs``, ``q = (t // vecs) % 4`` of vector ``r V + t + j * threads``): a sample
   of ``cluster * threads`` slots spread uniformly over the whole row at no memory cost. Each
   CTA writes its slots into every CTA's shared memory (DSMEM), so after one cluster barrier
   every CTA holds the same sample, the valid-slot count ``s`` and (the leader) the row's
   largest key.
2. **Rung.** Every CTA runs the same radix narrowing over the same sample keys (range
   ``[1, KEY_MAX]``), so all agree on ``T`` with ``j1 <= #(sample >= T) <= 2 j1``,
   ``j1 = aim * s / n`` without exchanging it (:func:`gvr_reference.register_model.register_plan`;
   rows with ``n <= 2 aim`` take ``T = 1``, ``UNSAMPLED``). A rung on one key shared by at
   least two sample keys (:func:`gvr_reference.model.crowded_rung`) stages the keys *above*
   it and counts the keys equal to it.
3. **Gather.** Every CTA appends its keys ``>= T`` (and their positions) to the leader's
   (rank 0) staging through DSMEM, one remote atomic per warp for the slots; every key is
   counted, none written past the capacity. One more cluster barrier, and the leader holds
   every survivor of the row.
4. **Select** (the leader alone). ``k <= count <= capacity`` (``FIRST``, or ``UNSAMPLED``):
   radix narrowing over the staged keys and one emission. Crowded with
   ``count < k <= count + eq`` (``TIE``): the staged keys, then the first ``k - count`` keys
   equal to ``T`` by an in-order scan of the row. Otherwise (``RESCUE_OVERFLOW``,
   ``RESCUE_UNDERESTIMATE``) the exact whole-row radix selection of the streaming family,
   reading the row from global memory (over the keys ``>= T`` on an overflow).

A row longer than the cluster holds (an envelope below the row), or with no whole vector,
takes the whole-row selection on the leader (``WHOLE_ROW``). Exactness never depends on
the sample or the capacity: the gather holds every key ``>= T`` or the leader knows it does
not (the count runs past the capacity), and the staged keys contain the answer whenever
``count >= k`` (invariants I1-I7 of ``docs/kernels.md``, restated there for this family).

Source of the idea (a row read once into the registers of a cluster, the threshold agreed
through DSMEM): the cluster-register kernels of TensorRT-LLM's GVR V2 top-K; the
redundant rung (each CTA narrows the same gathered sample), the gather into one staging and
the fallbacks are this library's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keys import order_key
from .model import Path, RowTrace
from .register_model import register_plan, sampled_trace, trace_windows

__all__ = [
    "CLUSTER_SIZES",
    "ClusterParams",
    "sample_positions",
    "simulate_row",
    "simulate_windows",
]

#: Cluster sizes the family is built for (8 is the portable maximum on sm_90).
CLUSTER_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class ClusterParams:
    """Compile-time facts of a cluster-register configuration.

    Attributes:
        cluster: CTAs per row (one thread-block cluster).
        threads: CTA size (a multiple of 32).
        vecs: 16-byte vectors each thread holds.
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: the leader's staging entries.
    """

    cluster: int
    threads: int
    vecs: int
    aim_mult: int = 2
    capacity: int = 16384

    def __post_init__(self) -> None:
        if self.cluster not in CLUSTER_SIZES:
            raise ValueError(f"cluster must be one of {CLUSTER_SIZES}, got {self.cluster}")
        if self.threads < 32 or self.threads % 32:
            raise ValueError(f"threads must be a positive multiple of 32, got {self.threads}")
        if self.vecs < 1:
            raise ValueError(f"vecs must be >= 1, got {self.vecs}")
        if self.aim_mult < 1:
            raise ValueError(f"aim_mult must be >= 1, got {self.aim_mult}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")

    @property
    def cta_vecs(self) -> int:
        """Vectors one CTA holds."""
        return self.threads * self.vecs

    @property
    def max_n(self) -> int:
        """Longest row the cluster holds at any window misalignment (``(lead + n) >> 2``
        whole vectors fit, the 0-3 scores after them are the tail)."""
        return 4 * self.cluster * self.cta_vecs

    @property
    def sample_slots(self) -> int:
        """Sample slots of a row (one per thread of the cluster)."""
        return self.cluster * self.threads


def sample_positions(n: int, lead: int, p: ClusterParams) -> np.ndarray:
    """Window positions of the valid sample slots, CTA by CTA in thread order."""
    t = np.arange(p.threads, dtype=np.int64)
    j = t % p.vecs
    q = (t // p.vecs) % 4
    r = np.arange(p.cluster, dtype=np.int64)[:, None]
    v = r * p.cta_vecs + t + j * p.threads
    pos = (4 * v + q - lead).ravel()
    v = np.broadcast_to(v, (p.cluster, p.threads)).ravel()
    return pos[(v < (lead + n) >> 2) & (pos >= 0)]


def simulate_row(values: np.ndarray, k: int, p: ClusterParams, lead: int = 0) -> RowTrace:
    """Predict the cluster-register kernel's path for one row.

    Args:
        values: float32 ``[n]``, the row's valid window.
        k: top-K size.
        p: the configuration.
        lead: window start modulo 4 (prefill rows); decode rows use 0.

    Returns:
        The :class:`gvr_reference.model.RowTrace` (the rung, its survivor count, the sample
        size and rank, and the keys equal to a crowded rung).
    """
    n = int(values.shape[0])
    if n <= k:
        return RowTrace(Path.SHORT, n)
    if not 1 <= (lead + n) >> 2 <= p.cluster * p.cta_vecs:
        return RowTrace(Path.WHOLE_ROW, n)
    keys = order_key(np.ascontiguousarray(values, dtype=np.float32))
    pos = sample_positions(n, lead, p)
    plan = register_plan(n, k, int(pos.size), p.aim_mult)
    if plan.unsampled:
        path = Path.UNSAMPLED if n <= p.capacity else Path.RESCUE_OVERFLOW
        return RowTrace(path, n, t1=1, count1=n)
    return sampled_trace(keys, pos, k, plan.j1, p.capacity)


def simulate_windows(
    logits: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, p: ClusterParams
) -> list[RowTrace]:
    """:func:`simulate_row` for every row of a batch (windows as in ``gvr_reference.model``)."""
    return trace_windows(simulate_row, logits, starts, lengths, k, p)
