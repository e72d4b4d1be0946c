"""Small launches of every register-resident launch shape and path, exactness-checked, for
``compute-sanitizer`` (memcheck / racecheck / synccheck)::

    GVR_AOT_DIR=.aot compute-sanitizer --tool racecheck python3 tools/sanitize_register.py

Covers one-vector and eight-vector CTAs, the bulk shapes (four 256-thread CTAs per SM),
sampled rows (the rung), underestimated rungs, short and unsampled rows, rows longer than the
registers (the whole-row selection from memory), values and the deterministic tie mode,
prefill windows, every bracket path (the crossing bin taken whole, ranked, narrowed from the
staging, or from the registers past the capacity), and loads issued before the length
(``early_loads``) where the shape allows them, and the routed 512 x 8 bracket row with the bit
walk.
Exit status 1 on an inexact row.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from gvr_kernels.register import RegisterConfig
from gvr_kernels.routing import Route
from gvr_kernels.testing import KernelProvider, check_windows
from gvr_reference.register_model import RegisterParams, sample_positions


def decode_inexact(kp, cfg, x, kv, k) -> int:
    """Launch ``cfg`` on decode rows ``x`` (lengths ``kv``, the configuration's values and tie
    mode); the number of inexact rows."""
    rows, width = x.shape
    route = Route(config=cfg, parts=1, grid=rows, workspace_words=0, n_env=width)
    out, _, _, _ = kp.launch("decode", x, kv, None, k, values=cfg.with_values,
                             det=cfg.deterministic, route=route)  # fmt: skip
    zeros = torch.zeros(rows, dtype=torch.int64, device="cuda")
    return int((~check_windows(x, zeros, kv.to(torch.int64), k, out)).sum())


def main() -> int:
    kp = KernelProvider()
    g = torch.Generator(device="cuda").manual_seed(7)
    bad = 0
    # the last two: the bulk shapes (four 256-thread CTAs per SM, a smaller staging)
    bulk = {(256, 4): dict(resident=4, capacity=2048), (256, 8): dict(resident=4, capacity=4096)}
    for (threads, vecs), k in (
        ((512, 2), 512),
        ((1024, 8), 2048),
        ((256, 1), 64),
        ((256, 4), 1024),
        ((256, 8), 512),
    ):
        kw = bulk.get((threads, vecs), {})
        cap = 4 * threads * vecs
        width = cap + 40
        x = torch.randn(6, width, generator=g, device="cuda")
        x[1, :] = 0.5  # one tie class
        x[2, ::7] = 1e6  # a rung far above the K-th key
        kv = torch.tensor([cap, cap, cap, k, 4 * k, width], dtype=torch.int32, device="cuda")
        modes = [(False, False, False), (True, True, False)]
        if threads * kw.get("resident", 1) <= 512:  # the loads before the length
            modes.append((True, True, True))
        for values, det, early in modes:
            cfg = RegisterConfig(threads=threads, vecs=vecs, with_values=values,
                                 deterministic=det, early_loads=early, **kw)  # fmt: skip
            bad += decode_inexact(kp, cfg, x, kv, k)
        s = torch.tensor([0, 1, 3, 5], dtype=torch.int32, device="cuda")
        e = torch.tensor([cap, cap - 2, cap // 2, 9], dtype=torch.int32, device="cuda")
        cfg = RegisterConfig(mode="prefill", threads=threads, vecs=vecs, with_values=True, **kw)
        route = Route(config=cfg, parts=1, grid=4, workspace_words=0, n_env=width)
        out, _, _, _ = kp.launch("prefill", x[:4], s, e, k, values=True, route=route)
        bad += int(
            (~check_windows(x[:4], s.to(torch.int64), (e - s).to(torch.int64), k, out)).sum()
        )
    bad += bracket_rows(kp, g)
    bad += half_warp_rows(kp, g)
    torch.cuda.synchronize()
    print(f"inexact rows: {bad}")
    return 1 if bad else 0


def bracket_rows(kp, g) -> int:
    """The bracket paths on 512 x 4 CTAs with a staging of 2048 entries: gaussian rows, a
    tie class at the top on half the threads (600 and 3000 of it, off the sample), a row
    the bracket refuses (+inf), a short row; values and both tie modes."""
    threads, vecs = 512, 4
    cap = 4 * threads * vecs
    x = torch.randn(6, cap, generator=g, device="cuda")
    pos = np.arange(cap)
    half = np.flatnonzero((pos // 4) % threads < threads // 2)
    off = np.setdiff1d(half, sample_positions(cap, 0, RegisterParams(threads, vecs)))
    cls = torch.from_numpy(off).cuda()
    x[2, cls[:600]] = 6.0
    x[3, cls[:3000]] = 6.0
    x[4, 3] = float("inf")
    kv = torch.tensor([cap, cap - 3, cap, cap, cap, 300], dtype=torch.int32, device="cuda")
    bad = 0
    for k in (512, 2048):
        for values, det, early in (
            (False, False, False),
            (True, True, False),
            (False, False, True),
        ):
            cfg = RegisterConfig(threads=threads, vecs=vecs, capacity=2048, with_values=values,
                                 deterministic=det, early_loads=early)  # fmt: skip
            bad += decode_inexact(kp, cfg, x, kv, k)
    return bad


def half_warp_rows(kp, g) -> int:
    """The routed 512 x 8 decode row (one CTA per SM, 128 registers, the bracket with the
    bit walk; loads after the length, and before it): full, short and tied rows, a row the
    bracket refuses (NaN), K = 512 and 1024."""
    threads, vecs = 512, 8
    cap = 4 * threads * vecs
    x = torch.randn(6, cap + 8, generator=g, device="cuda")
    x[1, 100:2100] = 3.0  # a tie class across the K-th key
    x[3, 17] = float("nan")
    kv = torch.tensor([cap, cap, 9000, cap - 5, 600, 1], dtype=torch.int32, device="cuda")
    bad = 0
    for k in (512, 1024):
        for early in (False, True):
            cfg = RegisterConfig(threads=threads, vecs=vecs, bit_walk=True, early_loads=early)
            bad += decode_inexact(kp, cfg, x, kv, k)
    return bad


if __name__ == "__main__":
    sys.exit(main())
