"""The per-row ladder of the streaming GVR kernel: one integer formula set for host and device.

Everything a row decides before its streaming pass (how it is cut into 16-byte vectors, whether
it is sampled, where the sample sits, which sample ranks become the threshold rungs) is a pure
function of the row length ``n``, the window misalignment ``lead`` and compile-time parameters.
The same Python source runs in three places:

- :mod:`gvr_reference.model` (the CPU model of the algorithm) with Python ints,
- ``gvr_kernels.routing`` (host-side routing and capacity checks) with Python ints,
- the CuTe DSL kernels, which call :func:`row_plan` while tracing with ``Int32`` values and a
  device ``ops`` namespace (``gvr_kernels.ops``).

It therefore uses only ``+ - * // >> <<`` and the three helpers of ``ops`` (``min``, ``max``,
``select``); no Python ``if`` on a row-dependent value. All products stay below 2**31 for
``n < 2**26`` (checked by the host router), so int32 device arithmetic is exact.

Exactness never depends on these numbers: they only choose how fast a row finishes
(see ``docs/kernels.md``, invariant I6).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

__all__ = [
    "LadderParams",
    "RowPlan",
    "row_plan",
    "sample_vector",
    "SAMPLE_BLOCK_VECS",
    "PY_OPS",
    "MAX_ROW_LENGTH",
    "dense_aim",
    "dense_band",
    "check_dense_min",
]

#: Longest row the int32 ladder arithmetic is exact for (products stay below 2**31).
MAX_ROW_LENGTH = 1 << 26

#: Sampled vectors come in runs of this many consecutive 16-byte vectors (64 bytes, one DRAM
#: access): a sample costs its own bytes of memory traffic, not a whole access per vector.
SAMPLE_BLOCK_VECS = 4

#: Host implementation of the ``ops`` namespace.
PY_OPS = SimpleNamespace(
    min=min,
    max=max,
    select=lambda cond, a, b: a if cond else b,
)


@dataclass(frozen=True)
class LadderParams:
    """Compile-time ladder parameters of one kernel configuration.

    Attributes:
        capacity: survivor staging capacity of the CTA that selects (entries).
        sample_max: most sampled scores per row (a multiple of 4).
        aim_mult: the first rung aims at ``aim_mult * k`` survivors.
        min_hits: sample scores wanted above the first rung (sets the rung's statistical
            resolution: the survivor count of a rung at sample rank ``j`` has a relative
            spread of about ``1 / sqrt(j)``).
        retry_mult: the retry rung sits at sample rank ``retry_mult * j1``.
        vec: scores per 16-byte vector: 4 for float32 rows, 8 for bfloat16 and float16 rows.
        aim_boost: the first rung may aim at up to ``aim_boost * aim`` survivors while that
            stays within a quarter of the capacity (``RowPlan.j1``): more sample hits above the
            rung, so a tighter survivor count, for a larger staging and selection.
        dense_min: 0, or the *dense* rows' floor: a row of more than ``dense_min * k`` scores
            that the aim would leave unsampled (at most ``2 * aim``) is sampled, its rung
            aiming at :func:`dense_aim` survivors (no boost): a rung of a few thousand
            survivors instead of staging and selecting every score. The dense aim and the
            gate on ``n > 2 k`` are those of upstream GVR V2's ``small_dense`` rows
            (TensorRT-LLM's V2 kernels, the ladder scalars: ``../shared/docs/gvr-algorithm.md``
            section 2.2). At least 2 when set.
    """

    capacity: int
    sample_max: int = 8192
    aim_mult: int = 2
    min_hits: int = 32
    retry_mult: int = 3
    vec: int = 4
    aim_boost: int = 1
    dense_min: int = 0

    def __post_init__(self) -> None:
        if self.vec not in (4, 8):
            raise ValueError(f"vec must be 4 or 8, got {self.vec}")
        if self.sample_max % self.vec or self.sample_max < self.vec:
            raise ValueError(
                f"sample_max must be a positive multiple of {self.vec}, got {self.sample_max}"
            )
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")
        for name in ("aim_mult", "min_hits", "retry_mult", "aim_boost"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        check_dense_min(self.dense_min)

    def aim(self, k: int) -> int:
        """Survivors the first rung aims at (host form)."""
        return k * self.aim_mult

    def max_k(self) -> int:
        """Largest K for which an unsampled row always fits the staging capacity."""
        return self.capacity // (2 * self.aim_mult)


@dataclass(frozen=True)
class RowPlan:
    """What one row decides before its streaming pass (see :func:`row_plan`).

    Attributes:
        nvec: number of whole 16-byte vectors, counted from the 16-byte-aligned address at or
            below the window start; vector ``v`` holds window positions ``vec * v - lead + q``
            (``vec``: :attr:`LadderParams.vec`).
        tail_start: first window position not covered by a whole vector (scalar loads).
        unsampled: the row is short enough to stage every element (threshold key 0): at
            most ``2 * aim`` scores (and, with :attr:`LadderParams.dense_min`, at most
            ``dense_min * k``), or no whole vector (nothing to sample).
        sample_vecs: number of sampled vectors (``vec`` scores each).
        sample_step: vector stride of the sample; sampled vector ``t`` is
            :func:`sample_vector` ``(t, sample_step)``, runs of :data:`SAMPLE_BLOCK_VECS`
            consecutive vectors spread evenly over the row.
        j1: sample rank (from the top, 1-based) of the first rung: ``rung_aim * s / n`` for
            ``rung_aim = max(aim, min(capacity / 4, aim_boost * aim))`` expected survivors.
        reach1: most sample keys the first rung may leave at or above it (the radix
            narrowing goes on until ``j1 <= #(sample >= T1) <= reach1``, or a single key):
            ``2 * j1``, lowered toward ``capacity * s / (2 * n)`` sample keys (a rung
            expected to stage at most half the capacity) but never below ``j1 + j1 // 8 +
            1``. Where the staging holds ``4 * aim`` this is ``2 * j1``; where it holds only
            ``2 * aim`` (the 512-thread core at K = 2048) a rung at ``2 * j1`` would fill the
            staging on average and sampling noise would overflow it.
        j2: sample rank of the retry rung.
    """

    nvec: Any
    tail_start: Any
    unsampled: Any
    sample_vecs: Any
    sample_step: Any
    j1: Any
    reach1: Any
    j2: Any


def sample_vector(t: Any, step: Any) -> Any:
    """The row vector holding sampled vector ``t`` of a row with ``RowPlan.sample_step ==
    step``: run ``t // 4`` starts at vector ``4 * step * (t // 4)`` and holds ``t % 4`` next
    (:data:`SAMPLE_BLOCK_VECS` = 4). For ``t < sample_vecs`` it is at most ``t * step``, so
    inside the row; it is ``t`` itself when ``step == 1``. Integer operations only: the same
    expression on Python ints and on device Int32 values."""
    return (t >> 2) * (step << 2) + (t & 3)


def dense_aim(k: Any) -> Any:
    """Survivors a dense row's rung aims at (:attr:`LadderParams.dense_min`): ``11 k / 8``,
    rounded down, upstream GVR V2's aim for its ``small_dense`` rows (TensorRT-LLM's V2
    kernels: ``../shared/docs/gvr-algorithm.md`` section 2.2). A rung at that sample rank
    leaves fewer than ``k`` survivors with a probability that falls with the sample hits
    above it (``RowPlan.j1``: at least ``11 * 1024 / 8 * 1024 / n`` of a 1,024-score sample);
    then the row retries or is rescued, exactly. Integer operations only."""
    return (k * 11) >> 3


def check_dense_min(dense_min: int) -> None:
    """Raise ``ValueError`` unless ``dense_min`` is 0 (no dense rows) or at least 2."""
    if dense_min != 0 and dense_min < 2:
        raise ValueError(f"dense_min must be 0 or >= 2, got {dense_min}")


def dense_band(n: Any, k: Any, aim: Any, dense_min: int, ops: Any = PY_OPS):
    """The unsampled and dense decisions of a row of ``n`` scores whose rung would aim at
    ``aim`` (``dense_min``: compile-time, 0 for no dense rows): ``(short, aim, dense)`` with
    ``short`` the row staged whole (at most ``2 aim`` scores, and with dense rows at most
    ``dense_min * k``), ``aim`` the aim its rung takes (:func:`dense_aim` for a dense row) and
    ``dense`` whether it is dense (None without dense rows). Shared by the streaming ladder
    (:func:`row_plan`) and the register-resident plan
    (``gvr_reference.register_model.register_plan``)."""
    short = n <= aim * 2
    if not dense_min:
        return short, aim, None
    dense = short & (n > k * dense_min)
    return short & (n <= k * dense_min), ops.select(dense, dense_aim(k), aim), dense


def row_plan(n: Any, k: Any, lead: Any, p: LadderParams, ops: Any = PY_OPS) -> RowPlan:
    """Compute the ladder of one row.

    Args:
        n: valid row length (scores), ``k < n < MAX_ROW_LENGTH`` for the sampled path.
        k: top-K size, ``1 <= k <= p.max_k()``.
        lead: window start modulo ``p.vec`` (0 for decode rows); the first ``lead`` lanes of
            vector 0 lie before the window and are masked by position.
        p: compile-time ladder parameters.
        ops: ``min``/``max``/``select`` for the value type (``PY_OPS`` for Python ints).

    Returns:
        The :class:`RowPlan`; fields are of the same type as ``n``.
    """
    vec = p.vec
    vshift = vec.bit_length() - 1
    nvec = (lead + n) >> vshift
    tail_start = ops.max(nvec * vec - lead, 0)
    aim = k * p.aim_mult
    # The first rung may aim higher where the staging has room (up to a quarter of it, at
    # most aim_boost * aim): the survivor count of a rung at sample rank j spreads by about
    # 1 / sqrt(j), and a count below k costs a second pass, one above the capacity a whole-row
    # selection.
    rung_aim = ops.max(aim, ops.min(p.capacity // 4, aim * p.aim_boost))
    # A dense row (more than dense_min * k scores, at most 2 aim) is sampled with the dense
    # aim, unboosted, instead of staged whole.
    short, aim, dense = dense_band(n, k, aim, p.dense_min, ops)
    if dense is not None:
        rung_aim = ops.select(dense, aim, rung_aim)
    # A row with no whole vector (16-bit rows of fewer than 8 scores past the lead, at K = 1)
    # has nothing to sample: the sample's vector would lie past the window.
    unsampled = short | (nvec < 1)
    # Sample size: about min_hits scores above the aim rung, within [1024, sample_max].
    s_target = ops.min(ops.max((n // aim) * p.min_hits, 1024), p.sample_max)
    sample_vecs = ops.max(ops.min(s_target >> vshift, nvec), 1)
    sample_step = ops.max(nvec // sample_vecs, 1)
    s = sample_vecs * vec
    j1 = ops.max((rung_aim * s) // ops.max(n, 1), 1)
    half_full = (p.capacity * s) // (2 * ops.max(n, 1))
    reach1 = ops.max(j1 + j1 // 8 + 1, ops.min(2 * j1, half_full))
    j2 = ops.min(j1 * p.retry_mult, s)
    return RowPlan(
        nvec=nvec,
        tail_start=tail_start,
        unsampled=unsampled,
        sample_vecs=sample_vecs,
        sample_step=sample_step,
        j1=j1,
        reach1=reach1,
        j2=j2,
    )
