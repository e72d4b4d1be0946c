"""CPU model of the streaming GVR kernel: which path each row takes, and why.

The model runs the kernel's decisions on the CPU with the same arithmetic
(:mod:`gvr_reference.ladder` for the per-row ladder; for the first rung the same linear level
over the sample's float32 values, :func:`sample_rung`; the same key-space radix narrowing for
the other rungs and the final selection). It reports per row the path the kernel takes and the
numbers behind it: the rung keys, the survivor counts, the capacities. Use it to

- tune the ladder (aim, sample size, capacity) without device time,
- build inputs that force each fallback path, and check that the kernel reports the same path,
- unit-test the selection rule the kernel emits with (:func:`select_rule`).

Paths (``Path``), in the order the kernel tries them:

``SHORT``
    ``n <= k``: identity then ``-1``.
``UNSAMPLED``
    ``n <= 2 * aim``: every element is staged (threshold key 0) and selected exactly.
``FIRST``
    the first rung ``T1`` (sample rank ``j1``) leaves ``k <= count <= capacity`` survivors.
``RETRY``
    single-CTA rows only: ``count(T1) < k``; the retry rung ``T2`` (sample rank ``j2``, lower
    than ``T1``) leaves ``k <= count <= capacity`` survivors after a second pass.
``TIE``
    the first rung is a crowded single key (:func:`crowded_rung`: the narrowing ended on one
    key that at least two sample keys share), so the pass stages only the keys *above* ``T1``;
    fewer than ``k`` lie above it and at least ``k`` at or above it, so the answer is every
    staged key plus the ``k - count1`` first (smallest-index) keys equal to ``T1``, found by an
    in-order scan that stops once it has them. A crowded row with ``count1 >= k`` takes
    ``FIRST`` (or ``RESCUE_OVERFLOW``) among the keys above ``T1``; one whose scan finds too
    few ties continues as an underestimate (the retry rung on one CTA, else the rescue).
``RESCUE_UNDERESTIMATE``
    no rung reached ``k`` survivors: exact radix selection over the whole row.
``RESCUE_OVERFLOW``
    a rung left more survivors than the staging capacity: exact radix selection over the whole
    row, restricted to keys at or above that rung.
``WHOLE_ROW``
    register-resident family only: the row is longer than the registers hold (the caller's
    envelope is below the row), so it is selected by an exact radix selection over the row
    read from global memory.

The register-resident family's decisions are modelled in :mod:`gvr_reference.register_model`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .bracket import (
    KEY_FLT_MAX,
    KEY_NEG_FLT_MAX,
    Bracket,
    bin_edge,
    bracket,
    bracket_bins,
    crossing,
    edge_exact,
)
from .keys import format_keys, key_format, order_key
from .ladder import LadderParams, row_plan, sample_vector

__all__ = [
    "Path",
    "RowTrace",
    "ModelConfig",
    "bitlen",
    "narrow_threshold",
    "crowded_rung",
    "crowd_min_ties",
    "rung_with_ties",
    "RUNG_BINS",
    "rung_bracket",
    "rung_bins",
    "rung_edge",
    "sample_rung",
    "select_rule",
    "simulate_row",
    "simulate_windows",
    "SplitBins",
    "split_bins",
    "sample_top",
    "SPLIT_BINS_MIN_K",
    "LINEAR_BINS",
    "LINEAR_CROSS_MAX",
    "LinearSelect",
    "linear_select",
]

#: Cluster split rows meet on their survivor bins (:func:`split_bins`) from this K on: at
#: K = 512 the radix levels over the gathered survivors (about ``3 * K`` of them) measured
#: faster (H200, ``benchmarks/results/h200/bench_grid_all.json`` against
#: ``bench_grid_head.json``: 3.2 %). Workspace splits no longer meet on them
#: (``benchmarks/results/h100/ab_linear.log``: gathering and the linear level measured faster).
SPLIT_BINS_MIN_K = 1024

RADIX_BITS = 8
NUM_BINS = 1 << RADIX_BITS


class Path(enum.IntEnum):
    """Kernel paths; the values are the codes the kernels write into their debug path log."""

    SHORT = 0
    UNSAMPLED = 1
    FIRST = 2
    RETRY = 3
    RESCUE_UNDERESTIMATE = 4
    RESCUE_OVERFLOW = 5
    WHOLE_ROW = 6
    TIE = 7
    #: Register-resident family, bracket histogram (``gvr_reference.register_model``): the
    #: crossing bin is taken whole ...
    BRACKET = 8
    #: ... ranked by one warp (at most ``RANK_MAX`` keys) ...
    BRACKET_RANK = 9
    #: ... narrowed by radix levels over its staged keys ...
    BRACKET_NARROW = 10
    #: ... or narrowed over the registers (more keys than the staging holds).
    BRACKET_OVERFLOW = 11


@dataclass(frozen=True)
class ModelConfig:
    """The compile-time facts of a kernel configuration the model needs.

    Attributes:
        params: the ladder parameters.
        parts: CTAs per row (``> 1``: split rows, no retry rung).
        dtype: the score format the kernel reads (``gvr_reference.keys.KEY_FORMATS``): its
            key space is the one the radix levels narrow (``[0, 0xFFFF]`` for 16-bit scores).
    """

    params: LadderParams
    parts: int = 1
    dtype: str = "float32"


@dataclass(frozen=True)
class RowTrace:
    """What the kernel does with one row.

    Attributes:
        path: the path taken.
        n: valid row length.
        t1, count1: first-rung key and its survivor count (``None`` when not reached); for a
            crowded rung the survivors are the keys above ``t1``.
        eq1: keys equal to ``t1`` (crowded rungs only; else 0).
        crowded: the sample showed ``t1`` as a crowded single-key class (:func:`crowded_rung`).
        t2, count2: retry-rung key and its survivor count (``None`` when not reached).
        sample_size: sampled scores (0 when unsampled or short).
        j1, j2: sample ranks of the rungs.
    """

    path: Path
    n: int
    t1: int | None = None
    count1: int | None = None
    t2: int | None = None
    count2: int | None = None
    sample_size: int = 0
    j1: int = 0
    j2: int = 0
    eq1: int = 0
    crowded: bool = False


def bitlen(x: int) -> int:
    """Number of significant bits of a non-negative integer (``bitlen(0) == 0``)."""
    return int(x).bit_length()


def _level(keys: np.ndarray, lo: int, hi: int) -> tuple[int, np.ndarray]:
    """One radix level: the shift and the 256-bin histogram of keys in ``[lo, hi]``."""
    shift = max(bitlen(hi - lo) - RADIX_BITS, 0)
    inside = keys[(keys >= lo) & (keys <= hi)].astype(np.int64)
    hist = np.bincount((inside - lo) >> shift, minlength=NUM_BINS)
    return shift, hist


def _crossing(hist: np.ndarray, target: int) -> tuple[int, int]:
    """Highest bin ``b`` whose suffix count reaches ``target``; returns ``(b, suffix(b + 1))``."""
    suffix = np.cumsum(hist[::-1])[::-1]
    reach = np.nonzero(suffix >= target)[0]
    if reach.size == 0:
        raise ValueError(f"histogram total {int(suffix[0])} is below the target {target}")
    b = int(reach[-1])
    above = int(suffix[b + 1]) if b + 1 < NUM_BINS else 0
    return b, above


def _bin_range(lo: int, hi: int, b: int, shift: int) -> tuple[int, int]:
    lo_b = lo + (b << shift)
    hi_b = min(hi, lo_b + (1 << shift) - 1)
    return lo_b, hi_b


def narrow_threshold(
    keys: np.ndarray, j: int, lo: int = 0, hi: int = 0xFFFFFFFF
) -> tuple[int, int]:
    """A rung from a sample: a key ``T`` with ``j <= #(keys >= T) <= 2j`` (or a single key).

    Radix narrowing from the key range ``[lo, hi]`` (``hi``: the key space's largest key); it
    stops as soon as the crossing bin's lower edge has at most ``2j`` sample keys at or above
    it, or the bin is a single key.

    Args:
        keys: uint32 sample keys.
        j: target rank from the top, ``1 <= j <= #(keys >= lo)``.
        lo: the lowest key of the range (keys below it are not candidates).
        hi: the largest key of the key space (``0xFFFF`` for 16-bit scores).

    Returns:
        ``(T, count)`` with ``count = #(keys >= T)``.
    """
    t, reached, _ = rung_with_ties(keys, j, lo, hi)
    return t, reached


def rung_with_ties(
    keys: np.ndarray, j: int, lo: int = 0, hi: int = 0xFFFFFFFF, reach: int | None = None
) -> tuple[int, int, int]:
    """:func:`narrow_threshold` plus the sample keys equal to ``T`` when the narrowing ended
    on a single-key bin (``0`` when it stopped on a wider bin): ``(T, count, ties)``.
    ``reach``: the most sample keys the rung may leave at or above it (default ``2 * j``;
    the first rung uses ``RowPlan.reach1``)."""
    reach = 2 * j if reach is None else reach
    above = 0
    while True:
        shift, hist = _level(keys, lo, hi)
        b, above_b = _crossing(hist, j - above)
        lo_b, hi_b = _bin_range(lo, hi, b, shift)
        reached = above + above_b + int(hist[b])
        if shift == 0 or reached <= reach:
            return lo_b, reached, int(hist[b]) if shift == 0 else 0
        above += above_b
        lo, hi = lo_b, hi_b


#: Bins of the linear level of a float32 sample rung (:func:`sample_rung`): the radix
#: histogram's words.
RUNG_BINS = NUM_BINS


def rung_bracket(keys: np.ndarray) -> Bracket | None:
    """The linear level's bracket of a float32 sample: from the smallest key of the window's
    sample scores to the largest (key 0, a lane before the window, does not count), with
    :data:`RUNG_BINS` bins (:func:`gvr_reference.bracket.bracket`); None where it cannot be
    formed: an end that is not a finite value (``-inf``, ``+inf``, NaN), fewer than two
    distinct values, or ends too close for the float scale; and None where the bracket's
    ``bias`` lies outside ``[2**22, 2**24)`` (a range narrow against its distance from zero,
    under about 500 units in the last place), where the edge arithmetic of
    :func:`gvr_reference.bracket.bin_edge` is not exact."""
    k64 = np.asarray(keys).astype(np.int64)
    inside = k64[k64 != 0]
    if inside.size == 0:
        return None
    br = bracket(int(inside.min()), int(inside.max()), RUNG_BINS)
    return br if br is not None and edge_exact(br) else None


def rung_bins(keys: np.ndarray, br: Bracket) -> np.ndarray:
    """Linear bins (int64) of a sample's keys under its :func:`rung_bracket`: the bracket bin
    (1 to ``RUNG_BINS - 1``), 0 for key 0 (a lane before the window)."""
    k64 = np.asarray(keys).astype(np.int64)
    inside = np.maximum(k64, br.lo).astype(np.uint32)
    return np.where(k64 < br.lo, 0, bracket_bins(inside, br))


def rung_edge(b: int, br: Bracket) -> int:
    """The rung of linear bin ``b``: the order key of its lower edge
    (:func:`gvr_reference.bracket.bin_edge`; 0 for bin 0). Every sample key of bin ``b`` or
    above is at least this key."""
    if b == 0:
        return 0
    return int(order_key(np.array([bin_edge(b, br)], np.float32))[0])


def sample_rung(
    keys: np.ndarray, j: int, reach: int, key_max: int = 0xFFFFFFFF
) -> tuple[int, int, int]:
    """The first rung of a streaming row from its sample: ``(T, count, ties)`` as
    :func:`rung_with_ties` (``count = #(keys >= T)``; on the linear level the histogram's
    count, which leaves out only keys equal to ``T`` binned below it).

    Float32 samples with a :func:`rung_bracket` take one *linear* level first: the
    :data:`RUNG_BINS` bins of :func:`rung_bins` spread the sample's value range evenly, and
    when the crossing bin ``b`` of ``j`` leaves at most ``reach`` sample keys (the usual case),
    ``T`` is its edge (:func:`rung_edge`). A radix level over the key bits lumps whole
    binades together (a gaussian row's top percent shares one top-byte bin with every score
    from 2 to 8) and needs a second level there. When the bin leaves more, radix levels go on
    over ``[rung_edge(b), max key]``, which holds every key of bin ``b`` and above (at least
    ``j``). 16-bit samples, and samples with no bracket, take the radix levels from
    ``[0, key_max]``.

    Any ``T`` is exact for the kernel (the pass counts the survivors it leaves); this only
    decides how many levels the narrowing takes. ``device.rung.sample_rung`` does the same
    arithmetic.

    Args:
        keys: uint32 sample keys (lanes before the window hold key 0).
        j: target rank from the top, ``1 <= j <= #(keys > 0)``.
        reach: the most sample keys the rung may leave at or above it (``>= j``).
        key_max: the key space's largest key.
    """
    br = rung_bracket(keys) if key_max == 0xFFFFFFFF else None
    if br is None:
        return rung_with_ties(keys, j, 0, key_max, reach)
    hist = np.bincount(rung_bins(keys, br), minlength=RUNG_BINS)
    b, above = _crossing(hist, j)
    t = rung_edge(b, br)
    if above + int(hist[b]) <= reach:
        return t, above + int(hist[b]), 0
    return rung_with_ties(keys, j, t, int(np.asarray(keys).max()), reach)


#: Bins of the linear level over a float32 row's staged survivors (:func:`linear_select`).
LINEAR_BINS = 2048
#: The most keys of that level's crossing bin that are staged apart and ranked.
LINEAR_CROSS_MAX = 128


@dataclass(frozen=True)
class LinearSelect:
    """The linear level over a row's staged survivors (:func:`linear_select`).

    Attributes:
        lo: the order key of the bracket's low end.
        crossing: the crossing bin of ``k``.
        above: survivors in higher bins (all selected; ``< k``).
        count: survivors in the crossing bin (``above + count >= k``).
        ranked: whether the crossing bin's keys were ranked (else all of them are selected:
            ``count == k - above``).
    """

    lo: int
    crossing: int
    above: int
    count: int
    ranked: bool


def linear_select(staged: np.ndarray, k: int, lo: int, hi: int) -> LinearSelect | None:
    """The CPU twin of the streaming family's selection over its staged survivors by one
    linear level (``gvr_kernels.device.linear``), or None where that level does not serve
    and the radix narrowing selects (16-bit rows aside, which never take it).

    The staged keys' values are mapped onto :data:`LINEAR_BINS` bins by the float32 bracket
    over ``[lo, hi]`` (:func:`gvr_reference.bracket.bracket`), keys above ``hi`` into the top
    bin; ``lo`` is the selection's low key, or the smallest staged key where ``lo`` is not a
    finite value's (an unsampled row selects from key 0). None when no bracket forms (an end
    that is not a finite value, ends too close for the float scale, a staged key that is not
    a finite value's) or when the crossing bin holds more than :data:`LINEAR_CROSS_MAX` keys
    and not exactly the ``k - above`` wanted.

    Args:
        staged: uint32 order keys of the staged survivors (``k <= staged.size``), all at
            least ``lo``.
        k: top-K size.
        lo, hi: the bracket's key range: ``hi`` the largest staged key, or for the row of a
            workspace split (``cfg.parts > 1``, no cluster) that took its first rung, the
            sample's largest key (:func:`sample_top`), which its finishing CTA bins by as it
            gathers the slab.
    """
    keys = np.asarray(staged, np.uint32)
    if lo < KEY_NEG_FLT_MAX:
        lo = int(keys.min())
    br = bracket(int(lo), int(hi), LINEAR_BINS)
    if br is None or int(keys.max()) > KEY_FLT_MAX:
        return None
    bins = np.minimum(bracket_bins(keys, br), LINEAR_BINS - 1)
    hist = np.bincount(bins, minlength=LINEAR_BINS)
    b, above, count = crossing(hist, k)
    ranked = count != k - above
    if ranked and count > LINEAR_CROSS_MAX:
        return None
    return LinearSelect(int(lo), b, above, count, ranked)


def crowd_min_ties(n: int, s: int, capacity: int, bits: int = 32, ops=None) -> int:
    """Sample ties that make a single-key rung *crowded* (:func:`crowded_rung`).

    float32: 2 (two sampled scores that are exactly equal betray a tie class: continuous
    scores almost never tie). 16-bit scores tie all the time (a bfloat16 gaussian row of
    262,144 scores holds about a dozen copies of every value near its top), so there the
    sample must show a class of at least half the staging, ``ties * n / s >= capacity / 2``:
    ``max(2, ceil(s * (capacity // 2) / n))``. Smaller classes stage like any other keys.

    Args:
        n, s: the row length and the sample size.
        capacity: the staging capacity of the configuration.
        bits: the score width (32 or 16).
        ops: ``max`` for the value type (``gvr_reference.ladder.PY_OPS`` by default), so the
            kernels trace the same formula.
    """
    if bits == 32:
        return 2
    mx = max if ops is None else ops.max
    return mx((s * (capacity // 2) + n - 1) // mx(n, 1), 2)


def crowded_rung(t: int, ties: int, key_max: int = 0xFFFFFFFF, min_ties: int = 2) -> bool:
    """Whether a rung from :func:`rung_with_ties` is a crowded single key.

    The narrowing ended on one key ``t`` that at least two sample keys share: the row likely
    holds a tie class at ``t`` (about ``ties * n / s`` scores), so the kernels stage the keys
    above it and complete the answer from its ties when fewer than ``k`` lie above. The NaN
    key (``key_max``, nothing above it) keeps the ordinary pass.

    Args:
        t, ties: the rung and its sample ties from :func:`rung_with_ties`.
        key_max: the key space's largest key, the NaN key (``0xFFFF`` for 16-bit scores).
        min_ties: sample ties that make it crowded (:func:`crowd_min_ties`).
    """
    return ties >= min_ties and t < key_max


def select_rule(keys: np.ndarray, k: int, lo: int = 0, hi: int = 0xFFFFFFFF) -> tuple[int, int]:
    """The kernel's exact selection rule over a candidate set.

    Given candidate keys of which at least ``k`` lie in ``[lo, hi]`` and none above ``hi``,
    returns ``(thr, need_eq)``: the top-K are every key ``> thr`` plus ``need_eq`` keys equal
    to ``thr``. ``#(keys > thr) == k - need_eq`` and ``#(keys == thr) >= need_eq``.

    Args:
        keys: uint32 candidate keys.
        k: how many to select.
        lo, hi: the key range known to hold the top-K (``hi`` at or above the maximum).

    Returns:
        ``(thr, need_eq)``.
    """
    need = k
    while True:
        shift, hist = _level(keys, lo, hi)
        b, above_b = _crossing(hist, need)
        lo_b, hi_b = _bin_range(lo, hi, b, shift)
        need -= above_b
        if shift == 0:
            return lo_b, need
        if need == int(hist[b]) and lo_b > 0:
            return lo_b - 1, 0
        lo, hi = lo_b, hi_b


def sample_positions(plan, vec: int = 4, lead: int = 0) -> np.ndarray:
    """Window positions of a row's sampled scores, in sample order (int64; positions before
    the window start, ``< 0``, are the lanes a misaligned vector 0 holds before it): the
    ``plan.sample_vecs`` vectors of :func:`gvr_reference.ladder.sample_vector`, ``vec`` scores
    each."""
    t = sample_vector(np.arange(plan.sample_vecs, dtype=np.int64), plan.sample_step)
    return (t[:, None] * vec + np.arange(vec)[None, :] - lead).reshape(-1)


def _sample_keys(keys: np.ndarray, plan, lead: int, vec: int = 4) -> np.ndarray:
    """Keys of the sampled vectors (``vec`` scores each); lanes before the window start get
    key 0."""
    pos = sample_positions(plan, vec, lead)
    out = np.zeros(pos.size, dtype=np.uint32)
    ok = pos >= 0
    out[ok] = keys[pos[ok]]
    return out


def simulate_row(values: np.ndarray, k: int, cfg: ModelConfig, lead: int = 0) -> RowTrace:
    """Predict the kernel path of one row.

    Args:
        values: float32 [n], the row's valid window (for a 16-bit ``cfg.dtype``, scores that are
            values of that format, e.g. a widened bfloat16 row).
        k: top-K size.
        cfg: the kernel configuration.
        lead: window start modulo ``cfg.params.vec`` (prefill rows); decode rows use 0.

    Returns:
        The :class:`RowTrace`.
    """
    n = int(values.shape[0])
    if n <= k:
        return RowTrace(Path.SHORT, n)
    p = cfg.params
    plan = row_plan(n, k, lead, p)
    fmt = key_format(cfg.dtype)
    keys = format_keys(np.ascontiguousarray(values, dtype=np.float32), fmt)
    if plan.unsampled:
        return RowTrace(Path.UNSAMPLED, n, t1=0, count1=n)
    sample = _sample_keys(keys, plan, lead, p.vec)
    t1, _, ties = sample_rung(sample, plan.j1, plan.reach1, fmt.key_max)
    min_ties = crowd_min_ties(n, int(sample.size), p.capacity, fmt.bits)
    crowded = crowded_rung(t1, ties, fmt.key_max, min_ties)
    eq1 = int(np.count_nonzero(keys == t1)) if crowded else 0
    count1 = int(np.count_nonzero(keys > t1 if crowded else keys >= t1))
    common = dict(n=n, t1=t1, count1=count1, sample_size=int(sample.size), j1=plan.j1, j2=plan.j2)
    common.update(eq1=eq1, crowded=crowded)
    if count1 > p.capacity:
        return RowTrace(Path.RESCUE_OVERFLOW, **common)
    if count1 >= k:
        return RowTrace(Path.FIRST, **common)
    if count1 + eq1 >= k:
        return RowTrace(Path.TIE, **common)
    # (a crowded rung whose tie scan found too few continues as an underestimate)
    if cfg.parts > 1:
        return RowTrace(Path.RESCUE_UNDERESTIMATE, **common)
    t2, _ = narrow_threshold(sample, plan.j2, 0, fmt.key_max)
    if t2 >= t1:
        return RowTrace(Path.RESCUE_UNDERESTIMATE, **common)
    count2 = int(np.count_nonzero(keys >= t2))
    common.update(t2=t2, count2=count2)
    if count2 < k:
        return RowTrace(Path.RESCUE_UNDERESTIMATE, **common)
    if count2 > p.capacity:
        return RowTrace(Path.RESCUE_OVERFLOW, **common)
    return RowTrace(Path.RETRY, **common)


@dataclass(frozen=True)
class SplitBins:
    """The survivor bins of a split row that met on them (:func:`split_bins`).

    Attributes:
        shift: the bins' shift: a survivor key ``x`` (``>= t1``) lies in bin
            ``min((x - t1) >> shift, 255)``.
        crossing: the crossing bin of ``k``: the highest bin whose suffix count reaches ``k``.
        above: survivors in the bins above it (``< k``): all of them are selected.
        count: survivors in the crossing bin (``above + count >= k``): the selection among
            them is the rule for the ``k - above`` slots left.
    """

    shift: int
    crossing: int
    above: int
    count: int


def sample_top(values: np.ndarray, k: int, cfg: ModelConfig, lead: int = 0) -> int:
    """The largest key of a sampled row's sample (the streaming kernel's ``Ctl.SMAX``; every
    CTA of a split row draws the same sample): the top of a cluster split's survivor bins
    (:func:`split_bins`) and of a workspace split's linear level (:func:`linear_select`).

    Args:
        values: float32 [n], the row's valid window (as :func:`simulate_row`), long enough to
            be sampled.
        k: top-K size.
        cfg: the kernel configuration.
        lead: window start modulo ``cfg.params.vec``.
    """
    plan = row_plan(int(values.shape[0]), k, lead, cfg.params)
    keys = format_keys(np.ascontiguousarray(values, dtype=np.float32), key_format(cfg.dtype))
    return int(_sample_keys(keys.astype(np.uint32), plan, lead, cfg.params.vec).max())


def split_bins(values: np.ndarray, k: int, cfg: ModelConfig, lead: int = 0) -> SplitBins | None:
    """The survivor bins a cluster split row meets on (the CPU twin of the streaming
    kernel's binned meet, ``StreamingTopK._cluster_meet``), or None for a row that does not
    meet on them. (A workspace split's last CTA gathers its slab instead and selects by the
    linear level: :func:`linear_select`.)

    A row cut across CTAs (``cfg.parts > 1``), with ``k >= SPLIT_BINS_MIN_K``, whose first
    rung ``t1`` came from its sample (not crowded) and kept between ``k`` and the capacity of
    survivors: the bins span the
    keys from ``t1`` to the sample's largest in 256 bins (``shift`` as one radix level of
    that range), the survivors above the largest saturating into the top bin. The bin is
    non-decreasing in the key, so the survivors above the crossing bin are among the top
    ``k`` and only the crossing bin is narrowed further.

    Args:
        values: float32 [n], the row's valid window (as :func:`simulate_row`).
        k: top-K size.
        cfg: the kernel configuration.
        lead: window start modulo ``cfg.params.vec``.
    """
    trace = simulate_row(values, k, cfg, lead)
    if cfg.parts <= 1 or k < SPLIT_BINS_MIN_K or trace.path != Path.FIRST or trace.crowded:
        return None
    fmt = key_format(cfg.dtype)
    keys = format_keys(np.ascontiguousarray(values, dtype=np.float32), fmt).astype(np.int64)
    smax = sample_top(values, k, cfg, lead)
    t1 = int(trace.t1)
    shift = max(bitlen(max(smax, t1) - t1) - RADIX_BITS, 0)
    survivors = keys[keys >= t1]
    hist = np.bincount(np.minimum((survivors - t1) >> shift, NUM_BINS - 1), minlength=NUM_BINS)
    crossing, above = _crossing(hist, k)
    return SplitBins(shift, crossing, above, int(hist[crossing]))


def simulate_windows(
    logits: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, cfg: ModelConfig
) -> list[RowTrace]:
    """Predict the kernel path of every row of a batch.

    Args:
        logits: float32 [rows, >= width] (any row stride).
        starts: int [rows], window starts (0 for decode rows).
        lengths: int [rows], valid lengths.
        k: top-K size.
        cfg: the kernel configuration.

    Returns:
        One :class:`RowTrace` per row.
    """
    traces = []
    for r in range(logits.shape[0]):
        s, n = int(starts[r]), int(lengths[r])
        lead = s & (cfg.params.vec - 1)
        traces.append(simulate_row(logits[r, s : s + n], k, cfg, lead=lead))
    return traces
