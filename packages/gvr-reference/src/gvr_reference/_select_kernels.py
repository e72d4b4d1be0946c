"""The numba kernels of the CPU engine: exact top-K on the uint32 order keys.

Every membership decision compares order keys (:func:`gvr_reference._numba_core.key_of`);
floats are never compared. A row of length ``n > k`` takes one of two exact paths.

Sampled path (``n >= 8 k`` and ``n >= 4096``), one pass over the row:

1. keys of ``s`` evenly spaced sample positions; the threshold ``thr`` is the sample's
   ``j``-th largest key with ``j`` a few standard deviations above ``k * s / n``, so that
   probably a little more than ``k`` row keys are ``>= thr``;
2. one pass collects, in index order, every index whose key is ``>= thr`` (the
   candidates), giving up as soon as they exceed a capacity;
3. if there are at least ``k`` candidates, they hold the whole top-K (every key outside is
   ``< thr <=`` every candidate key), and the K-th largest candidate key ``t`` is found by a
   radix select on the candidates only. Otherwise (too few or too many candidates) the row
   falls back to the radix path.

Radix path, two passes over the row:

1. histogram of the top 11 key bits; the crossing bin ``b`` is the highest bin where the
   running count from the top reaches ``k``;
2. indices of keys above ``b`` are selected outright; keys and indices in bin ``b`` become the
   candidates, and ``t`` is found among them by radix select on the lower 21 bits.

Both paths then emit every candidate with key ``> t`` and the first ``k - #(> t)`` candidates
with key ``== t``, in index order: ties go to the smallest indices, so the engine is always
deterministic. Output rows are in ascending index order, or with ``sort_desc`` in descending
key order with ties by ascending index.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ._numba_core import NEG_NAN_BITS, PAD_VALUE_BITS, key_of, threshold_form

BINS = 2048  # 11-bit digits: key bits 31..21 and 20..10, then a 10-bit digit 9..0
LOW_BINS = 1024
SAMPLE_SIZE = 4096  # at most this many sample elements
SAMPLE_MIN = 1024  # at least this many (rows on the sampled path have n >= 8 k)
SAMPLE_STEP = 32  # otherwise one sample per 32 elements
SAMPLE_MIN_RATIO = 8  # the sampled path needs n >= 8 k ...
SAMPLE_MIN_ROW = 4096  # ... and n >= 4096
SAMPLE_SIGMAS = 3.0
HEAP_MAX = 64  # the sample threshold uses a heap up to this rank, a radix select above
SKIP_BLOCK = 64  # block size of the candidate scan (and of its block-skip test)
SKIP_MAX_DENSITY = 1.0 / 64.0  # skip blocks below this expected candidate density
NOBRANCH_MIN_DENSITY = 1.0 / 32.0  # branch-free appends above it


@numba.njit(cache=True, nogil=True)
def _crossing(hist, k):
    """Highest bin ``b`` with ``sum(hist[b:]) >= k``; returns ``(b, sum(hist[b+1:]))``.
    Requires ``sum(hist) >= k``."""
    above = 0
    b = hist.shape[0] - 1
    while above + hist[b] < k:
        above += hist[b]
        b -= 1
    return b, above


@numba.njit(cache=True, nogil=True)
def _kth_largest(cand_key, count, k, first_level):
    """The ``k``-th largest of ``cand_key[:count]`` (``1 <= k <= count``) and how many copies
    of it a top-``k`` takes (``k`` minus the keys strictly above it).

    Radix select over the digits (31..21, 20..10, 9..0) starting at ``first_level``; keys
    must share every digit above ``first_level``. Works on a copy, compacting the crossing
    bin's keys after each digit.
    """
    keys = np.empty(count, np.int64)
    for j in range(count):
        keys[j] = cand_key[j]
    hist = np.empty(BINS, np.int32)
    m = count
    for level in range(first_level, 3):
        if level < 2:
            shift = 21 - 11 * level
            nbins = BINS
        else:
            shift = 0
            nbins = LOW_BINS
        hist[:nbins] = 0
        for j in range(m):
            hist[(keys[j] >> shift) & (nbins - 1)] += 1
        b, above = _crossing(hist[:nbins], k)
        k -= above
        if hist[b] != m:  # keep only the crossing bin's keys
            w = 0
            for j in range(m):
                key = keys[j]
                if ((key >> shift) & (nbins - 1)) == b:
                    keys[w] = key
                    w += 1
            m = w
    # Every remaining key matches the k-th largest in all digits.
    return keys[0], k


@numba.njit(cache=True, nogil=True)
def _emit(cand_idx, cand_key, count, t, take_equal, out_row, w):
    """Append to ``out_row[w:]``, in candidate (index) order, the candidates with key > t and
    the first ``take_equal`` with key == t; returns the new write position."""
    for j in range(count):
        key = cand_key[j]
        if key > t:
            out_row[w] = cand_idx[j]
            w += 1
        elif key == t and take_equal > 0:
            out_row[w] = cand_idx[j]
            w += 1
            take_equal -= 1
    return w


@numba.njit(cache=True, nogil=True)
def _sift_down(heap, i, size):
    """Restore the min-heap property below position ``i``."""
    x = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= x:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = x


@numba.njit(cache=True, nogil=True)
def _sample_threshold(row, k):
    """A threshold key for the sampled path and the candidate count it should give.

    The threshold is the ``j``-th largest key among ``s`` evenly spaced elements of the row
    (so an element of the row), ``j`` about ``SAMPLE_SIGMAS`` standard deviations above
    ``k * s / n``: about ``j * n / s`` row keys are at least the threshold. For small ``j``
    the ``j`` largest sample keys are kept in a min-heap, whose root is the answer (O(s log j)
    even for sorted rows); larger ``j`` use the radix select.
    """
    n = row.shape[0]
    s = min(SAMPLE_SIZE, max(SAMPLE_MIN, n // SAMPLE_STEP))
    expected = k * s / n
    j = min(s, int(expected + SAMPLE_SIGMAS * math.sqrt(expected)) + 1)
    if j > HEAP_MAX:
        keys = np.empty(s, np.uint32)
        for i in range(s):
            keys[i] = key_of(row[(i * n) // s])
        thr, _ = _kth_largest(keys, s, j, 0)
        return thr, j * n / s
    heap = np.empty(j, np.int64)
    for i in range(j):
        heap[i] = key_of(row[(i * n) // s])
    for i in range(j // 2 - 1, -1, -1):
        _sift_down(heap, i, j)
    for i in range(j, s):
        key = key_of(row[(i * n) // s])
        if key > heap[0]:
            heap[0] = key
            _sift_down(heap, 0, j)
    return heap[0], j * n / s


@numba.njit(cache=True, nogil=True)
def _filter_high(srow, row, tb, cand, cap, skip):
    """Indices ``i`` (ascending) with key ``>= thr`` for a threshold strictly above +0, in
    the ``high`` form of :func:`~gvr_reference._numba_core.threshold_form`, appended with a
    branch per element (cheap while hits are a few percent).

    Returns the count, or -1 once it exceeds ``cap`` (checked per 64-element block; ``cand``
    holds ``cap + SKIP_BLOCK`` entries, so a block never overflows it). With ``skip`` (sparse
    hits), blocks whose signed and unsigned maxima rule out a hit are skipped.
    """
    n = row.shape[0]
    c = 0
    i0 = 0
    while i0 + SKIP_BLOCK <= n:
        hit = True
        if skip:
            ms = srow[i0]
            mu = row[i0]
            for j in range(1, SKIP_BLOCK):
                ms = max(ms, srow[i0 + j])
                mu = max(mu, row[i0 + j])
            hit = ms >= tb or mu > NEG_NAN_BITS
        if hit:
            for i in range(i0, i0 + SKIP_BLOCK):
                if srow[i] >= tb or row[i] > NEG_NAN_BITS:
                    cand[c] = i
                    c += 1
            if c > cap:
                return -1
        i0 += SKIP_BLOCK
    for i in range(i0, n):
        if srow[i] >= tb or row[i] > NEG_NAN_BITS:
            cand[c] = i
            c += 1
    return -1 if c > cap else c


@numba.njit(cache=True, nogil=True)
def _filter_nobranch(srow, row, high, tb, tu, cand):
    """The candidate scan for dense hits (either threshold form): every index is written and
    the count advances by the test's outcome, so no branch mispredicts. ``cand`` must hold
    ``n`` entries; returns the count."""
    c = 0
    if high:
        for i in range(row.shape[0]):
            cand[c] = i
            c += np.int64(srow[i] >= tb) + np.int64(row[i] > NEG_NAN_BITS)
    else:
        for i in range(row.shape[0]):
            cand[c] = i
            c += np.int64(row[i] <= tu) + np.int64(row[i] > NEG_NAN_BITS)
    return c


@numba.njit(cache=True, nogil=True)
def _filter_low(row, tu, cand, cap):
    """Indices ``i`` (ascending) with key ``>= thr`` for a threshold at or below +0, in the
    low form of :func:`~gvr_reference._numba_core.threshold_form`. Returns the count, or -1
    once it exceeds ``cap`` (``cand`` holds ``cap + SKIP_BLOCK`` entries)."""
    n = row.shape[0]
    c = 0
    i0 = 0
    while i0 + SKIP_BLOCK <= n:
        for i in range(i0, i0 + SKIP_BLOCK):
            if row[i] <= tu or row[i] > NEG_NAN_BITS:
                cand[c] = i
                c += 1
        if c > cap:
            return -1
        i0 += SKIP_BLOCK
    for i in range(i0, n):
        if row[i] <= tu or row[i] > NEG_NAN_BITS:
            cand[c] = i
            c += 1
    return -1 if c > cap else c


@numba.njit(cache=True, nogil=True)
def _sampled_row(srow, row, k, out_row):
    """The sampled path; fills ``out_row[:k]`` in index order and returns True, or returns
    False (``out_row`` untouched) when the row must take the radix path."""
    n = row.shape[0]
    thr, expected = _sample_threshold(row, k)
    cap = min(n, 2 * int(expected) + 1024)
    high, tb, tu = threshold_form(thr)
    if expected > NOBRANCH_MIN_DENSITY * n:
        cand = np.empty(n, np.int32)
        c = _filter_nobranch(srow, row, high, tb, tu, cand)
        if c > cap:
            return False
    else:
        cand = np.empty(cap + SKIP_BLOCK, np.int32)
        if high:
            skip = expected < SKIP_MAX_DENSITY * n
            c = _filter_high(srow, row, tb, cand, cap, skip)
        else:
            c = _filter_low(row, tu, cand, cap)
    if c < k:
        return False
    cand_key = np.empty(c, np.uint32)
    for j in range(c):
        cand_key[j] = key_of(row[cand[j]])
    t, take_equal = _kth_largest(cand_key, c, k, 0)
    _emit(cand, cand_key, c, t, take_equal, out_row, 0)
    return True


@numba.njit(cache=True, nogil=True)
def _radix_row(row, k, out_row):
    """The radix path; fills ``out_row[:k]`` in index order."""
    n = row.shape[0]
    hist = np.zeros(BINS, np.int32)
    for i in range(n):
        hist[key_of(row[i]) >> 21] += 1
    b, above = _crossing(hist, k)
    count = hist[b]
    cand_idx = np.empty(count, np.int32)
    cand_key = np.empty(count, np.uint32)
    sel = np.empty(above, np.int32)
    a = 0
    c = 0
    for i in range(n):
        key = key_of(row[i])
        top = key >> 21
        if top > b:
            sel[a] = i
            a += 1
        elif top == b:
            cand_idx[c] = i
            cand_key[c] = key
            c += 1
    t, take_equal = _kth_largest(cand_key, count, k - above, 1)
    # Merge the two ascending lists sel[:a] and the emitted candidates out_row[a:w].
    w = _emit(cand_idx, cand_key, count, t, take_equal, out_row, a)
    _merge_front(out_row, sel, a, w)


@numba.njit(cache=True, nogil=True)
def _merge_front(out_row, sel, a, w):
    """``sel[:a]`` and ``out_row[a:w]`` are ascending; merge both into ``out_row[:w]``.

    Merging from the front is safe in place: after taking ``i`` entries of ``sel`` and
    ``j - a`` of the tail, the write position ``i + j - a`` never passes the read
    position ``j``.
    """
    i = 0
    j = a
    dst = 0
    while i < a:
        if j < w and out_row[j] < sel[i]:
            out_row[dst] = out_row[j]
            j += 1
        else:
            out_row[dst] = sel[i]
            i += 1
        dst += 1


@numba.njit(cache=True, nogil=True)
def _sort_desc(row, out_row, m):
    """Reorder ``out_row[:m]`` by descending key, ties by ascending index."""
    comp = np.empty(m, np.uint64)
    for j in range(m):
        idx = np.int64(out_row[j])
        inv = np.uint64(0xFFFFFFFF - key_of(row[idx]))
        comp[j] = (inv << np.uint64(32)) | np.uint64(idx)
    comp.sort()
    for j in range(m):
        out_row[j] = np.int64(comp[j] & np.uint64(0xFFFFFFFF))


@numba.njit(cache=True, nogil=True)
def _finish_row(row, m, k, out_row, val_row, want_values, sort_desc):
    """Sort (optionally), pad and gather values for a row whose first ``m`` slots hold the
    selection."""
    if sort_desc and m > 1:
        _sort_desc(row, out_row, m)
    for j in range(m, k):
        out_row[j] = -1
    if want_values:
        for j in range(m):
            val_row[j] = row[out_row[j]]
        for j in range(m, k):
            val_row[j] = PAD_VALUE_BITS


@numba.njit(cache=True, nogil=True)
def topk_row(srow, row, k, out_row, val_row, want_values, sort_desc):
    """Exact top-``k`` of one row window (``row``: its uint32 bits, ``srow``: the same as
    int32) into ``out_row`` and, with ``want_values``, ``val_row``."""
    n = row.shape[0]
    if n <= k:
        for j in range(n):
            out_row[j] = j
        _finish_row(row, n, k, out_row, val_row, want_values, sort_desc)
        return
    done = False
    if n >= SAMPLE_MIN_RATIO * k and n >= SAMPLE_MIN_ROW:
        done = _sampled_row(srow, row, k, out_row)
    if not done:
        _radix_row(row, k, out_row)
    _finish_row(row, k, k, out_row, val_row, want_values, sort_desc)


@numba.njit(cache=True, nogil=True)
def topk_rows_serial(
    sbits, flat, row_stride, starts, lengths, k, out, vals, want_values, sort_desc
):
    """:func:`topk_rows` on the calling thread (no thread-pool wake-up for small calls)."""
    for r in range(starts.shape[0]):
        lo = r * row_stride + starts[r]
        hi = lo + lengths[r]
        topk_row(sbits[lo:hi], flat[lo:hi], k, out[r], vals[r], want_values, sort_desc)


@numba.njit(parallel=True, cache=True)
def topk_rows(sbits, flat, row_stride, starts, lengths, k, out, vals, want_values, sort_desc):
    """Top-``k`` of every row window, rows in parallel.

    Args:
        sbits: int32 view of ``flat`` (the same memory).
        flat: uint32 bits of the logits; row ``r`` starts at ``flat[r * row_stride]``.
        row_stride: elements between rows.
        starts, lengths: int64 ``[rows]`` windows.
        k: indices per row.
        out: int32 ``[rows, k]``, written.
        vals: uint32 ``[rows, k]`` bits of the values output (``[rows, 0]`` when unused).
        want_values, sort_desc: options.
    """
    rows = starts.shape[0]
    for r in prange(rows):
        lo = r * row_stride + starts[r]
        hi = lo + lengths[r]
        topk_row(sbits[lo:hi], flat[lo:hi], k, out[r], vals[r], want_values, sort_desc)
