"""The register-resident GVR kernel family: its per-row plan and a CPU model of its decisions.

A register-resident kernel holds a whole row in the registers of one CTA (``threads`` threads,
``vecs`` 16-byte vectors each, plus up to three tail scores on warp 0), so it reads the row
exactly once and never stages survivors. Per row:

1. **Sample.** Every thread contributes one of its own scores, from slot ``(j, q)`` with
   ``j = t % vecs`` and ``q = (t // vecs) % 4`` (vector ``t + j * threads``): a sample spread
   over the whole row at no memory cost. Slots outside the window do not count.
2. **Rung.** Radix narrowing over the valid sample keys (range ``[1, KEY_MAX]``) finds ``T``
   with ``j1 <= #(sample >= T) <= 2 j1``, ``j1 = aim * s / n`` (``s`` valid sample keys,
   ``aim = aim_mult * k``). Rows with ``n <= 2 aim`` skip it (``T = 1``).
3. **Stage.** The keys ``>= T`` (and their positions) go to a shared-memory staging buffer of
   ``capacity`` entries; all of them are counted (``count``), even past the capacity.
4. **Select.** ``k <= count <= capacity`` (``FIRST``): radix narrowing over the staged keys in
   ``[T, max key]``. Otherwise the registers themselves are the candidates:
   ``count > capacity`` (``RESCUE_OVERFLOW``) over ``[T, max key]``, ``count < k``
   (``RESCUE_UNDERESTIMATE``) or an unsampled row (``UNSAMPLED``) over ``[1, max key]``.
   Each gives the exact rule "keys above ``thr`` plus ``need_eq`` keys equal to it", then one
   emission pass over the same candidates.
5. **Crowded rung** (:func:`gvr_reference.model.crowded_rung`: the sample narrowing ended on
   one key that at least two sample keys share): the staging takes the keys *above* ``T``
   and the keys equal to ``T`` are counted. With ``count < k <= count + eq`` (``TIE``) the
   rule is known without any narrowing (``thr = T``, ``need_eq = k - count``) and one
   emission pass over the registers writes it; otherwise the paths above, over the keys
   above ``T``.

Since every score stays in a register, no fallback reads the row again: exactness never
depends on the sample or the capacity (they only decide how many candidates the selection
walks). A row longer than the registers hold (only when the caller's envelope is below the
row) takes the exact whole-row radix selection of the streaming family, reading from global
memory (``WHOLE_ROW``).

:func:`register_plan` is the integer formula shared by the kernel (traced with the device
``ops``) and :func:`simulate_row`; the paths are :class:`gvr_reference.model.Path` codes
(``SHORT``, ``UNSAMPLED``, ``FIRST``, ``TIE``, ``RESCUE_UNDERESTIMATE``,
``RESCUE_OVERFLOW``, ``WHOLE_ROW``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .keys import order_key
from .ladder import PY_OPS
from .model import Path, RowTrace, crowded_rung, rung_with_ties

__all__ = [
    "RegisterParams",
    "RegisterPlan",
    "register_plan",
    "sample_positions",
    "simulate_row",
    "simulate_windows",
]


@dataclass(frozen=True)
class RegisterParams:
    """Compile-time facts of a register-resident configuration.

    Attributes:
        threads: CTA size (a multiple of 32).
        vecs: 16-byte vectors each thread holds.
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: staging entries for the keys at or above the rung.
    """

    threads: int
    vecs: int
    aim_mult: int = 2
    capacity: int = 8192

    def __post_init__(self) -> None:
        if self.threads < 32 or self.threads % 32:
            raise ValueError(f"threads must be a positive multiple of 32, got {self.threads}")
        if self.vecs < 1:
            raise ValueError(f"vecs must be >= 1, got {self.vecs}")
        if self.aim_mult < 1:
            raise ValueError(f"aim_mult must be >= 1, got {self.aim_mult}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")

    @property
    def max_n(self) -> int:
        """Longest row the CTA holds at any window misalignment: ``(lead + n) >> 2`` whole
        vectors fit the ``threads * vecs`` held, and the 0-3 scores after them are the tail."""
        return 4 * self.threads * self.vecs


@dataclass(frozen=True)
class RegisterPlan:
    """What a row decides from its length and its valid sample count.

    Attributes:
        unsampled: no rung (``T = 1``).
        j1: sample rank (from the top, 1-based) of the rung (meaningful when sampled).
    """

    unsampled: Any
    j1: Any


def register_plan(n: Any, k: Any, s_valid: Any, aim_mult: int, ops: Any = PY_OPS) -> RegisterPlan:
    """The rung plan of one row (integer arithmetic; ``ops`` as in ``gvr_reference.ladder``).

    Args:
        n: valid row length, ``k < n``.
        k: top-K size.
        s_valid: valid sample keys of the row.
        aim_mult: compile-time aim multiplier.
    """
    aim = k * aim_mult
    unsampled = (n <= aim * 2) | (s_valid == 0)
    j1 = ops.min(ops.max((aim * s_valid) // ops.max(n, 1), 1), ops.max(s_valid, 1))
    return RegisterPlan(unsampled=unsampled, j1=j1)


def sample_positions(n: int, lead: int, p: RegisterParams) -> np.ndarray:
    """Window positions of the valid sample slots, in thread order."""
    t = np.arange(p.threads, dtype=np.int64)
    j = t % p.vecs
    q = (t // p.vecs) % 4
    v = t + j * p.threads
    pos = 4 * v + q - lead
    nvec = (lead + n) >> 2
    return pos[(v < nvec) & (pos >= 0)]


def simulate_row(values: np.ndarray, k: int, p: RegisterParams, lead: int = 0) -> RowTrace:
    """Predict the register-resident kernel's path for one row.

    Args:
        values: float32 ``[n]``, the row's valid window (``n <= p.max_n``).
        k: top-K size.
        p: the configuration.
        lead: window start modulo 4 (prefill rows); decode rows use 0.

    Returns:
        The :class:`gvr_reference.model.RowTrace` (``t1``/``count1``: the rung and its count).
    """
    n = int(values.shape[0])
    if n <= k:
        return RowTrace(Path.SHORT, n)
    if (lead + n) >> 2 > p.threads * p.vecs:
        # Longer than the registers hold (an envelope below the row): exact radix selection
        # over the row read from global memory.
        return RowTrace(Path.WHOLE_ROW, n)
    keys = order_key(np.ascontiguousarray(values, dtype=np.float32))
    pos = sample_positions(n, lead, p)
    plan = register_plan(n, k, int(pos.size), p.aim_mult)
    if plan.unsampled:
        return RowTrace(Path.UNSAMPLED, n, t1=1, count1=n)
    t1, _, ties = rung_with_ties(keys[pos], plan.j1, lo=1)
    crowded = crowded_rung(t1, ties)
    eq1 = int(np.count_nonzero(keys == t1)) if crowded else 0
    count1 = int(np.count_nonzero(keys > t1 if crowded else keys >= t1))
    if count1 > p.capacity:
        path = Path.RESCUE_OVERFLOW
    elif count1 >= k:
        path = Path.FIRST
    elif count1 + eq1 >= k:
        path = Path.TIE
    else:
        path = Path.RESCUE_UNDERESTIMATE
    return RowTrace(
        path, n, t1=t1, count1=count1, sample_size=int(pos.size), j1=plan.j1, eq1=eq1,
        crowded=crowded,
    )  # fmt: skip


def simulate_windows(
    logits: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, p: RegisterParams
) -> list[RowTrace]:
    """:func:`simulate_row` for every row of a batch (windows as in ``gvr_reference.model``)."""
    traces = []
    for r in range(logits.shape[0]):
        s, n = int(starts[r]), int(lengths[r])
        traces.append(simulate_row(logits[r, s : s + n], k, p, lead=s & 3))
    return traces
