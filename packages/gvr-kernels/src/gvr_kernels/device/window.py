"""The row window every family reads, and the short-row answer.

Row ``row`` of a launch selects from the window ``[start, start + n)`` of its logits row:

- ``mode="decode"``: request ``row // next_n``,
  ``n = max(0, kv_lens[req] - next_n + row % next_n + 1) >> cr_shift``, ``start = 0``;
- ``mode="prefill"``: ``s = clamp(row_starts[row], 0, width)``,
  ``e = clamp(row_ends[row], s, width)``, ``n = e - s``, ``start = s``;
- ``mode="full"``: ``n = width``, ``start = 0``;

always clamped to the logits width (never to the launch envelope). The phases address the
window from the 16-byte-aligned element at or below its start (``lead = start % vec`` lanes
before it are masked by position; ``vec`` scores per 16-byte vector: 4 for float32, 8 for the
16-bit formats).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, const_expr

from .keys import F32, format_of, vector_bits
from .memory import load_score, load_vec4, load_vec4_if, store_score

__all__ = [
    "row_window",
    "load_limit",
    "issue_vectors",
    "held_vectors",
    "window_column",
    "write_short_row",
]


@cute.jit
def row_window(
    mode: cutlass.Constexpr,
    logits,
    lens_a,
    lens_b,
    row: Int32,
    next_n,
    cr_shift,
    fmt: cutlass.Constexpr = F32,
):
    """``(n, lead, base)`` of output row ``row``: the valid length, the window start modulo
    ``fmt.vec`` and the pointer to the aligned element at or below the start."""
    width = logits.shape[1]
    n = width
    start = Int32(0)
    if const_expr(mode == "decode"):
        req = row // next_n
        t = lens_a[req] - next_n + (row - req * next_n) + 1
        n = cutlass.min(cutlass.max(t, Int32(0)) >> cr_shift, width)
    if const_expr(mode == "prefill"):
        s = cutlass.min(cutlass.max(lens_a[row], Int32(0)), width)
        e = cutlass.min(cutlass.max(lens_b[row], s), width)
        n = e - s
        start = s
    lead = start & Int32(fmt.vec - 1)
    # Element offset of the 16-byte-aligned address at or below the window start.
    row_off = Int64(row) * Int64(logits.stride[0]) + Int64(start - lead)
    return n, lead, logits.iterator + row_off


@cute.jit
def load_limit(
    mode: cutlass.Constexpr,
    logits,
    nvec: Int32,
    fmt: cutlass.Constexpr = F32,
    early: cutlass.Constexpr = True,
) -> Int32:
    """The vectors a register-resident kernel loads from ``base`` (one at or past it is not
    read): with ``early``, for decode rows (start 0) the whole 16-byte vectors of
    the logits width, which do not depend on ``kv_lens``, so the row's loads need not wait
    for the length's; else the window's own ``nvec``. Every vector below either limit lies
    inside the logits row; the slots past the window are masked by position afterwards."""
    lim = nvec
    if const_expr(mode == "decode" and early):
        lim = logits.shape[1] >> Int32(fmt.vec.bit_length() - 1)
    return lim


@cute.jit
def issue_vectors(
    base,
    v0: Int32,
    lim: Int32,
    threads: cutlass.Constexpr,
    vecs: cutlass.Constexpr,
    fmt: cutlass.Constexpr = F32,
):
    """Issue this thread's 16-byte loads of vectors ``v0 + tid + j * threads`` (``j < vecs``),
    each predicated on being below ``lim`` (:func:`load_limit`: no other vector is read, so a
    window with no whole vector reads nothing), all before any is used: the raw bits of each
    vector's scores (zeros where not read)."""
    tid, _, _ = cute.arch.thread_idx()
    raw = []
    for j in cutlass.range_constexpr(vecs):
        v = v0 + tid + j * threads
        at = (base + Int64(v) * Int64(fmt.vec)).toint()
        raw.append(vector_bits(load_vec4_if(at, Uint32(cutlass.select_(v < lim, 1, 0))), fmt))
    return raw


@cute.jit
def held_vectors(
    win,
    v0: Int32,
    t_pos: Int32,
    tail_ok,
    raw,
    threads: cutlass.Constexpr,
    vecs: cutlass.Constexpr,
    fmt: cutlass.Constexpr = F32,
):
    """The register-resident families' loads of a row's window ``win``
    (``(base, lead, nvec, tail_start, n)``): the vectors ``v0 + tid + j * threads`` and, where
    ``tail_ok``, the tail score at ``t_pos``, all in flight before any is used. ``raw``: the
    vectors' raw bits already issued (:func:`issue_vectors`, before the row's length was
    known), or None to issue them here, a vector past the window reading vector 0 (every row
    holds it; its scores are masked by position afterwards). Returns ``(the raw bits of each
    vector's scores, the tail score's bits)`` (the tail: zero where not ``tail_ok``)."""
    base, lead, nvec, _tail_start, _n = win
    tid, _, _ = cute.arch.thread_idx()
    tail_bits = Uint32(0)
    if const_expr(raw is None):
        raw = []
        for j in cutlass.range_constexpr(vecs):
            v = v0 + tid + j * threads
            at = Int64(cutlass.select_(v < nvec, v, Int32(0))) * Int64(fmt.vec)
            raw.append(vector_bits(load_vec4(base + at), fmt))
        tail_bits = load_score(base + (lead + cutlass.select_(tail_ok, t_pos, Int32(0))), fmt)
    else:
        # (only where the row has a tail: its address needs the length)
        if tail_ok:
            tail_bits = load_score(base + (lead + t_pos), fmt)
    return raw, tail_bits


@cute.jit
def window_column(mode: cutlass.Constexpr, logits, lens_a, row: Int32, lead: Int32) -> Int32:
    """The physical column of the 16-byte-aligned element :func:`row_window`'s ``base``
    points at (``start - lead``; 0 for decode and full rows)."""
    c0 = Int32(0)
    if const_expr(mode == "prefill"):
        c0 = cutlass.min(cutlass.max(lens_a[row], Int32(0)), logits.shape[1]) - lead
    return c0


@cute.jit
def write_short_row(
    cfg: cutlass.Constexpr, out, values, base, lead: Int32, row: Int32, n: Int32, k: Int32
):
    """``n <= k``: the identity, then ``-1`` (values: the scores, then the format's most
    negative finite value)."""
    tid, _, _ = cute.arch.thread_idx()
    fmt = format_of(cfg)
    for j in cutlass.range(tid, k, cfg.threads):
        inside = j < n
        out[row, j] = cutlass.select_(inside, j, Int32(-1))
        if const_expr(cfg.with_values):
            bits = Uint32(fmt.neg_max_bits)
            if inside:
                bits = load_score(base + (lead + j), fmt)
            store_score(values.iterator + (Int64(row) * Int64(k) + Int64(j)), bits, fmt)
