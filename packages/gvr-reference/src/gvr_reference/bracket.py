"""The float32 bracket map: scores onto linear histogram bins by one IEEE fused multiply-add.

A bracket over the order keys ``[lo, top]`` of two finite scores ``vlo < vmax`` maps a score
``v`` to ``t = fma(v, scale, bias)`` with ``scale = (bins - 4) / (vmax - vlo)`` and
``bias = fma(-vlo, scale, 2**23 + 2)``: an integer-valued float32 whose bits less those of
``2**23`` are the score's bin (about 2 for ``vlo``, ``bins - 2`` for ``vmax``). A correctly
rounded ``fma`` by a positive scale is monotone, so the bin is a non-decreasing function of the
score: bins order scores as a radix level orders keys, at a resolution set by the value range
rather than by the key bits. The register-resident and cluster-register families bin their
rows this way (:mod:`gvr_reference.register_model`), the streaming family the first level of
its sample rung (:func:`gvr_reference.model.sample_rung`). Every formula is the kernels'
(``gvr_kernels.device.bracket``): ``sub.rn.f32``, ``div.rn.f32`` and ``fma.rn.f32``, IEEE
float32 round-to-nearest, subnormals kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keys import key_to_float

__all__ = [
    "BRACKET_BINS",
    "BIN0_BITS",
    "KEY_FLT_MAX",
    "KEY_NEG_FLT_MAX",
    "Bracket",
    "fma32",
    "bracket",
    "bracket_bins",
    "bin_edge",
    "EDGE_BIAS_MIN",
    "EDGE_BIAS_MAX",
    "edge_exact",
    "crossing",
]

#: Bins of the register-resident and cluster-register families' bracket histogram (scores
#: below the bracket's low end are in a bin at most the low end's, or in none).
BRACKET_BINS = 2048
#: float32 bits of ``2**23``: a mapped score ``t`` in ``[2**23, 2**24)`` is an integer, and
#: its bits less these are its bin.
BIN0_BITS = 0x4B000000
#: Order keys of +FLT_MAX and -FLT_MAX: the bracket's ends must lie in between.
KEY_FLT_MAX = 0xFF7FFFFF
KEY_NEG_FLT_MAX = 0x00800000


@dataclass(frozen=True)
class Bracket:
    """The float32 map of a row's scores onto the bracket histogram's bins.

    Attributes:
        lo: the order key of the bracket's low end.
        scale: ``(bins - 4) / (vmax - vlo)`` in float32 (positive, finite).
        bias: ``fma(-vlo, scale, 2**23 + 2)`` in float32.
    """

    lo: int
    scale: np.float32
    bias: np.float32


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (``fma.rn.f32``), elementwise over float32
    arrays (subnormals kept, overflow to infinities, NaN where IEEE gives one).

    The product of two float32 values is exact in float64; the float64 sum is corrected by
    its exact error (Knuth's TwoSum) where it falls on a float32 rounding midpoint, the only
    case where rounding twice differs from rounding once."""
    a, b, c = (np.asarray(x, np.float32) for x in (a, b, c))
    with np.errstate(over="ignore", invalid="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        r = s.astype(np.float32)
        # an overflow to infinity sits at 2**128 for the midpoint test
        r64 = r.astype(np.float64)
        r64 = np.where(np.isinf(r64), np.copysign(2.0**128, r64), r64)
        # the float32 neighbour of r on the side of s, and the midpoint between them
        other = np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)))
        mid = (r64 + other.astype(np.float64)) / 2
        fix = np.isfinite(s) & np.isfinite(err) & (s != r64) & (s == mid) & (err != 0)
        # on the midpoint: the exact sum lies on the side of its error's sign
        toward = np.where(err > 0, np.maximum(r, other), np.minimum(r, other))
        return np.where(fix, toward, r).astype(np.float32)


def bracket(lo: int, top: int, bins: int = BRACKET_BINS) -> Bracket | None:
    """The bracket of keys ``[lo, top]``, or None when it cannot be formed: an end outside
    the finite values, ``top <= lo``, an infinite width or scale, the low end mapped below
    bin 1 or the top above bin ``bins - 1``.

    The arithmetic is the kernel's (``device.bracket.bracket_setup``): ``sub.rn.f32``,
    ``div.rn.f32`` and ``fma.rn.f32``, IEEE float32 round-to-nearest, subnormals kept."""
    lo, top = int(lo), int(top)
    if not KEY_NEG_FLT_MAX <= lo < top <= KEY_FLT_MAX:
        return None
    vlo, vmax = key_to_float(np.array([lo, top], np.uint32))
    with np.errstate(over="ignore", divide="ignore"):
        width = np.float32(vmax - vlo)
        scale = np.float32(np.float32(bins - 4) / width)
    if not (np.isfinite(width) and np.isfinite(scale)):
        return None
    bias = fma32(-vlo, scale, np.float32(2.0**23 + 2))[()]
    ends = fma32(np.array([vlo, vmax], np.float32), scale, bias).view(np.int32)
    if not (ends[0] >= BIN0_BITS + 1 and ends[1] <= BIN0_BITS + bins - 1):
        return None
    return Bracket(lo, scale, np.float32(bias))


def bracket_bins(keys: np.ndarray, br: Bracket) -> np.ndarray:
    """Bins (int64) of ``keys`` (any keys of values at most the bracket's top; ``-inf``
    included): the float32 bits of ``t = fma(v, scale, bias)`` less those of ``2**23``, or
    -1 where ``t < 2**23`` (not counted). Keys at or above ``br.lo`` get bins ``>= 1``, none
    above ``BRACKET_BINS - 1``."""
    v = key_to_float(np.asarray(keys, np.uint32))
    t = fma32(v, br.scale, br.bias).view(np.int32).astype(np.int64)
    return np.where(t >= BIN0_BITS, t - BIN0_BITS, -1)


def bin_edge(b: int, br: Bracket) -> np.float32:
    """The lower edge of bin ``b``: ``(2**23 + b - bias - 0.5) / scale`` in float32, as the
    kernels compute it (``sub.rn``, ``sub.rn``, ``div.rn``; ``device.bracket.bin_edge``).

    ``fma(v, scale, bias)`` rounds to the nearest integer, so bin ``b`` starts at the real
    ``e = (2**23 + b - 0.5 - bias) / scale``. When ``2**22 <= bias < 2**24`` both
    subtractions are exact (Sterbenz: ``bias`` within a factor of two of ``2**23 + b``; the
    difference a multiple of 0.5 below ``2**23`` in magnitude), so the result is ``e``
    rounded once: every float32 at or above ``e`` is at or above it, and so is every score
    of bin ``b`` or higher. Outside that range (a bracket narrow against its distance from
    zero) the 0.5 can be rounded away and the edge can land a key above its bin's lowest:
    the streaming rung takes the linear level only inside it
    (``gvr_reference.model.rung_bracket``)."""
    d = np.float32(np.float32(2.0**23 + b) - np.float32(br.bias))
    d = np.float32(d - np.float32(0.5))
    with np.errstate(over="ignore"):  # the low end's bin may start below -FLT_MAX: -inf
        return np.float32(d / np.float32(br.scale))


#: The bias range (float32 values) where :func:`bin_edge`'s two subtractions are exact.
EDGE_BIAS_MIN = 2.0**22
EDGE_BIAS_MAX = 2.0**24


def edge_exact(br: Bracket) -> bool:
    """Whether every score of bin ``b`` or above is at least :func:`bin_edge` ``(b, br)``:
    the bracket's bias lies in ``[EDGE_BIAS_MIN, EDGE_BIAS_MAX)``."""
    return EDGE_BIAS_MIN <= float(br.bias) < EDGE_BIAS_MAX


def crossing(hist: np.ndarray, target: int) -> tuple[int, int, int]:
    """``(b, above, count_b)``: the highest bin whose suffix count reaches ``target``
    (``1 <= target <= hist.sum()``), the count above it and its own count."""
    suffix = np.cumsum(hist[::-1])[::-1]
    b = int(np.flatnonzero(suffix >= target).max())
    above = int(suffix[b + 1]) if b + 1 < hist.size else 0
    return b, above, int(hist[b])
