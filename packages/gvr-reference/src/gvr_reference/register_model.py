"""The register-resident GVR kernel family: its per-row plan and a CPU model of its decisions.

A register-resident kernel holds a whole row in the registers of one CTA (``threads`` threads,
``vecs`` 16-byte vectors each, plus up to ``vec - 1`` tail scores on warp 0; ``vec`` = 4
float32 or 8 bfloat16 / float16 scores per vector), so it reads the row
exactly once. Per row:

1. **Bracket.** ``lo`` is the smallest key among window positions ``[0, k)`` (so at least
   ``k`` keys are ``>= lo``), raised to the smallest of the per-thread maxima when at least
   ``k`` threads hold a score (each maximum is a distinct score, so again at least ``k``
   keys are ``>= lo``: :func:`bracket_low`); ``top`` is the largest key of the row. From
   their values ``vlo`` and ``vmax`` (:func:`bracket`), in IEEE float32 with
   round-to-nearest and no flush of subnormals, ``scale = (BRACKET_BINS - 4) / (vmax - vlo)``
   and ``bias = fma(-vlo, scale, 2**23 + 2)``; each score ``v`` maps to
   ``t = fma(v, scale, bias)`` (one rounding, :func:`fma32`), whose float32 bits less those
   of ``2**23`` are its bin (:func:`bracket_bins`; ``t`` below ``2**23``: below the bracket,
   not counted). The bracket is formed only when the ends are finite values, the width and
   scale finite, ``t(vlo)`` lands in bin 1 or above and ``t(vmax)`` in bin
   ``BRACKET_BINS - 1`` or below (``bias`` is within half a unit of ``2**23 + 2 - vlo *
   scale`` unless ``vlo`` is some 4,000 widths below zero or 12,000 above, so the ends land
   in bins 2 and ``BRACKET_BINS - 2`` give or take a rounding).
   A correctly rounded fused multiply-add by a positive ``scale`` is monotone in ``v``, so
   the bin is a non-decreasing function of the score (equal for ``-0.0`` and ``+0.0``): a
   bin's scores form one contiguous value interval, and the bins order scores exactly as a
   radix level orders keys. Every score ``>= vlo`` is in bin 1 or above, so bins ``>= 1``
   hold at least ``k`` scores and the crossing bin is never bin 0 (which holds scores up to
   about a bin below ``vlo``). The float arithmetic only decides how finely the scores are
   spread, never which are selected.
2. **Crossing bin** ``b`` of the histogram for ``k``: ``above`` keys lie in higher bins,
   ``m`` in ``b``, ``need = k - above`` of them are wanted (``1 <= need <= m``). Every key
   in a higher bin is in the answer and is written out at once, in the same pass as the
   crossing bin's keys: with ``m == need`` to the output too (``BRACKET``); with
   ``m <= RANK_MAX`` to a staging buffer, where one warp ranks them by (key descending,
   position ascending), writing the first ``need`` (``BRACKET_RANK``); with
   ``m <= capacity`` to the staging buffer, narrowed by radix levels over its key range
   (``BRACKET_NARROW``); otherwise (``BRACKET_OVERFLOW``) radix selection for ``k`` over
   the registers in ``[lo, top]``, which holds the whole answer.
3. **Rows the bracket cannot serve** (an infinite or NaN score at the top, ``-inf`` at the
   bottom, a constant first ``k``, a range too narrow for the scale) and **crowded rows**
   (some warp's 32 sample keys, step a, hold one key ``CROWD_MIN`` times, and the largest
   such key lies in the bracket or less than about 18 bins below its low end: a tie class large
   enough that its bin's atomics would serialise, :func:`crowd_harms`) take the sampled
   path:

   a. **Sample.** Every thread contributes one of its own scores, from slot ``(j, q)`` with
      ``j = t % vecs`` and ``q = (t // vecs) % vec`` (vector ``t + j * threads``): a sample
      spread over the whole row at no memory cost. Slots outside the window do not count.
   b. **Rung.** Radix narrowing over the valid sample keys (range ``[1, key_max]``) finds
      ``T`` with ``j1 <= #(sample >= T) <= 2 j1``, ``j1 = aim * s / n`` (``s`` valid sample
      keys, ``aim = aim_mult * k``). Rows with ``n <= 2 aim`` skip it (``T = 1``), except,
      with ``RegisterParams.dense_min``, rows of more than ``dense_min * k`` scores, whose
      rung aims at ``gvr_reference.ladder.dense_aim(k)`` keys.
   c. **Stage.** The keys ``>= T`` (and their positions) go to a shared-memory staging
      buffer of ``capacity`` entries; all of them are counted (``count``), even past the
      capacity.
   d. **Select.** ``k <= count <= capacity`` (``FIRST``): radix narrowing over the staged
      keys in ``[T, max key]``. Otherwise the registers themselves are the candidates:
      ``count > capacity`` (``RESCUE_OVERFLOW``) over ``[T, max key]``, ``count < k``
      (``RESCUE_UNDERESTIMATE``) or an unsampled row (``UNSAMPLED``) over
      ``[1, max key]``. Each gives the exact rule "keys above ``thr`` plus ``need_eq`` keys
      equal to it", then one emission pass over the same candidates.
   e. **Crowded rung** (:func:`gvr_reference.model.crowded_rung`: the sample narrowing ended
      on one key that at least two sample keys share): the staging takes the keys *above*
      ``T`` and the keys equal to ``T`` are counted. With ``count < k <= count + eq``
      (``TIE``) the rule is known without any narrowing (``thr = T``,
      ``need_eq = k - count``) and one emission pass over the registers writes it;
      otherwise the paths above, over the keys above ``T``.

Since every score stays in a register, no fallback reads the row again: exactness never
depends on the bracket, the sample or the capacity (they only decide how many candidates the
selection walks). A row longer than the registers hold (only when the caller's envelope is
below the row) takes the exact whole-row radix selection of the streaming family, reading
from global memory (``WHOLE_ROW``).

**16-bit scores** (bfloat16, float16) are held as their raw bits, eight per 16-byte vector.
Widening them to float32 is exact and keeps the order, so steps 1-2 run on the widened
scores with the float32 formulas above (keys, bracket, bins: the bracket path of a 16-bit row
is the float32 bracket path of its widening), while step 3 and every radix selection work in
the format's own key space (``gvr_reference.keys.format_keys``, ``key_max = 0xFFFF``: two
radix levels decide any key). The staged keys of a crossing bin are 16-bit keys too; its size
alone decides the bracket path.

:func:`register_plan` is the integer formula shared by the kernel (traced with the device
``ops``) and :func:`simulate_row`; the paths are :class:`gvr_reference.model.Path` codes.
Source of the bracket's ends (the minimum of the first ``k`` scores and the row maximum): the
register-resident kernels of TensorRT-LLM's GVR V2 top-K (``gvr_topk`` in
``tensorrt_llm/_torch``, hint-free arm); the key-order guard, the bins and the warp rank are
this library's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .bracket import (
    BIN0_BITS,
    BRACKET_BINS,
    KEY_FLT_MAX,
    KEY_NEG_FLT_MAX,
    Bracket,
    bracket,
    bracket_bins,
    crossing,
    fma32,
)
from .keys import format_keys, key_format, key_to_float, order_key
from .ladder import PY_OPS, check_dense_min, dense_band
from .model import Path, RowTrace, crowded_rung, rung_with_ties

__all__ = [
    "BRACKET_BINS",
    "RANK_MAX",
    "CROWD_MIN",
    "crowded_sample",
    "CROWD_KEY_SHIFT",
    "crowd_key",
    "crowd_bound",
    "crowd_harms",
    "near_pair",
    "thread_sample",
    "KEY_FLT_MAX",
    "KEY_NEG_FLT_MAX",
    "BIN0_BITS",
    "Bracket",
    "fma32",
    "bracket",
    "bracket_bins",
    "crossing",
    "bracket_low",
    "bracket_topk",
    "RegisterParams",
    "RegisterPlan",
    "register_plan",
    "sample_positions",
    "bracket_trace",
    "sampled_trace",
    "simulate_row",
    "trace_windows",
    "simulate_windows",
]

#: Crossing bins of at most this many keys are ranked by one warp (one key per lane).
RANK_MAX = 32
#: A warp whose sample holds one key this many times (a quarter of its 32) marks the row
#: crowded: a tie class that large would send long runs of atomics to one bracket bin.
CROWD_MIN = 8


def bracket_topk(values: np.ndarray, k: int) -> np.ndarray | None:
    """The bracket path's selection rule on the CPU (window positions, int64 ``[k]``), with
    the first ``k`` scores' minimum as the low end (the kernel may raise it,
    :func:`bracket_low`: any low end with ``k`` keys at or above it gives the same answer),
    or None where that bracket cannot be formed; ``k < n``.

    Every key ``>= lo`` in a bin above the crossing bin, then the crossing bin's keys by
    (key descending, position ascending) up to ``k``: what the kernel writes on every bracket
    path (the narrowing paths reach the same multiset, ties in any order). Exact because the
    bins are monotone in the key: every key in a higher bin is above every key in the
    crossing bin, and every key below ``lo`` or in a lower bin is below it, while at least
    ``k`` keys are ``>= lo``."""
    keys = order_key(np.ascontiguousarray(values, dtype=np.float32))
    br = bracket(int(keys[:k].min()), int(keys.max()))
    if br is None:
        return None
    all_bins = bracket_bins(keys, br)
    inside = np.flatnonzero(all_bins >= 0)
    bins = all_bins[inside]
    cb, above, _ = crossing(np.bincount(bins, minlength=BRACKET_BINS), k)
    high = inside[bins > cb]
    cand = inside[bins == cb]
    order = np.lexsort((cand, -keys[cand].astype(np.int64)))
    return np.concatenate([high, cand[order][: k - above]]).astype(np.int64)


class VectorLayout:
    """The 16-byte vectors of a row in a format's scores, for parameter classes with a
    ``dtype`` (``RegisterParams``, ``gvr_reference.cluster_model.ClusterParams``)."""

    dtype: str

    @property
    def vec(self) -> int:
        """Scores per 16-byte vector."""
        return key_format(self.dtype).vec

    def whole_vectors(self, n: int, lead: int) -> int:
        """Whole 16-byte vectors of a window of ``n`` scores starting ``lead`` lanes into its
        first vector (``lead < vec``)."""
        return (lead + n) // self.vec


@dataclass(frozen=True)
class RegisterParams(VectorLayout):
    """Compile-time facts of a register-resident configuration.

    Attributes:
        threads: CTA size (a multiple of 32).
        vecs: 16-byte vectors each thread holds.
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: staging entries for the keys at or above the rung.
        bracket: rows take the bracket path where it applies (False: always sampled).
        dense_min: 0, or rows of more than ``dense_min * k`` scores that the aim would leave
            unsampled are sampled with the rung at the dense aim
            (``gvr_reference.ladder.LadderParams.dense_min``).
        dtype: the logits format (``gvr_reference.keys.KEY_FORMATS``): a 16-byte vector holds
            ``vec`` scores (4 float32, 8 bfloat16 / float16). The bracket works on the exact
            float32 widening of the scores, the sampled path in the format's own key space.
    """

    threads: int
    vecs: int
    aim_mult: int = 2
    capacity: int = 8192
    bracket: bool = True
    dtype: str = "float32"
    dense_min: int = 0

    def __post_init__(self) -> None:
        if self.threads < 32 or self.threads % 32:
            raise ValueError(f"threads must be a positive multiple of 32, got {self.threads}")
        if self.vecs < 1:
            raise ValueError(f"vecs must be >= 1, got {self.vecs}")
        if self.aim_mult < 1:
            raise ValueError(f"aim_mult must be >= 1, got {self.aim_mult}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")
        check_dense_min(self.dense_min)
        key_format(self.dtype)

    @property
    def max_n(self) -> int:
        """Longest row the CTA holds at any window misalignment: ``(lead + n) // vec`` whole
        vectors fit the ``threads * vecs`` held, and the ``< vec`` scores after them are the
        tail."""
        return self.vec * self.threads * self.vecs


@dataclass(frozen=True)
class RegisterPlan:
    """What a row decides from its length and its valid sample count.

    Attributes:
        unsampled: no rung (``T = 1``).
        j1: sample rank (from the top, 1-based) of the rung (meaningful when sampled).
    """

    unsampled: Any
    j1: Any


def register_plan(
    n: Any, k: Any, s_valid: Any, aim_mult: int, ops: Any = PY_OPS, dense_min: int = 0
) -> RegisterPlan:
    """The rung plan of one row (integer arithmetic; ``ops`` as in ``gvr_reference.ladder``).

    Args:
        n: valid row length, ``k < n``.
        k: top-K size.
        s_valid: valid sample keys of the row.
        aim_mult: compile-time aim multiplier.
        dense_min: compile-time dense-row floor (``RegisterParams.dense_min``; 0: none): a
            row of ``(dense_min * k, 2 aim]`` scores is sampled with the rung at
            ``gvr_reference.ladder.dense_aim(k)``.
    """
    short, aim, _ = dense_band(n, k, k * aim_mult, dense_min, ops)
    unsampled = short | (s_valid == 0)
    j1 = ops.min(ops.max((aim * s_valid) // ops.max(n, 1), 1), ops.max(s_valid, 1))
    return RegisterPlan(unsampled=unsampled, j1=j1)


def bracket_low(keys: np.ndarray, k: int, lead: int, p: RegisterParams) -> int:
    """The bracket's low key for a row of window keys (``n = keys.size > k``): the smallest
    key of positions ``[0, k)``, or the smallest per-thread maximum where that is higher and
    at least ``k`` threads hold a score (``min(threads, whole vectors) >= k``)."""
    n = keys.shape[0]
    lo = int(keys[:k].min())
    nvec = p.whole_vectors(n, lead)
    if min(p.threads, nvec) < k:
        return lo
    vec = p.vec
    t = np.arange(p.threads, dtype=np.int64)[:, None]
    slot = np.arange(vec * p.vecs, dtype=np.int64)[None, :]
    v = t + (slot // vec) * p.threads
    pos = vec * v + slot % vec - lead
    valid = (v < nvec) & (pos >= 0)
    tk = np.where(valid, keys[np.where(valid, pos, 0)], 0).astype(np.int64)
    tail = nvec * vec - lead + np.arange(p.threads)
    has_tail = (np.arange(p.threads) < 32) & (tail < n)
    tk = np.concatenate([tk, np.where(has_tail, keys[np.where(has_tail, tail, 0)], 0)[:, None]], 1)
    tmax = tk.max(axis=1)[: min(p.threads, nvec)]
    return max(lo, int(tmax.min()))


def thread_sample(keys: np.ndarray, lead: int, p: RegisterParams) -> np.ndarray:
    """Each thread's sample key (uint32 ``[threads]``; 0 where its slot lies outside the
    window), from the keys of the row's window."""
    n = keys.shape[0]
    t = np.arange(p.threads, dtype=np.int64)
    v = t + (t % p.vecs) * p.threads
    pos = p.vec * v + (t // p.vecs) % p.vec - lead
    valid = (v < p.whole_vectors(n, lead)) & (pos >= 0)
    return np.where(valid, keys[np.where(valid, pos, 0)], 0).astype(np.uint32)


def crowded_sample(sample: np.ndarray) -> bool:
    """Whether some warp's 32 sample keys hold one (valid, nonzero) key at least
    ``CROWD_MIN`` times: ``crowd_key(sample) != 0`` (the kernels compute the key,
    :func:`crowd_key`, and decide by :func:`crowd_harms`)."""
    return crowd_key(sample) != 0


def crowd_key(sample: np.ndarray) -> int:
    """The largest valid key that some warp's 32 sample keys hold at least ``CROWD_MIN``
    times, or 0 where none does (:func:`crowded_sample` is ``crowd_key(sample) != 0``; the
    kernels: ``gvr_kernels.device.bracket.warp_crowd`` and a maximum over the warps)."""
    best = 0
    for w in range(0, sample.size, 32):
        lanes = sample[w : w + 32]
        keys, counts = np.unique(lanes[lanes != 0], return_counts=True)
        if counts.size and counts.max() >= CROWD_MIN:
            best = max(best, int(keys[counts >= CROWD_MIN].max()))
    return best


#: Low bits of a float32 crowd key the kernels drop: a warp's valid-slot count (0-32, six
#: bits) and its crowd key share one 32-bit word of the exchange, so a float32 key keeps
#: its top 26 bits and is read back as the largest key with them (an upper bound); 16-bit
#: keys fit whole.
CROWD_KEY_SHIFT = 6


def crowd_bound(key: int, dtype: str = "float32") -> int:
    """The float32 key the kernels test for a crowd key ``key`` (nonzero) of a row of
    ``dtype``: the largest key with its top 26 bits for float32 (:data:`CROWD_KEY_SHIFT`),
    the key itself for 16-bit scores (given here, as the models give every bracket key, as
    the float32 key of the widened score)."""
    if key_format(dtype).bits != 32:
        return int(key)
    low = (1 << CROWD_KEY_SHIFT) - 1
    return int(key) | low


def crowd_harms(key: int, br: Bracket, dtype: str = "float32") -> bool:
    """Whether a crowd of the sample (:func:`crowd_key`, 0: none) sends the bracket path to
    the sampled path: its bound (:func:`crowd_bound`) maps to ``t = fma(v, scale, bias)``
    of at least ``2**23 - 16``, where the counting pass puts a score in a histogram bin or
    in one of the words just below it that lanes share
    (``gvr_kernels.device.bracket.count_bracket``), so a tie class that large would send
    long runs of atomics to one word. A crowd further below the bracket's low end (the
    zeros of a ReLU-weighted row whose K-th score is positive) is counted in words of its
    own lane and costs the bracket nothing."""
    if key == 0:
        return False
    v = key_to_float(np.array([crowd_bound(key, dtype)], np.uint32))
    t = fma32(v, br.scale, br.bias).view(np.int32)[0]
    return int(t) >= BIN0_BITS - 32


def near_pair(lanes: np.ndarray, need: int = CROWD_MIN) -> bool:
    """Whether some lane of one warp's keys (``lanes``, 32 values, 0 invalid) holds the same
    valid key as one of the ``32 // need`` lanes after it, cyclically.

    Every warp in which one valid key fills ``need`` lanes has such a pair: those lanes cut
    the cycle of 32 lanes into ``need`` gaps summing to 32, and the smallest gap is at most
    ``32 // need``. So a warp without one cannot be crowded (:func:`crowded_sample`), and the
    kernel counts keys (``match.any``) only in warps that have one."""
    lanes = np.asarray(lanes)
    valid = lanes != 0
    return any(
        bool((valid & (lanes == np.roll(lanes, -d))).any()) for d in range(1, 32 // need + 1)
    )


def sample_positions(n: int, lead: int, p: RegisterParams) -> np.ndarray:
    """Window positions of the valid sample slots, in thread order."""
    t = np.arange(p.threads, dtype=np.int64)
    j = t % p.vecs
    q = (t // p.vecs) % p.vec
    v = t + j * p.threads
    pos = p.vec * v + q - lead
    return pos[(v < p.whole_vectors(n, lead)) & (pos >= 0)]


def simulate_row(values: np.ndarray, k: int, p: RegisterParams, lead: int = 0) -> RowTrace:
    """Predict the register-resident kernel's path for one row.

    Args:
        values: float32 ``[n]``, the row's valid window (``n <= p.max_n``); for a 16-bit
            ``p.dtype``, scores that are values of that format (their exact widening).
        k: top-K size.
        p: the configuration.
        lead: window start modulo ``p.vec`` (prefill rows); decode rows use 0.

    Returns:
        The :class:`gvr_reference.model.RowTrace`. Bracket paths: ``t1`` is the bracket's
        low key and ``count1`` the crossing bin's size; sampled paths: the rung and its count.
    """
    n = int(values.shape[0])
    if n <= k:
        return RowTrace(Path.SHORT, n)
    if not 1 <= p.whole_vectors(n, lead) <= p.threads * p.vecs:
        # Longer than the registers hold (an envelope below the row), or no whole vector (a
        # row of fewer than ``vec`` scores past the window start): exact radix selection over
        # the row read from global memory.
        return RowTrace(Path.WHOLE_ROW, n)
    values = np.ascontiguousarray(values, dtype=np.float32)
    # The bracket reads the float32 widening (exact, order-preserving): float32 keys.
    keys = order_key(values)
    br = bracket(bracket_low(keys, k, lead, p), int(keys.max())) if p.bracket else None
    if br is not None and not crowd_harms(crowd_key(thread_sample(keys, lead, p)), br, p.dtype):
        return bracket_trace(keys, br, k, p.capacity)
    pos = sample_positions(n, lead, p)
    plan = register_plan(n, k, int(pos.size), p.aim_mult, dense_min=p.dense_min)
    if plan.unsampled:
        return RowTrace(Path.UNSAMPLED, n, t1=1, count1=n)
    fmt = key_format(p.dtype)
    return sampled_trace(format_keys(values, fmt), pos, k, plan.j1, p.capacity, fmt.key_max)


def bracket_trace(keys: np.ndarray, br: Bracket, k: int, capacity: int) -> RowTrace:
    """The path of a bracket row from its window keys (uint32 ``[n]``): the crossing bin of
    the histogram of the counted keys (bins 0 and up; the crossing is in bin 1 or above),
    then ``BRACKET`` (all of it wanted), ``BRACKET_OVERFLOW`` (more keys than ``capacity``),
    ``BRACKET_RANK`` (at most ``RANK_MAX``) or ``BRACKET_NARROW``; ``t1`` is the low key,
    ``count1`` the bin's size. Shared with the cluster-register family's model
    (``gvr_reference.cluster_model``)."""
    bins = bracket_bins(keys, br)
    hist = np.bincount(bins[bins >= 0], minlength=BRACKET_BINS)
    _, above, m = crossing(hist, k)
    if m == k - above:
        path = Path.BRACKET
    elif m > capacity:
        path = Path.BRACKET_OVERFLOW
    elif m <= RANK_MAX:
        path = Path.BRACKET_RANK
    else:
        path = Path.BRACKET_NARROW
    return RowTrace(path, keys.shape[0], t1=br.lo, count1=m)


def sampled_trace(
    keys: np.ndarray, pos: np.ndarray, k: int, j1: int, capacity: int, key_max: int = 0xFFFFFFFF
) -> RowTrace:
    """The path of a sampled row (steps 3b-3e) from its window keys (uint32 ``[n]``, in a key
    space whose largest key is ``key_max``: ``0xFFFF`` for 16-bit scores), the valid sample
    positions and the rung's sample rank: the rung, the keys staged at or above it (above it
    on a crowded rung, whose ties are counted), and the path the counts give. Shared with the
    cluster-register family's model (``gvr_reference.cluster_model``)."""
    t1, _, ties = rung_with_ties(keys[pos], j1, lo=1, hi=key_max)
    crowded = crowded_rung(t1, ties, key_max)
    eq1 = int(np.count_nonzero(keys == t1)) if crowded else 0
    count1 = int(np.count_nonzero(keys > t1 if crowded else keys >= t1))
    if count1 > capacity:
        path = Path.RESCUE_OVERFLOW
    elif count1 >= k:
        path = Path.FIRST
    elif count1 + eq1 >= k:
        path = Path.TIE
    else:
        path = Path.RESCUE_UNDERESTIMATE
    return RowTrace(
        path, keys.shape[0], t1=t1, count1=count1, sample_size=int(pos.size), j1=j1, eq1=eq1,
        crowded=crowded,
    )  # fmt: skip


def trace_windows(simulate, logits, starts, lengths, k: int, p) -> list[RowTrace]:
    """``simulate(row, k, p, lead=...)`` for every row window of a batch (windows as in
    ``gvr_reference.model``; ``lead`` is the start modulo ``p.vec``, 4 where ``p`` has none)."""
    vec = getattr(p, "vec", 4)
    traces = []
    for r in range(logits.shape[0]):
        s, n = int(starts[r]), int(lengths[r])
        traces.append(simulate(logits[r, s : s + n], k, p, lead=s % vec))
    return traces


def simulate_windows(
    logits: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, p: RegisterParams
) -> list[RowTrace]:
    """:func:`simulate_row` for every row of a batch (windows as in ``gvr_reference.model``)."""
    return trace_windows(simulate_row, logits, starts, lengths, k, p)
