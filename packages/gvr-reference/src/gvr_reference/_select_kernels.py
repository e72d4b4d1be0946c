"""The numba kernels of the CPU engine: exact top-K on the uint32 order keys.

Every membership decision compares order keys (:func:`gvr_reference._numba_core.key_of`);
floats are never compared. A row of length ``n > k`` takes one of two exact paths.

Sampled path (``n >= 8 k`` and ``n >= 32768``, or ``n >= 16384`` and ``n >= 128 k``: where it
beats the radix path, measured on 2 cores), one pass over the row:

1. keys of ``s`` evenly spaced sample positions; the threshold ``thr`` is the sample's
   ``j``-th largest key with ``j`` a few standard deviations above ``k * s / n``, so that
   probably a little more than ``k`` row keys are ``>= thr``;
2. one pass collects, in index order, every index whose key is ``>= thr`` (the
   candidates), giving up as soon as they exceed a capacity;
3. if there are at least ``k`` candidates, they hold the whole top-K (every key outside is
   ``< thr <=`` every candidate key), and the K-th largest candidate key ``t`` is found by a
   radix select on the candidates only. Otherwise (too few or too many candidates) the row
   falls back to the radix path.

Radix path (every other row), four passes over the row, each a simple loop:

1. the order keys of the row into a scratch array (branch-free, vectorised) and their maximum;
2. a histogram of the top 11 key bits; the crossing bin ``b`` is the highest bin where the
   running count from the top reaches ``k``, found by 32-bin block sums from the maximum's bin
   down (no walk over the empty bins above the data);
3. the keys of bin ``b`` are gathered, and ``t`` is found among them by radix selects on
   digits sized to the candidates' actual range (at most 256 bins each), down to 16 keys,
   which are sorted;
4. the emit pass: every index with key ``>= t`` in index order, branch-free (each index is
   written and the write position advances by the test) when the top-K is dense, with a
   branch when it is sparse. Only when the K-th value's tie class is not taken whole does the
   pass count ties.

Both paths select every key ``> t`` and the first ``k - #(> t)`` keys ``== t`` in index
order: ties go to the smallest indices, so the engine is always deterministic. Output rows
are in ascending index order, or with ``sort_desc`` in descending key order with ties by
ascending index.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange
from numba.core import cgutils, types
from numba.extending import intrinsic

from ._numba_core import NEG_NAN_BITS, PAD_VALUE_BITS, key_of, threshold_form

BINS = 2048  # 11-bit digits: key bits 31..21 and 20..10, then a 10-bit digit 9..0
LOW_BINS = 1024
SAMPLE_SIZE = 4096  # at most this many sample elements
SAMPLE_MIN = 1024  # at least this many (rows on the sampled path have n >= 8 k)
SAMPLE_STEP = 32  # otherwise one sample per 32 elements
SAMPLE_MIN_RATIO = 8  # the sampled path needs n >= 8 k ...
SAMPLE_MIN_ROW = 32768  # ... and n >= 32768 ...
SAMPLE_SHORT_ROW = 16384  # ... or n >= 16384 with
SAMPLE_SHORT_RATIO = 128  # n >= 128 k (elsewhere the radix path is faster, measured)
SAMPLE_SIGMAS = 3.0
HEAP_MAX = 64  # the sample threshold uses a heap up to this rank, a radix select above
SKIP_BLOCK = 64  # block size of the candidate scan (and of its block-skip test)
SKIP_MAX_DENSITY = 1.0 / 64.0  # skip blocks below this expected candidate density
NOBRANCH_MIN_DENSITY = 1.0 / 32.0  # branch-free appends above it
BLOCK_BINS = 32  # the crossing scan of the radix path sums blocks of this many bins
SMALL_SELECT = 16  # the radix path sorts at most this many candidates
DIGIT_BINS = 256  # digits of the radix path's candidate select span at most this many bins
DENSE_EMIT = 8  # the emit pass is branch-free when k * DENSE_EMIT > n


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
def _crossing_from(hist, b, k):
    """:func:`_crossing` for a histogram whose bins above ``b`` are empty: the highest bin
    ``c <= b`` with ``sum(hist[c:]) >= k`` and ``sum(hist[c+1:])``. Whole blocks of
    ``BLOCK_BINS`` bins are summed (a vectorised loop) until the block that crosses, which is
    then walked bin by bin. Requires ``sum(hist[:b+1]) >= k``."""
    above = 0
    while True:
        b0 = b & ~(BLOCK_BINS - 1)
        s = 0
        for j in range(b0, b + 1):
            s += hist[j]
        if above + s >= k:
            break
        above += s
        b = b0 - 1
    while above + hist[b] < k:
        above += hist[b]
        b -= 1
    return b, above


@numba.njit(cache=True, nogil=True)
def _select_candidates(cand, m, need, hist):
    """The ``need``-th largest of the int64 keys ``cand[:m]`` (``1 <= need <= m``), how many
    copies of it a top-``need`` takes, and how many copies there are; reorders ``cand``.

    Each round histograms the keys' offsets from their minimum on a digit of at most
    ``DIGIT_BINS`` bins (the top bits of the candidates' actual range), keeps the crossing
    bin's keys and repeats; a round with one distinct key, or at most ``SMALL_SELECT`` keys
    (sorted by insertion), ends it. ``hist`` holds at least ``DIGIT_BINS`` bins.
    """
    while True:
        if m <= SMALL_SELECT:
            for i in range(1, m):
                v = cand[i]
                j = i - 1
                while j >= 0 and cand[j] < v:
                    cand[j + 1] = cand[j]
                    j -= 1
                cand[j + 1] = v
            t = cand[need - 1]
            above = 0
            while cand[above] > t:
                above += 1
            ties = need - above
            while above + ties < m and cand[above + ties] == t:
                ties += 1
            return t, need - above, ties
        lo = cand[0]
        hi = cand[0]
        for j in range(m):
            lo = min(lo, cand[j])
            hi = max(hi, cand[j])
        span = hi - lo
        if span == 0:
            return lo, need, m
        shift = 0
        while (span >> shift) >= DIGIT_BINS:
            shift += 1
        top = span >> shift
        hist[: top + 1] = 0
        for j in range(m):
            hist[(cand[j] - lo) >> shift] += 1
        b, above = _crossing_from(hist, top, need)
        need -= above
        w = 0
        for j in range(m):
            v = cand[j]
            cand[w] = v
            w += ((v - lo) >> shift) == b
        m = w


@numba.njit(cache=True, nogil=True)
def _emit_at_least(keys, t, k, out_row, idx):
    """``out_row[:k]`` = the indices with key ``>= t``, ascending; exactly ``k`` keys must be
    ``>= t``. ``idx``: int32 scratch of at least ``k + 1``."""
    n = keys.shape[0]
    if k * DENSE_EMIT > n:
        # Branch-free: every index is written, the position advances by the test. The
        # position reaches k at the last selected index, so the scratch has one slot more.
        w = 0
        for i in range(n):
            idx[w] = i
            w += np.int64(keys[i]) >= t
        out_row[:k] = idx[:k]
    else:
        w = 0
        for i in range(n):
            if np.int64(keys[i]) >= t:
                out_row[w] = i
                w += 1


@numba.njit(cache=True, nogil=True)
def _emit_ties(keys, t, take_equal, k, out_row, idx):
    """``out_row[:k]`` = the indices with key ``> t`` and the first ``take_equal`` with key
    ``== t``, ascending (the K-th value's tie class taken in part)."""
    n = keys.shape[0]
    if k * DENSE_EMIT > n:
        w = 0
        for i in range(n):
            key = np.int64(keys[i])
            idx[w] = i
            tie = key == t
            w += np.int64(key > t) | np.int64(tie & (take_equal > 0))
            take_equal -= np.int64(tie)
        out_row[:k] = idx[:k]
    else:
        w = 0
        for i in range(n):
            key = np.int64(keys[i])
            if key > t:
                out_row[w] = i
                w += 1
            elif key == t and take_equal > 0:
                out_row[w] = i
                w += 1
                take_equal -= 1


@numba.njit(cache=True, nogil=True)
def _radix_row(row, k, out_row, keys, cand, hist, idx):
    """The radix path; fills ``out_row[:k]`` in index order (``k < n``). Scratch: ``keys``
    (uint32, at least ``n``), ``cand`` (int64, at least ``n + 1``), ``hist`` (int32,
    ``BINS``), ``idx`` (int32, at least ``k + 1``)."""
    n = row.shape[0]
    keys = keys[:n]
    top_key = np.uint32(0)
    for i in range(n):
        key = np.uint32(key_of(row[i]))
        keys[i] = key
        top_key = max(top_key, key)
    hist[:] = 0
    for i in range(n):
        hist[np.int64(keys[i]) >> 21] += 1
    b, above = _crossing_from(hist, np.int64(top_key) >> 21, k)
    need = k - above
    count = np.int64(hist[b])
    if need == count:  # the crossing bin is taken whole: exactly k keys are >= its floor
        _emit_at_least(keys, np.int64(b) << 21, k, out_row, idx)
        return
    c = 0  # cand has one slot more than the bin for the branch-free gather
    if count * 16 < n:
        for i in range(n):
            key = np.int64(keys[i])
            if (key >> 21) == b:
                cand[c] = key
                c += 1
    else:
        for i in range(n):
            key = np.int64(keys[i])
            cand[c] = key
            c += (key >> 21) == b
    t, take_equal, ties = _select_candidates(cand, count, need, hist)
    _emit_keys(keys, t, take_equal, ties, k, out_row, idx)


@numba.njit(cache=True, nogil=True)
def _emit_keys(keys, t, take_equal, ties, k, out_row, idx):
    """The emit pass for the K-th key ``t``, of whose ``ties`` copies the top-K takes
    ``take_equal``."""
    if take_equal == ties:
        _emit_at_least(keys, t, k, out_row, idx)
    else:
        _emit_ties(keys, t, take_equal, k, out_row, idx)


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
def scratch_for(n, k):
    """Scratch arrays of :func:`topk_row` for windows of at most ``n`` scores."""
    keys = np.empty(n, np.uint32)
    cand = np.empty(n + 1, np.int64)
    hist = np.empty(BINS, np.int32)
    idx = np.empty(min(n, k) + 1, np.int32)
    return keys, cand, hist, idx


@numba.njit(cache=True, nogil=True)
def topk_row(srow, row, k, out_row, val_row, want_values, sort_desc, keys, cand, hist, idx):
    """Exact top-``k`` of one row window (``row``: its uint32 bits, ``srow``: the same as
    int32) into ``out_row`` and, with ``want_values``, ``val_row``; ``keys``, ``cand``,
    ``hist``, ``idx``: scratch from :func:`scratch_for` (any contents)."""
    n = row.shape[0]
    if n <= k:
        for j in range(n):
            out_row[j] = j
        _finish_row(row, n, k, out_row, val_row, want_values, sort_desc)
        return
    done = False
    if n >= SAMPLE_MIN_RATIO * k and (
        n >= SAMPLE_MIN_ROW or (n >= SAMPLE_SHORT_ROW and n >= SAMPLE_SHORT_RATIO * k)
    ):
        done = _sampled_row(srow, row, k, out_row)
    if not done:
        _radix_row(row, k, out_row, keys, cand, hist, idx)
    _finish_row(row, k, k, out_row, val_row, want_values, sort_desc)


# ---------------------------------------------------------------------- the row loops
# They take raw addresses: the engine's numpy API passes its arrays' addresses, and the
# dispatcher passes its CPU torch tensors' without converting them (a tensor-to-array
# conversion costs about a microsecond per argument, an int next to nothing). Row windows are
# computed here from int32 arrays with the dispatcher's clamping rules.

WINDOW_FULL = 0  #: every row whole: ``[0, width)``
WINDOW_LENGTHS = 1  #: ``[0, clamp(a[r], 0, width))``
WINDOW_DECODE = 2  #: decode rows of request ``a[r // next_n]`` (a: kv_lens)
WINDOW_PREFILL = 3  #: ``[s, e)``, ``s = clamp(a[r], 0, width)``, ``e = clamp(b[r], s, width)``
WINDOW_SPANS = 4  #: ``[a[r], a[r] + b[r])`` from int64 arrays, already inside the row


@numba.njit(cache=True, nogil=True)
def _addresses(flat, lo, hi, idx, vbits):
    """The data addresses of the engine's numpy buffers, in one call (numpy's ``ctypes.data``
    costs microseconds each)."""
    return flat.ctypes.data, lo.ctypes.data, hi.ctypes.data, idx.ctypes.data, vbits.ctypes.data


@intrinsic
def _pointer(typingctx, address):
    """An integer address as a ``void *`` (for ``numba.carray``)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _window_at(mode, r, width, a, b, a64, b64, next_n, cr_shift):
    """``(start, length)`` of row ``r``'s window (see the ``WINDOW_*`` modes; ``a`` / ``b``
    are the int32 arrays, ``a64`` / ``b64`` the int64 ones of ``WINDOW_SPANS``)."""
    if mode == WINDOW_FULL:
        return np.int64(0), np.int64(width)
    if mode == WINDOW_SPANS:
        return a64[r], b64[r]
    if mode == WINDOW_LENGTHS:
        return np.int64(0), min(max(np.int64(a[r]), np.int64(0)), np.int64(width))
    if mode == WINDOW_DECODE:
        kv = np.int64(a[r // next_n])
        n = max(kv - next_n + r % next_n + 1, np.int64(0)) >> cr_shift
        return np.int64(0), min(n, np.int64(width))
    s = min(max(np.int64(a[r]), np.int64(0)), np.int64(width))
    e = min(max(np.int64(b[r]), s), np.int64(width))
    return s, e - s


#: A call of more than one row whose windows hold more scores than this in all runs its rows
#: on the thread pool (see ``gvr_reference.cpu_engine.SERIAL_WORK``, the same number).
SERIAL_WORK = 1 << 18


@numba.njit(cache=True, nogil=True, inline="always")
def _arrays_at(x_address, row_stride, rows, width, mode, a_address, b_address, next_n, k,
               out_address, values_address):  # fmt: skip
    span = (rows - 1) * row_stride + width
    flat = numba.carray(_pointer(x_address), (span,), np.uint32)
    sbits = numba.carray(_pointer(x_address), (span,), np.int32)
    entries = rows // next_n if mode == WINDOW_DECODE else rows
    n32 = 0 if mode == WINDOW_SPANS or not a_address else entries
    n64 = entries if mode == WINDOW_SPANS else 0
    a = numba.carray(_pointer(a_address), (n32,), np.int32)
    b = numba.carray(_pointer(b_address), (n32 if b_address else 0,), np.int32)
    a64 = numba.carray(_pointer(a_address), (n64,), np.int64)
    b64 = numba.carray(_pointer(b_address), (n64,), np.int64)
    out = numba.carray(_pointer(out_address), (rows, k), np.int32)
    # Without values, an empty view (no allocation): rows of zero columns are never read.
    vals = numba.carray(_pointer(values_address or out_address), (rows, k if values_address else 0),
                        np.uint32)  # fmt: skip
    return flat, sbits, a, b, a64, b64, out, vals


@numba.njit(cache=True, nogil=True)
def topk_rows_at_serial(
    x_address, row_stride, rows, width, mode, a_address, b_address, next_n, cr_shift, k,
    out_address, values_address, sort_desc,
):  # fmt: skip
    """Exact top-``k`` of every row window, on the calling thread.

    Args:
        x_address: address of ``logits[0, 0]`` (float32, unit inner stride).
        row_stride: elements between rows (``>= 0``).
        rows, width: the logits shape (both ``>= 1``).
        mode: a ``WINDOW_*`` constant; ``a_address`` / ``b_address`` the int32 arrays it
            reads (0 when unused): ``rows // next_n`` entries for decode, ``rows`` otherwise.
        next_n, cr_shift: decode rows per request and ``log2(compress_ratio)`` (1 and 0
            otherwise).
        k: indices per row.
        out_address: int32 ``[rows, k]`` contiguous, written.
        values_address: float32 ``[rows, k]`` contiguous, written bit for bit; 0 for none.
        sort_desc: descending key order (ties by ascending index), else index order.

    Returns:
        0; or -1 at once, having written nothing, for a call of more than one row whose
        windows hold more than :data:`SERIAL_WORK` scores in all (the caller then runs
        :func:`topk_rows_at` on the thread pool).

    The caller guarantees every address and size: nothing here is checked.
    """
    flat, sbits, a, b, a64, b64, out, vals = _arrays_at(
        x_address, row_stride, rows, width, mode, a_address, b_address, next_n, k,
        out_address, values_address,
    )  # fmt: skip
    if rows > 1:
        work = 0
        if mode == WINDOW_FULL:
            work = rows * width
        else:
            for r in range(rows):
                work += _window_at(mode, r, width, a, b, a64, b64, next_n, cr_shift)[1]
        if work > SERIAL_WORK:
            return -1
    want_values = values_address != 0
    keys, cand, hist, idx = scratch_for(width, k)  # once per call, for every row
    for r in range(rows):
        s, n = _window_at(mode, r, width, a, b, a64, b64, next_n, cr_shift)
        lo = r * row_stride + s
        topk_row(sbits[lo : lo + n], flat[lo : lo + n], k, out[r], vals[r], want_values,
                 sort_desc, keys, cand, hist, idx)  # fmt: skip
    return 0


@numba.njit(parallel=True, cache=True)
def topk_rows_at(
    x_address, row_stride, rows, width, mode, a_address, b_address, next_n, cr_shift, k,
    out_address, values_address, sort_desc,
):  # fmt: skip
    """:func:`topk_rows_at_serial` with rows in parallel (whatever the work)."""
    flat, sbits, a, b, a64, b64, out, vals = _arrays_at(
        x_address, row_stride, rows, width, mode, a_address, b_address, next_n, k,
        out_address, values_address,
    )  # fmt: skip
    want_values = values_address != 0
    for r in prange(rows):
        s, n = _window_at(mode, r, width, a, b, a64, b64, next_n, cr_shift)
        lo = r * row_stride + s
        keys, cand, hist, idx = scratch_for(n, k)  # per row: the threads share nothing
        topk_row(sbits[lo : lo + n], flat[lo : lo + n], k, out[r], vals[r], want_values,
                 sort_desc, keys, cand, hist, idx)  # fmt: skip
