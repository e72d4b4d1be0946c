"""Raw kernel times of the ragged split (``StreamingConfig.ragged``) against the static launch
the router used before it, on the H200 (results: ``benchmarks/results/h200/tune_ragged.log``)::

    python3 tools/tune_ragged.py > tune_ragged.log
    python3 tools/tune_ragged.py --widths 65536 --rows 160,256 --ks 512   # a few cells
    python3 tools/tune_ragged.py --widths 65536 --rows 64,256 --extras 32,fill

Per cell (arena width, rows, K) two batches of gaussian float32 rows: serving-like ragged
lengths (``benchmarks/bench_topk.ragged_lengths``: 80 % short, 15 % mid, 5 % long, the last
row the full width) and uniform full rows. ``static``: the same ``rows * parts`` CTAs with
``parts`` per row (``rows <= SMs / 2``), or one CTA per row (1024 threads for ``SMs / 2 < rows
<= SMs``, 512 past the SMs); ``ragged``: the ragged split of the same core and CTAs (also
where the router keeps the static split); past the SMs ``ragged p<extra>``, the ragged split
with ``min(rows - 1, SMs)`` and ``min(rows - 1, 2 * SMs)`` extra CTAs. ``--extras`` asks for
other extra-CTA counts (``fill``: the resident slots of two 512-thread CTAs a SM left beside
one CTA a row, ``2 * SMs - rows``, so the grid is one wave): past the SMs in place of those
two, below them as the 512-thread core's ragged split beside the static launch (``r512
p<extra>``, the extras not capped by the rows). Each configuration is exported ahead of time
(in parallel), then launched directly
(``gvr_kernels.abi.KernelArgs``); one CUDA-event median of 40 launches per cell, the L2
flushed before each, after a short bf16 matmul warm-up. Every timed launch's answer is checked
first (the selected values equal ``torch.topk``'s over each row's window, as multisets).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

WIDTHS = (65536, 131072, 262144)
ROWS = (8, 32, 64, 100, 132, 133, 256, 512)
KS = (512, 2048)
OUT = "/tmp/aot_tune_ragged"

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))


def parse_extras(text: str) -> list[int | str]:
    """``"8,32,fill"`` -> ``[8, 32, "fill"]``."""
    return [x if x == "fill" else int(x) for x in text.split(",")]


def extra_ctas(spec, rows: int, extra: int | str, below_rows: bool = True) -> int:
    """A ragged split's extra CTAs: ``extra``, capped below ``rows`` where ``below_rows`` (past
    the SMs: rows of equal length then get one CTA each); ``"fill"``: the resident slots of
    two 512-thread CTAs a SM left beside one CTA a row (at least 1). At most ``2 * SMs``, the
    workspace's row slots."""
    if extra == "fill":
        extra = 2 * spec.sm_count - rows
    cap = 2 * spec.sm_count if not below_rows else min(rows - 1, 2 * spec.sm_count)
    return max(1, min(cap, extra))


def routes(spec, rows, width, k, extras=None):
    """``(static config, static parts, [(label, config, parts), ...])``: a decode launch and
    the ragged splits timed against it (``parts``: the kernels' argument, for a ragged split
    its extra CTAs), or None where the router picks no split and no ``extras`` are asked.

    Past the SMs: one 512-thread CTA a row against its ragged split with ``extras`` extra CTAs
    (default ``SMs`` and ``2 * SMs``, each below the rows). Within half the SMs (a static
    split): the same ``rows * parts`` CTAs as a ragged split, and with ``extras`` the
    512-thread core's ragged split too (``r512 p<extra>``, the extras not capped by the rows,
    so a long row can take more CTAs than the static ``parts``); with ``extras``, other routes
    within the SMs get only the ``r512`` splits."""
    from gvr_kernels import routing

    s = spec.sm_count
    r = routing.route_static(spec, rows=rows, n_env=width, k=k, families=("streaming",))
    if rows > s:
        single = replace(r.config, split=False, ragged=False)
        many = replace(single, split=True, ragged=True)
        counts = [extra_ctas(spec, rows, e) for e in extras or [s, 2 * s]]
        return single, 1, [(f"ragged p{extra}", many, extra) for extra in counts]
    out = []
    if extras:
        # the 512-thread single-CTA core the router runs past the SMs at this width and K
        core = routing.route_static(spec, rows=2 * s, n_env=width, k=k, families=("streaming",))
        many = replace(core.config, split=True, ragged=True)
        counts = [extra_ctas(spec, rows, e, below_rows=False) for e in extras]
        out = [(f"r512 p{extra}", many, extra) for extra in counts]
    if rows <= s // 2 and r.config.split:
        # the static split and the ragged split of the same rows * parts CTAs
        parts = r.grid // rows
        split = replace(r.config, ragged=False)
        same = ("ragged", replace(split, ragged=True, preload=0), rows * (parts - 1))
        return split, parts, [same, *out]
    if out:
        return replace(r.config, ragged=False), r.grid // rows, out
    return None


def main() -> None:
    from gvr_kernels.spec import H200

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("--widths", type=ints, default=list(WIDTHS), help="arena widths")
    ap.add_argument("--rows", type=ints, default=list(ROWS), help="rows a launch")
    ap.add_argument("--ks", type=ints, default=list(KS))
    ap.add_argument(
        "--extras", type=parse_extras, default=None,
        help="extra CTAs of the ragged splits, e.g. 8,32,fill (default past the SMs: SMs, 2 * SMs)",
    )  # fmt: skip
    args = ap.parse_args()
    cells = [(w, b, k) for w in args.widths for b in args.rows for k in args.ks]
    cfgs = set()
    for w, b, k in cells:
        rt = routes(H200, b, w, k, args.extras)
        if rt is not None:
            cfgs |= {rt[0]} | {cfg for _, cfg, _ in rt[2]}
    import export_kernels as ek

    aot = ek.export_all(sorted(cfgs, key=str), OUT, jobs=15)
    import numpy as np
    import torch
    from bench_topk import ragged_lengths
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    # room for the widest variant: a split row slot for every extra CTA, up to twice the SMs
    words = 2 * kp.spec.sm_count * max(c.workspace_words_per_row for c in cfgs)
    if kp.workspace.numel() < words:
        kp.workspace = torch.zeros(words, dtype=torch.int32, device="cuda").view(torch.uint32)
    flush = timing_setup()

    def run(cfg, parts, lg, kv, k):
        return timed_exact(kp, cfg, parts, lg, kv, k, flush)

    print(f"# tools/tune_ragged.py on {torch.cuda.get_device_name()}: raw kernel times (us)")
    for w, b, k in cells:
        rt = routes(kp.spec, b, w, k, args.extras)
        if rt is None:
            print(f"n={w} b={b} k={k} | not a ragged route", flush=True)
            continue
        s_cfg, s_parts, alts = rt
        lg = torch.randn(b, w, device="cuda")
        line = [f"n={w} b={b} k={k} | static {s_cfg.name} p{s_parts}"]
        for name, lens in (("ragged", ragged_lengths(b, w)), ("uniform", np.full(b, w))):
            kv = torch.from_numpy(lens.astype(np.int32)).cuda()
            ts, oks = run(s_cfg, s_parts, lg, kv, k)
            okr = True
            cell = f"{name}: static {ts:.1f}"
            for label, cfg, extra in alts:
                t2, ok2 = run(cfg, extra, lg, kv, k)
                okr &= ok2
                cell += f" {label} {t2:.1f}"
            bad = "" if oks and okr else " INEXACT"
            line.append(cell + bad)
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
