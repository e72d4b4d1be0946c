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

**The bracket path** (configurations built with ``bracket``; the register family's bracket,
spread over the cluster). The bracket's ends are reduced over the cluster: the row's largest
key and the low key (the smallest of window positions ``[0, k)``, raised to the smallest of
the maxima of ``k`` or more groups of lanes when they hold a score, :func:`bracket_low`),
and so is the crowd key of every warp's sample
(:func:`gvr_reference.register_model.crowd_key`, tested against the bracket by
:func:`gvr_reference.register_model.crowd_harms`). Every CTA maps its scores onto the
same ``BRACKET_BINS`` bins (:func:`gvr_reference.register_model.bracket_bins`) and sends a
copy of its counts of each slice to the slice's owner (CTA ``b // (BRACKET_BINS /
cluster)``), and its partial totals to every CTA; every CTA finds the crossing slice from the
totals, and its owner, summing the copies, finds the crossing bin and sends its counts to
every CTA. Every CTA writes its keys of
higher bins at once; the crossing bin is written whole when all of it is needed
(``BRACKET``), else gathered to the leader and ranked by one warp (``BRACKET_RANK``, at most
``RANK_MAX`` keys) or narrowed (``BRACKET_NARROW``); a crossing bin larger than the staging
takes the whole-row selection from global memory over the keys at or above the bracket's low
end (``BRACKET_OVERFLOW``). The other rows of a bracket configuration (an end not finite, a
crowd of the sample in or just below the bracket) take the sampled path above.

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

from .keys import format_keys, key_format, order_key
from .model import Path, RowTrace
from .register_model import (
    VectorLayout,
    bracket,
    bracket_trace,
    crowd_harms,
    crowd_key,
    register_plan,
    sampled_trace,
    trace_windows,
)

__all__ = [
    "CLUSTER_SIZES",
    "ClusterParams",
    "bracket_low",
    "group_lanes",
    "thread_sample",
    "sample_positions",
    "simulate_row",
    "simulate_windows",
    "bracket_forced_rows",
]

#: Cluster sizes the family is built for: 8 is the portable maximum on sm_90; 16 is a
#: non-portable size (the CuTe DSL marks every kernel as allowing one; whether a GPU can
#: schedule it is the driver's occupancy query, so the router uses it only on devices whose
#: ``DeviceSpec.max_cluster_size`` says so).
CLUSTER_SIZES = (2, 4, 8, 16)


@dataclass(frozen=True)
class ClusterParams(VectorLayout):
    """Compile-time facts of a cluster-register configuration.

    Attributes:
        cluster: CTAs per row (one thread-block cluster).
        threads: CTA size (a multiple of 32).
        vecs: 16-byte vectors each thread holds.
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: the leader's staging entries.
        bracket: rows take the bracket path where it applies (False: always sampled).
        dtype: the logits format: ``vec`` scores a 16-byte vector (4 float32, 8 bfloat16 /
            float16); as in ``gvr_reference.register_model``, the bracket reads the float32
            widening and the sampled path works in the format's key space.
    """

    cluster: int
    threads: int
    vecs: int
    aim_mult: int = 2
    capacity: int = 16384
    bracket: bool = False
    dtype: str = "float32"

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
        key_format(self.dtype)

    @property
    def cta_vecs(self) -> int:
        """Vectors one CTA holds."""
        return self.threads * self.vecs

    @property
    def max_n(self) -> int:
        """Longest row the cluster holds at any window misalignment (``(lead + n) // vec``
        whole vectors fit, the fewer than ``vec`` scores after them are the tail)."""
        return self.vec * self.cluster * self.cta_vecs

    @property
    def sample_slots(self) -> int:
        """Sample slots of a row (one per thread of the cluster)."""
        return self.cluster * self.threads


def _thread_slots(n: int, lead: int, p: ClusterParams):
    """Window positions of every held slot, ``[cluster, threads, vec * vecs]``, and whether
    each lies in the window."""
    vec = p.vec
    r = np.arange(p.cluster, dtype=np.int64)[:, None, None]
    t = np.arange(p.threads, dtype=np.int64)[None, :, None]
    slot = np.arange(vec * p.vecs, dtype=np.int64)[None, None, :]
    v = r * p.cta_vecs + t + (slot // vec) * p.threads
    pos = vec * v + slot % vec - lead
    return pos, (v < p.whole_vectors(n, lead)) & (pos >= 0)


def group_lanes(k: int, p: ClusterParams) -> int:
    """Lanes per group of the bracket's low end: the largest power of two ``g <= 32`` with
    ``g * k`` at most the cluster's threads (1 when ``k`` exceeds half of them)."""
    g = 1
    while g < 32 and 2 * g * k <= p.cluster * p.threads:
        g *= 2
    return g


def bracket_low(keys: np.ndarray, k: int, lead: int, p: ClusterParams) -> int:
    """The bracket's low key for a row of window keys (``n = keys.size > k``): the smallest
    key of positions ``[0, k)``, or, where that is higher and at least ``k`` groups hold a
    score, the smallest of the group maxima. A group is ``g`` (:func:`group_lanes`)
    consecutive lanes of a warp; it holds a score when its first thread does (thread ``t``
    of CTA ``r`` holds one when its first vector ``r V + t`` is whole, so a CTA's holding
    threads are a prefix); its maximum is over the scores its threads hold (the last CTA's
    warp 0 also holds the tail). Group maxima are distinct scores, so at least ``k`` keys are
    ``>= lo`` either way, and ``k`` groups of ``g`` threads give a far higher bound than
    ``k`` single threads (``gvr_reference.register_model.bracket_low``)."""
    n = keys.shape[0]
    lo = int(keys[:k].min())
    nvec = p.whole_vectors(n, lead)
    g = group_lanes(k, p)
    r = np.arange(p.cluster, dtype=np.int64)[:, None]
    t = np.arange(p.threads, dtype=np.int64)[None, :]
    holds = (r * p.cta_vecs + t < nvec) & (t % g == 0)
    if int(holds.sum()) < k:
        return lo
    pos, valid = _thread_slots(n, lead, p)
    tk = np.where(valid, keys[np.where(valid, pos, 0)], 0).astype(np.int64).max(axis=2)
    tail = nvec * p.vec - lead + np.arange(32)
    has = tail < n
    tk[-1, :32] = np.maximum(tk[-1, :32], np.where(has, keys[np.where(has, tail, 0)], 0))
    gk = np.repeat(tk.reshape(p.cluster, p.threads // g, g).max(axis=2), g, axis=1)
    return max(lo, int(gk[holds].min()))


def thread_sample(keys: np.ndarray, lead: int, p: ClusterParams) -> np.ndarray:
    """Each thread's sample key (uint32 ``[cluster * threads]``, CTA by CTA in thread order;
    0 where its slot lies outside the window)."""
    n = keys.shape[0]
    t = np.arange(p.threads, dtype=np.int64)
    r = np.arange(p.cluster, dtype=np.int64)[:, None]
    v = r * p.cta_vecs + t + (t % p.vecs) * p.threads
    pos = (p.vec * v + (t // p.vecs) % p.vec - lead).ravel()
    valid = (v.ravel() < p.whole_vectors(n, lead)) & (pos >= 0)
    return np.where(valid, keys[np.where(valid, pos, 0)], 0).astype(np.uint32)


def sample_positions(n: int, lead: int, p: ClusterParams) -> np.ndarray:
    """Window positions of the valid sample slots, CTA by CTA in thread order."""
    t = np.arange(p.threads, dtype=np.int64)
    j = t % p.vecs
    q = (t // p.vecs) % p.vec
    r = np.arange(p.cluster, dtype=np.int64)[:, None]
    v = r * p.cta_vecs + t + j * p.threads
    pos = (p.vec * v + q - lead).ravel()
    v = np.broadcast_to(v, (p.cluster, p.threads)).ravel()
    return pos[(v < p.whole_vectors(n, lead)) & (pos >= 0)]


def simulate_row(values: np.ndarray, k: int, p: ClusterParams, lead: int = 0) -> RowTrace:
    """Predict the cluster-register kernel's path for one row.

    Args:
        values: float32 ``[n]``, the row's valid window (for a 16-bit ``p.dtype``, values of
            that format).
        k: top-K size.
        p: the configuration.
        lead: window start modulo ``p.vec`` (prefill rows); decode rows use 0.

    Returns:
        The :class:`gvr_reference.model.RowTrace`. Bracket paths: ``t1`` is the bracket's
        low key and ``count1`` the crossing bin's size; sampled paths: the rung, its
        survivor count, the sample size and rank, and the keys equal to a crowded rung.
    """
    n = int(values.shape[0])
    if n <= k:
        return RowTrace(Path.SHORT, n)
    if not 1 <= p.whole_vectors(n, lead) <= p.cluster * p.cta_vecs:
        return RowTrace(Path.WHOLE_ROW, n)
    values = np.ascontiguousarray(values, dtype=np.float32)
    keys = order_key(values)  # the bracket reads the float32 widening
    br = bracket(bracket_low(keys, k, lead, p), int(keys.max())) if p.bracket else None
    if br is not None and not crowd_harms(crowd_key(thread_sample(keys, lead, p)), br, p.dtype):
        return bracket_trace(keys, br, k, p.capacity)
    pos = sample_positions(n, lead, p)
    plan = register_plan(n, k, int(pos.size), p.aim_mult)
    if plan.unsampled:
        path = Path.UNSAMPLED if n <= p.capacity else Path.RESCUE_OVERFLOW
        return RowTrace(path, n, t1=1, count1=n)
    fmt = key_format(p.dtype)
    return sampled_trace(format_keys(values, fmt), pos, k, plan.j1, p.capacity, fmt.key_max)


def simulate_windows(
    logits: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, p: ClusterParams
) -> list[RowTrace]:
    """:func:`simulate_row` for every row of a batch (windows as in ``gvr_reference.model``)."""
    return trace_windows(simulate_row, logits, starts, lengths, k, p)


def bracket_forced_rows(
    g: np.random.Generator, p: ClusterParams, k: int, width: int, per_kind: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode rows built to reach every path of a bracket configuration (and the sampled
    paths its rows fall back to), for tests: ``(logits [rows, width] float32, kv_lens int32,
    kind per row)``. Kinds: 0 gaussian (a small crossing bin, ranked; lengths ``max_n - i %
    4``, so the last CTA holds a tail; the third of them with 30% of its scores ``0.0``, a
    crowd of the sample far below the bracket, as the zeros of a ReLU-weighted indexer row:
    still the bracket), 1 ``k`` outliers far above the rest (the crossing bin
    wanted whole), 2 ``capacity * 3 // 4`` consecutive floats at 3.0 (a crossing bin narrowed),
    3 ``6 * capacity`` of them and one score of ``1e6`` (a crossing bin larger than the
    staging; kinds 2 and 3 plant at most ``max_n - 1`` scores, so kind 3 overflows the
    staging only with ``capacity < max_n - 1``: the tests pass ``capacity=2048``), 4 a tie
    class of 30% of the row (a crowded sample: the sampled path), 5 a NaN, 6 a ``+inf`` (an end not
    finite), 7 short rows, 8 rows longer than the cluster holds, 9 ``k - 10`` outliers above a
    run of 20 consecutive floats at 50.0 (a crossing bin of 20 keys, 10 of them wanted:
    ranked). ``width`` must be at least ``max_n + 8``; ``k >= 10``.

    For a 16-bit ``p.dtype`` (rows rounded to the format; runs of consecutive 16-bit values
    span octaves, so the runs are value intervals instead): kinds 2 and 3 put their scores
    uniformly in ``[20, 21)`` below one score of ``6e4``, which makes the bins about 29 wide
    and leaves the run alone in its bin; kind 9's run is 20 copies of ``50.0``."""
    from .keys import key_format, round_to_format

    half = p.dtype != "float32"
    kinds = 10
    rows = kinds * per_kind
    n = p.max_n
    x = g.standard_normal((rows, width)).astype(np.float32)
    kv = np.full(rows, n, np.int32)
    kind = np.arange(rows) % kinds
    for r in range(rows):
        i = r // kinds
        if kind[r] == 0:
            kv[r] = n - i % 4
            if i == 2:
                x[r, g.random(width) < 0.3] = 0.0
        elif kind[r] == 1:
            at = g.choice(n, k, replace=False)
            x[r, at] = 100.0 + np.arange(k, dtype=np.float32) / 1024
        elif kind[r] in (2, 3) and half:
            m = min(p.capacity * 3 // 4 if kind[r] == 2 else 6 * p.capacity, n - 1)
            at = g.choice(n, m + 1, replace=False)
            x[r, at[:m]] = 20.0 + g.random(m, dtype=np.float32)
            x[r, at[m]] = 6.0e4
        elif kind[r] in (2, 3):
            m = min(p.capacity * 3 // 4 if kind[r] == 2 else 6 * p.capacity, n - 1)
            run = np.float32(3.0).view(np.int32) + np.arange(m, dtype=np.int32)
            at = g.choice(n, m + 1, replace=False)
            x[r, at[:m]] = run.view(np.float32)
            if kind[r] == 3:  # a bracket far wider than the run: the run in one bin
                x[r, at[m]] = 1.0e6
        elif kind[r] == 4:
            x[r, g.random(width) < 0.3] = 2.5
        elif kind[r] == 5:
            x[r, g.integers(n)] = np.nan
        elif kind[r] == 6:
            x[r, g.integers(n)] = np.inf
        elif kind[r] == 7:
            kv[r] = [k - 1, k, 0, 1][i % 4]
        elif kind[r] == 8:
            kv[r] = width - i % 4
        else:
            at = g.choice(n, k + 10, replace=False)
            x[r, at[: k - 10]] = 100.0 + np.arange(k - 10, dtype=np.float32) / 1024
            run = np.float32(50.0).view(np.int32) + np.arange(20, dtype=np.int32)
            x[r, at[k - 10 : k + 10]] = 50.0 if half else run.view(np.float32)
    if half:
        x = round_to_format(x, key_format(p.dtype))
    return x, kv, kind
