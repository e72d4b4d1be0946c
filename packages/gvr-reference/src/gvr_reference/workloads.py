"""Seeded workload generators for top-K tests and benchmarks.

Value families
--------------
Each family is a function ``(rng, rows, width, k, *, lengths=None) -> float32 [rows, width]``
registered in :data:`FAMILIES`. ``rng`` is a ``numpy.random.Generator``; ``lengths`` (int
``[rows]``, default: the width) is each row's valid length, so that positional features (a
peak window at 3/4 of the row, a ramp, a ``-inf`` tail) and counts (``more than k`` of
something) refer to the part of the row a top-K call will read. Columns at or past a row's
length hold ordinary gaussian values (the batch builders overwrite them with poison).

Families that treat rows differently cycle through their variants by row index (``r % 3``
etc.), so a batch of a few rows holds every variant.

Batch builders
--------------
:func:`make_decode_batch`, :func:`make_prefill_batch` and :func:`make_dense_batch` return
frozen dataclasses with the logits (a view into a possibly wider arena), the call arguments,
the :class:`~gvr_reference.windows.RowWindows`, and ``check`` / ``reference`` helpers. With
``poison=True`` every element outside a row's window, including the arena padding past the
width and the three elements before a prefill window's start, is ``+3e38``: larger than every
value of most families, so any out-of-window read changes the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _checks
from .keys import key_format, round_to_format
from .oracle import topk_windows
from .validate import ValidationReport, check_topk
from .windows import RowWindows, decode_windows

__all__ = [
    "FAMILIES",
    "TAIL_FAMILIES",
    "POISON",
    "LENGTH_MODES",
    "family_names",
    "make_logits",
    "DecodeBatch",
    "PrefillBatch",
    "DenseBatch",
    "make_decode_batch",
    "make_prefill_batch",
    "make_dense_batch",
]

POISON = np.float32(3e38)
"""Value written outside every row window when ``poison=True``."""

LENGTH_MODES = ("ragged", "full", "edge")
"""Row-length modes of the batch builders."""

FLT_MAX_BITS = 0x7F7FFFFF

Family = Callable[..., np.ndarray]


def _as_rng(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def _row_lengths(lengths: np.ndarray | None, rows: int, width: int) -> np.ndarray:
    if lengths is None:
        return np.full(rows, width, np.int64)
    n = np.asarray(lengths, np.int64)
    if n.shape != (rows,) or (n < 0).any() or (n > width).any():
        raise ValueError(f"lengths must be {rows} values in [0, {width}], got {lengths!r}")
    return n


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


def _rowwise(fill: Callable[[np.random.Generator, int, int, int], np.ndarray]) -> Family:
    """Turn ``fill(rng, n, k, r) -> float32 [n]`` (the valid part of row ``r``) into a family;
    columns past the length get gaussian values."""

    def family(rng, rows, width, k, *, lengths=None):
        n_rows = _row_lengths(lengths, rows, width)
        out = rng.standard_normal((rows, width), dtype=np.float32)
        for r in range(rows):
            n = int(n_rows[r])
            if n:
                out[r, :n] = fill(rng, n, k, r)
        return out

    family.__name__ = fill.__name__
    family.__doc__ = fill.__doc__
    return family


def _scatter(rng: np.random.Generator, row: np.ndarray, count: int, value) -> np.ndarray:
    """Write ``value`` at ``count`` distinct random positions of ``row``; returns them."""
    count = min(count, row.shape[0])
    pos = rng.choice(row.shape[0], size=count, replace=False)
    row[pos] = value
    return pos


# --------------------------------------------------------------------------------------------
# Value families
# --------------------------------------------------------------------------------------------


def gaussian(rng, rows, width, k, *, lengths=None):
    """Standard normal scores. The easy, well-spread baseline: almost no ties, the K-th value
    moves smoothly with K."""
    _row_lengths(lengths, rows, width)
    return rng.standard_normal((rows, width), dtype=np.float32)


def dsa_like(rng, rows, width, k, *, lengths=None):
    """DSA lightning-indexer-like scores ``sum_h w_h * relu(q_h . k_s)``.

    Four heads of dimension 16; keys drift slowly along the sequence, position 0 is an
    attention sink aligned with every query, and the last positions get a recency bonus.
    Even rows use positive head weights (so every position whose four dot products are
    negative scores exactly 0: a large zero tie class), odd rows signed weights. Models the
    real indexer's mass at both ends of the row and its concentrated values (most of a row
    shares the K-th element's top key bits), which defeats a fixed first radix digit.
    """
    n_rows = _row_lengths(lengths, rows, width)
    heads, dim = 4, 16
    # A random walk scaled to about 0.5 over the whole row, whatever the width.
    drift = np.cumsum(rng.standard_normal((width, dim)), axis=0) * (0.5 / np.sqrt(max(width, 1)))
    keys = (rng.standard_normal((width, dim)) + drift).astype(np.float32)
    sink = rng.standard_normal(dim).astype(np.float32)
    sink /= np.linalg.norm(sink)
    if width:
        keys[0] = 6.0 * sink
    q = rng.standard_normal((rows, heads, dim)).astype(np.float32) + 0.5 * sink
    w = rng.standard_normal((rows, heads)).astype(np.float32)
    w[0::2] = np.abs(w[0::2])
    out = np.empty((rows, width), np.float32)
    chunk = max(1, (1 << 22) // max(1, heads * width))
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        dots = (q[r0:r1].reshape(-1, dim) @ keys.T).reshape(r1 - r0, heads, width)
        np.maximum(dots, 0.0, out=dots)
        out[r0:r1] = np.einsum("rh,rhs->rs", w[r0:r1], dots)
    pos = np.arange(width)
    for r in range(rows):
        n = int(n_rows[r])
        if n:
            scale = float(np.abs(out[r, :n]).max()) + 1.0
            # Exactly zero beyond the last 1,024 positions, so the ReLU zeros stay exact.
            age = n - 1 - pos[:n]
            bonus = np.where(age < 1024, np.exp(-age / 128.0), 0.0).astype(np.float32)
            out[r, :n] += np.float32(scale) * bonus * np.sign(w[r].sum() + 1e-3)
    return out


@_rowwise
def sink_window(rng, n, k, r):
    """Locality: standard normal scores, an attention sink (the first 64 positions, +8) and a
    recent window (the last ``min(4096, n // 4)`` positions, +6), the shape of DSA decode
    rows whose top-K lives in few blocks (what block-skip exists for;
    ``gvr_reference.blockskip``)."""
    row = rng.standard_normal(n).astype(np.float32)
    row[: min(64, n)] += np.float32(8)
    row[n - min(4096, n // 4) :] += np.float32(6)
    return row


@_rowwise
def tie_flood(rng, n, k, r):
    """A handful of distinct values with huge multiplicities: fewer than ``k`` copies of the
    top value, then a tie class at the K-th value several times larger than ``k`` (when the
    row is long enough), then low values. Breaks any design that buffers the K-th value's
    tie class in a fixed-size list."""
    levels = np.sort(rng.standard_normal(4).astype(np.float32))[::-1]
    row = np.full(n, levels[3], np.float32)
    top = int(rng.integers(0, max(1, k)))
    flood = max(4 * k, n // 2)
    perm = rng.permutation(n)
    row[perm[:top]] = levels[0]
    row[perm[top : top + flood]] = levels[1]
    row[perm[top + flood : top + flood + n // 8]] = levels[2]
    return row


@_rowwise
def two_valued(rng, n, k, r):
    """Two values; the high one has about ``k`` copies (0.5 k to 1.5 k), so the K-th value is
    either the high or the low value, each with a big tie class."""
    hi, lo = np.float32(1.0 + rng.random()), np.float32(-rng.random())
    row = np.full(n, lo, np.float32)
    _scatter(rng, row, int(k * rng.uniform(0.5, 1.5)), hi)
    return row


@_rowwise
def constant(rng, n, k, r):
    """Every element equal (0.0, -0.0, 1.0 or a random value by row): the whole row is one tie
    class; a deterministic top-K is the first ``k`` indices."""
    choices = (np.float32(0.0), np.float32(-0.0), np.float32(1.0), rng.standard_normal(1)[0])
    return np.full(n, choices[r % 4], np.float32)


@_rowwise
def hidden_peaks(rng, n, k, r):
    """Gaussian background with ``k`` to ``1.5 k`` large distinct values packed in a narrow
    window centred at 3/4 of the row. A sample that misses the window, or a scan that stops
    early, finds a wrong threshold."""
    row = rng.standard_normal(n, dtype=np.float32)
    peaks = min(n, k + int(rng.integers(0, k // 2 + 1)))
    lo = min(max(0, (3 * n) // 4 - peaks // 2), n - peaks)
    row[lo : lo + peaks] = 10.0 + rng.random(peaks).astype(np.float32)
    return row


@_rowwise
def position_skew(rng, n, k, r):
    """An increasing ramp plus small noise: the top-K sits at the end of the row. Catches
    reads that stop short of the row length, and favours position-biased samples."""
    ramp = np.linspace(0.0, 8.0, n, dtype=np.float32)
    return ramp + np.float32(0.05) * rng.standard_normal(n, dtype=np.float32)


@_rowwise
def pos_inf(rng, n, k, r):
    """Gaussian with ``+inf`` sprinkled: fewer than ``k`` (row 0 mod 3), more than ``k``
    (row 1 mod 3: the K-th value is +inf with a big tie class), exactly ``k`` (row 2 mod 3).
    Breaks float arithmetic on the threshold (``inf - inf``) and samples that clamp it."""
    row = rng.standard_normal(n, dtype=np.float32)
    count = (int(rng.integers(1, max(2, k))), k + 1 + int(rng.integers(0, k + 1)), k)[r % 3]
    _scatter(rng, row, count, np.inf)
    return row


@_rowwise
def neg_inf(rng, n, k, r):
    """``-inf`` in three shapes: sprinkled over 10% of the row (row 0 mod 3), a ``-inf`` tail
    over the last 40-90% (row 1 mod 3), and fewer than ``k`` finite values so the K-th value
    is ``-inf`` (row 2 mod 3). The bottom tie class at ``-inf`` must still be selected."""
    row = rng.standard_normal(n, dtype=np.float32)
    variant = r % 3
    if variant == 0:
        _scatter(rng, row, n // 10, -np.inf)
    elif variant == 1:
        row[n - int(n * rng.uniform(0.4, 0.9)) :] = -np.inf
    else:
        finite = int(rng.integers(0, max(1, k)))
        row[:] = -np.inf
        _scatter(rng, row, finite, rng.standard_normal(min(finite, n)).astype(np.float32))
    return row


@_rowwise
def denormals(rng, n, k, r):
    """Subnormal values of both signs (random mantissas, exponent 0) plus a few +-0: the
    K-th value is subnormal. Breaks flush-to-zero arithmetic and float comparisons compiled
    with denormals-are-zero."""
    mant = rng.integers(1, 1 << 23, n, dtype=np.uint32)
    sign = rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    row = _from_bits(mant | sign).copy()
    _scatter(rng, row, max(1, n // 64), np.float32(0.0))
    _scatter(rng, row, max(1, n // 64), np.float32(-0.0))
    return row


@_rowwise
def signed_zero(rng, n, k, r):
    """Fewer than ``k`` positive values, then a flood (``>= 2k``) of zeros with random sign,
    then negatives: the K-th value is zero and -0.0 / +0.0 must form one tie class."""
    row = -(np.abs(rng.standard_normal(n, dtype=np.float32)) + np.float32(0.1))
    perm = rng.permutation(n)
    pos = int(rng.integers(0, max(1, k)))
    zeros = max(2 * k, n // 3)
    row[perm[:pos]] = np.abs(rng.standard_normal(min(pos, n)).astype(np.float32)) + 0.1
    z = perm[pos : pos + zeros]
    row[z] = np.where(rng.random(z.shape[0]) < 0.5, np.float32(-0.0), np.float32(0.0))
    return row


_NAN_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)


@_rowwise
def nan(rng, n, k, r):
    """Gaussian with NaN of several signs and payloads (quiet, signalling, negative):
    fewer than ``k`` (row 0 mod 3), more than ``k`` (row 1 mod 3), exactly ``k`` (row 2 mod 3).
    NaN ranks above +inf as in ``torch.topk``; every NaN is one tie class."""
    row = rng.standard_normal(n, dtype=np.float32)
    count = (int(rng.integers(1, max(2, k))), k + 1 + int(rng.integers(0, k + 1)), k)[r % 3]
    count = min(count, n)
    pos = rng.choice(n, size=count, replace=False)
    # Through the bit view: a float copy may quiet signalling NaNs.
    row.view(np.uint32)[pos] = _NAN_BITS[rng.integers(0, _NAN_BITS.shape[0], count)]
    return row


@_rowwise
def quantized(rng, n, k, r):
    """Gaussian rounded to bfloat16 (even rows; 8 significant bits, at most a few thousand
    distinct values) or to 4 significant bits (odd rows, fp8-like, a few hundred): the K-th
    value's tie class is large on long rows and the low key bits are all zero, so a radix
    pass on them separates nothing."""
    bits = rng.standard_normal(n, dtype=np.float32).view(np.uint32).astype(np.uint64)
    drop = 16 if r % 2 == 0 else 20
    half = (1 << (drop - 1)) - 1
    bits = (bits + half + ((bits >> drop) & 1)) >> drop << drop  # round to nearest even
    return _from_bits(bits.astype(np.uint32)).copy()


@_rowwise
def near_flt_max(rng, n, k, r):
    """A flood of 64 distinct values within 64 ulps of ``+FLT_MAX`` (even rows, with 10%
    ordinary values) or of ``-FLT_MAX`` (odd rows, every value near the bottom of the float
    range; there the +3e38 poison outranks all of them). Breaks arithmetic that overflows near
    the top of the range and key maps that collapse neighbouring patterns."""
    if r % 2 == 0:
        row = _from_bits(FLT_MAX_BITS - rng.integers(0, 64, n).astype(np.uint32)).copy()
        _scatter(rng, row, n // 10, rng.standard_normal(n // 10).astype(np.float32))
    else:
        row = _from_bits((0x80000000 | FLT_MAX_BITS) - rng.integers(0, 64, n).astype(np.uint32))
        row = row.copy()
    return row


@_rowwise
def all_equal_but_few(rng, n, k, r):
    """Every score equal but fewer than ``k`` higher distinct ones: the K-th value is the
    common one, and its tie class is the rest of the row (a hidden peak over a flat row)."""
    row = np.full(n, np.float32(rng.standard_normal()), np.float32)
    few = int(rng.integers(0, max(1, k)))
    _scatter(rng, row, few, row[0] + np.float32(1.0) + rng.random(min(few, n)).astype(np.float32))
    return row


@_rowwise
def few_finite(rng, n, k, r):
    """Every score ``-inf`` but fewer than ``k`` finite ones (a masked row): the K-th value is
    ``-inf`` with a tie class of nearly the whole row."""
    row = np.full(n, -np.inf, np.float32)
    finite = int(rng.integers(0, max(1, k)))
    _scatter(rng, row, finite, rng.standard_normal(min(finite, n)).astype(np.float32))
    return row


@_rowwise
def few_ulps(rng, n, k, r):
    """Scores within 4 ulps of one value (a narrow value range: five distinct keys), so every
    key's tie class is about a fifth of the row."""
    base = np.float32(rng.standard_normal()).view(np.uint32)
    return _from_bits(base + rng.integers(0, 5, n).astype(np.uint32)).copy()


@_rowwise
def pos_inf_flood(rng, n, k, r):
    """Gaussian with more than ``k`` ``+inf`` (between ``k + 1`` and half the row): the K-th
    value is ``+inf``, and its tie class is far larger than ``k`` on long rows."""
    row = rng.standard_normal(n, dtype=np.float32)
    _scatter(rng, row, int(rng.integers(k + 1, max(k + 2, n // 2 + 1))), np.inf)
    return row


@_rowwise
def levels16(rng, n, k, r):
    """Gaussian quantized to 16 levels (a low-precision producer): every tie class is huge and
    the top level holds about 3% of the row."""
    edges = np.linspace(-2.0, 2.0, 15, dtype=np.float32)
    levels = np.arange(16, dtype=np.float32) * np.float32(0.25) - np.float32(1.875)
    return levels[np.searchsorted(edges, rng.standard_normal(n, dtype=np.float32))]


FAMILIES: dict[str, Family] = {
    "gaussian": gaussian,
    "dsa_like": dsa_like,
    "sink_window": sink_window,
    "tie_flood": tie_flood,
    "two_valued": two_valued,
    "constant": constant,
    "hidden_peaks": hidden_peaks,
    "position_skew": position_skew,
    "pos_inf": pos_inf,
    "neg_inf": neg_inf,
    "denormals": denormals,
    "signed_zero": signed_zero,
    "nan": nan,
    "quantized": quantized,
    "near_flt_max": near_flt_max,
    "all_equal_but_few": all_equal_but_few,
    "few_finite": few_finite,
    "few_ulps": few_ulps,
    "pos_inf_flood": pos_inf_flood,
    "levels16": levels16,
}
"""Value families by name."""

#: The families whose K-th value sits in a huge tie class or a narrow value range (the slow
#: tail of a staging design): the tail benchmark and the tie-path device tests use them.
TAIL_FAMILIES = (
    "constant",
    "two_valued",
    "all_equal_but_few",
    "few_finite",
    "few_ulps",
    "pos_inf_flood",
    "levels16",
)


def family_names() -> list[str]:
    """Names of the registered value families."""
    return list(FAMILIES)


def make_logits(
    rng: np.random.Generator | int,
    family: str,
    rows: int,
    width: int,
    k: int,
    lengths: np.ndarray | None = None,
) -> np.ndarray:
    """Contiguous float32 ``[rows, width]`` scores of a named family.

    Raises:
        ValueError: unknown family or bad sizes.
    """
    rng = _as_rng(rng)
    fn = _family(family)
    rows, width = _check_size(rows, "rows"), _check_size(width, "width")
    k = _checks.check_k(k)
    return np.ascontiguousarray(fn(rng, rows, width, k, lengths=lengths), dtype=np.float32)


def _family(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {name!r}")
    return FAMILIES[name]


def _check_size(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _arena(rows: int, width: int, row_stride: int | None, poison: bool):
    """A ``[rows, row_stride]`` arena (poison-filled, or zeros) and its ``[:, :width]`` view."""
    stride = width if row_stride is None else _check_size(row_stride, "row_stride")
    if stride < width:
        raise ValueError(f"row_stride must be >= width={width}, got {stride}")
    arena = np.full((rows, stride), POISON if poison else 0.0, np.float32)
    return arena, arena[:, :width], stride


def _edge_targets(k: int, width: int) -> np.ndarray:
    return np.clip(np.array([k - 1, k, k + 1, 0, 1, width, width - 1]), 0, width)


def _fill(view, values, windows: RowWindows, poison: bool) -> None:
    """Copy each window's family values into ``view``; the rest keeps the arena's content
    (poison), or gets the family values when ``poison`` is off."""
    if not poison:
        view[...] = values
        return
    for r in range(windows.rows):
        s, n = int(windows.starts[r]), int(windows.lengths[r])
        view[r, s : s + n] = values[r, :n]


def _round(arena: np.ndarray, dtype: str) -> None:
    """Round every score of ``arena`` to ``dtype`` in place (float32: nothing to do)."""
    fmt = key_format(dtype)
    if fmt.bits != 32:
        arena[...] = round_to_format(arena, fmt)


@dataclass(frozen=True)
class _Batch:
    logits: np.ndarray
    arena: np.ndarray
    k: int
    width: int
    row_stride: int
    windows: RowWindows
    family: str
    #: the score format the values were rounded to (``gvr_reference.keys.KEY_FORMATS``); the
    #: arrays hold its exact float32 widening
    dtype: str = "float32"

    @property
    def rows(self) -> int:
        """Number of logits rows."""
        return int(self.logits.shape[0])

    def check(self, indices: np.ndarray, values: np.ndarray | None = None) -> ValidationReport:
        """Validate an answer for this batch (see :func:`gvr_reference.validate.check_topk`)."""
        return check_topk(self.logits, self.windows, self.k, indices, values, self.dtype)

    def reference(self, **options):
        """The oracle's answer for this batch (options as in
        :func:`gvr_reference.oracle.topk_windows`)."""
        return topk_windows(self.logits, self.windows, self.k, dtype=self.dtype, **options)


@dataclass(frozen=True)
class DecodeBatch(_Batch):
    """A decode call: ``logits`` float32 ``[batch * next_n, width]`` (a view of ``arena``
    ``[rows, row_stride]``), ``kv_lens`` int32 ``[batch]``, ``next_n``, ``compress_ratio``,
    ``k``, the row ``windows`` and the ``family`` name."""

    kv_lens: np.ndarray | None = None
    next_n: int = 1
    compress_ratio: int = 1


@dataclass(frozen=True)
class PrefillBatch(_Batch):
    """A prefill call: ``logits`` float32 ``[rows, width]``, ``row_starts`` / ``row_ends``
    int32 ``[rows]``, ``k``, the ``windows`` and the ``family`` name."""

    row_starts: np.ndarray | None = None
    row_ends: np.ndarray | None = None


@dataclass(frozen=True)
class DenseBatch(_Batch):
    """A dense call: ``logits`` float32 ``[rows, width]``, optional ``lengths`` int32
    ``[rows]`` (None: full rows), ``k``, the ``windows`` and the ``family`` name."""

    lengths: np.ndarray | None = None


def make_decode_batch(
    rng: np.random.Generator | int,
    *,
    batch: int,
    next_n: int = 1,
    compress_ratio: int = 1,
    k: int,
    width: int,
    row_stride: int | None = None,
    family: str = "gaussian",
    lengths: str = "ragged",
    poison: bool = True,
    dtype: str = "float32",
) -> DecodeBatch:
    """A decode batch of ``batch`` requests x ``next_n`` rows.

    ``kv_lens`` (total, uncompressed KV lengths) by ``lengths`` mode:

    - ``"ragged"``: uniform in ``[0, width * compress_ratio + next_n]``, so row lengths spread
      over ``[0, width]`` (long ones clamped to the width);
    - ``"full"``: every row has length ``width``;
    - ``"edge"``: requests cycle through last-row lengths ``k-1, k, k+1, 0, 1, width,
      width-1`` and ``kv_len < next_n`` (rows that are empty or nearly so), each with a random
      remainder below ``compress_ratio``.

    Args:
        rng: a numpy Generator or an int seed.
        batch: number of requests, >= 0.
        next_n: rows per request, >= 1.
        compress_ratio: power of two >= 1.
        k: top-K size, >= 1.
        width: logits width (any value, not only multiples of 4).
        row_stride: arena row pitch in elements (>= width; default width). A larger stride
            makes ``logits`` a strided view of a wider arena.
        family: a name in :data:`FAMILIES`.
        lengths: ``"ragged"``, ``"full"`` or ``"edge"``.
        poison: write ``+3e38`` beyond every row's length and in the arena padding.
        dtype: ``"float32"``, or ``"bfloat16"`` / ``"float16"``: every score (poison included)
            is rounded to that format (:func:`gvr_reference.keys.round_to_format`) and the
            arrays hold its float32 widening (upload them with ``.to(dtype)``: exact).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rng = _as_rng(rng)
    batch, width = _check_size(batch, "batch"), _check_size(width, "width")
    next_n = _checks.check_next_n(next_n)
    cr = _checks.check_compress_ratio(compress_ratio)
    k = _checks.check_k(k)
    fn = _family(family)
    if lengths == "ragged":
        kv = rng.integers(0, width * cr + next_n + 1, batch)
    elif lengths == "full":
        kv = np.full(batch, width * cr + next_n - 1)
    elif lengths == "edge":
        targets = _edge_targets(k, width)
        kv = np.empty(batch, np.int64)
        for b in range(batch):
            slot = b % (targets.shape[0] + 1)
            if slot == targets.shape[0]:
                kv[b] = rng.integers(0, next_n)
            else:
                kv[b] = targets[slot] * cr + rng.integers(0, cr)
    else:
        raise ValueError(f"lengths must be one of {LENGTH_MODES}, got {lengths!r}")
    kv_lens = kv.astype(np.int32)
    rows = batch * next_n
    windows = decode_windows(kv_lens, next_n, cr, width)
    arena, view, stride = _arena(rows, width, row_stride, poison)
    _fill(view, fn(rng, rows, width, k, lengths=windows.lengths), windows, poison)
    _round(arena, dtype)
    return DecodeBatch(
        logits=view,
        arena=arena,
        k=k,
        width=width,
        row_stride=stride,
        windows=windows,
        family=family,
        dtype=dtype,
        kv_lens=kv_lens,
        next_n=next_n,
        compress_ratio=cr,
    )


def make_prefill_batch(
    rng: np.random.Generator | int,
    *,
    rows: int,
    k: int,
    width: int,
    family: str = "gaussian",
    row_stride: int | None = None,
    misaligned: bool = True,
    lengths: str = "ragged",
    poison: bool = True,
    dtype: str = "float32",
) -> PrefillBatch:
    """A prefill batch: row ``r`` selects from ``[row_starts[r], row_ends[r])``.

    Window lengths by mode: ``"ragged"`` uniform in ``[0, width]``, ``"full"`` as long as the
    start allows (``width - start``), ``"edge"`` cycling through ``k-1, k, k+1, 0, 1, width,
    width-1``. Starts are uniform over the positions that fit; with ``misaligned`` a start
    that is a multiple of 4 is moved by 1-3 when the window still fits (a kernel that rounds
    the start down to a 16-byte boundary must mask the lanes before it), and ``"full"`` rows
    start at 1, 2 or 3.

    Args:
        rng: a numpy Generator or an int seed.
        rows: number of rows, >= 0.
        k: top-K size, >= 1.
        width: logits width.
        family: a name in :data:`FAMILIES`.
        row_stride: arena row pitch (>= width; default width).
        misaligned: avoid starts that are multiples of 4.
        lengths: ``"ragged"``, ``"full"`` or ``"edge"``.
        poison: write ``+3e38`` outside every window (including the 3 elements before each
            start) and in the arena padding.
        dtype: the score format, as in :func:`make_decode_batch`.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rng = _as_rng(rng)
    rows, width = _check_size(rows, "rows"), _check_size(width, "width")
    k = _checks.check_k(k)
    fn = _family(family)
    if lengths == "ragged":
        n = rng.integers(0, width + 1, rows)
    elif lengths == "full":
        n = np.full(rows, width) - (np.arange(rows) % 3 + 1 if misaligned else 0)
        n = np.clip(n, 0, width)
    elif lengths == "edge":
        targets = _edge_targets(k, width)
        n = targets[np.arange(rows) % targets.shape[0]]
    else:
        raise ValueError(f"lengths must be one of {LENGTH_MODES}, got {lengths!r}")
    starts = np.empty(rows, np.int64)
    for r in range(rows):
        room = width - int(n[r])
        s = width - int(n[r]) if lengths == "full" else int(rng.integers(0, room + 1))
        if misaligned and s % 4 == 0:
            shift = int(rng.integers(1, 4))
            if s + shift <= room:
                s += shift
            elif s - shift >= 0:
                s -= shift
        starts[r] = s
    row_starts = starts.astype(np.int32)
    row_ends = (starts + n).astype(np.int32)
    windows = RowWindows(starts, n)
    arena, view, stride = _arena(rows, width, row_stride, poison)
    _fill(view, fn(rng, rows, width, k, lengths=n), windows, poison)
    _round(arena, dtype)
    return PrefillBatch(
        logits=view,
        arena=arena,
        k=k,
        width=width,
        row_stride=stride,
        windows=windows,
        family=family,
        dtype=dtype,
        row_starts=row_starts,
        row_ends=row_ends,
    )


def make_dense_batch(
    rng: np.random.Generator | int,
    *,
    rows: int,
    k: int,
    width: int,
    family: str = "gaussian",
    row_stride: int | None = None,
    lengths: str | None = None,
    poison: bool = True,
    dtype: str = "float32",
) -> DenseBatch:
    """A dense batch: full rows (``lengths=None``, the call passes no lengths) or per-row
    lengths (``"ragged"``, ``"full"``, ``"edge"`` as in :func:`make_prefill_batch`, passed as an
    int32 array); ``dtype`` as in :func:`make_decode_batch`.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rng = _as_rng(rng)
    rows, width = _check_size(rows, "rows"), _check_size(width, "width")
    k = _checks.check_k(k)
    fn = _family(family)
    if lengths is None or lengths == "full":
        n = np.full(rows, width, np.int64)
    elif lengths == "ragged":
        n = rng.integers(0, width + 1, rows)
    elif lengths == "edge":
        targets = _edge_targets(k, width)
        n = targets[np.arange(rows) % targets.shape[0]]
    else:
        raise ValueError(f"lengths must be None or one of {LENGTH_MODES}, got {lengths!r}")
    windows = RowWindows(np.zeros(rows, np.int64), n)
    arena, view, stride = _arena(rows, width, row_stride, poison)
    _fill(view, fn(rng, rows, width, k, lengths=n), windows, poison)
    _round(arena, dtype)
    return DenseBatch(
        logits=view,
        arena=arena,
        k=k,
        width=width,
        row_stride=stride,
        windows=windows,
        family=family,
        dtype=dtype,
        lengths=None if lengths is None else n.astype(np.int32),
    )
