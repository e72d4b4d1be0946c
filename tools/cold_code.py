"""Does the state of the SMs' instruction caches change a top-K call's time? GVR and gvr_2
(and a one-element kernel, the timer floor) on the same decode rows, CUDA-event medians of
``--reps`` calls, eager and CUDA-graph replay, under three conditions before each timed call:

- ``l2``: the L2 flushed (``bench_topk``'s method: the flush kernel's code is small, so the
  timed kernel's code can stay in the SMs' instruction caches from its previous call);
- ``other``: the L2 flushed, then the other top-K provider's call on another tensor of the
  same shape (what a top-K kernel finds when another one ran just before);
- ``gemm``: a 4096 x 4096 x 4096 bfloat16 GEMM and a ``torch.topk`` over other tensors, then
  the L2 flushed (an engine's layer between two indexer calls: other kernels' code and data
  everywhere)::

    python3 tools/cold_code.py --cells 1,4096,512 1,262144,512 --reps 40

A cell is ``rows,n,K`` (gaussian decode rows of the ``decode-grid`` set, full length). The
last columns are ``gemm - l2`` per provider, eager and replayed: what the layer before the call
adds (the one-element kernel's column is the part no top-K kernel can avoid). A cell whose
answers are not exact is marked ``INEXACT``. Results: ``benchmarks/results/h100/cold_code.log``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

#: The default cells: b = 1 over the decode grid's lengths, then a few batched ones.
CELLS = (
    "1,4096,512", "1,4096,2048", "1,16384,512", "1,16384,1024", "1,65536,512",
    "1,262144,512", "8,4096,512", "32,16384,1024", "8,131072,512", "128,16384,512",
)  # fmt: skip


def parse_cell(text: str) -> tuple[int, int, int]:
    """``"rows,n,K"`` -> ``(rows, n, K)``; ``ValueError`` naming the cell unless it is three
    positive integers with ``K < n``."""
    try:
        rows, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"cell must be rows,n,K, got {text!r}") from None
    if min(rows, n, k) < 1 or k >= n:
        raise ValueError(f"cell needs positive rows, n and K with K < n, got {text!r}")
    return rows, n, k


def main() -> None:
    import bench_topk as bt
    import torch
    from gvr_kernels.testing import check_windows

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", nargs="+", type=parse_cell, default=None, help="rows,n,K")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()

    g = torch.Generator(device="cuda").manual_seed(5)
    timer = bt.Timer(args.reps)
    one = torch.randn(1, device="cuda")
    wa = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    wb = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tk = torch.randn(4, 262144, device="cuda")

    def layer():
        torch.mm(wa, wb)
        torch.topk(tk, 2048, dim=1)

    print(
        f"{torch.cuda.get_device_name()}; us, medians of {args.reps} calls\n"
        "cell                   provider | eager: l2 other gemm | graph: l2 other gemm | "
        "gemm - l2: eager graph",
        flush=True,
    )
    for b, n, k in args.cells or [parse_cell(c) for c in CELLS]:
        cases = [bt.decode_case("decode-grid", k, b, n, g) for _ in range(2)]
        calls, outs = {}, {}
        for prov in ("gvr", "gvr2"):
            fns, bufs = [], []
            for case in cases:
                out = torch.full((case.rows, k), 0x7FFFFFFF, dtype=torch.int32, device="cuda")
                made = bt.make_call(prov, case, out)
                fns.append(made[0] if isinstance(made, tuple) else made)
                bufs.append(out)
            calls[prov], outs[prov] = fns, bufs
        calls["one"] = [lambda: one.add_(1.0), lambda: one.mul_(1.0)]
        for fns in calls.values():
            for f in fns:
                f()
        torch.cuda.synchronize()
        graphs = {prov: [timer.capture(f) for f in fns] for prov, fns in calls.items()}
        torch.cuda.synchronize()
        exact = all(
            bool(check_windows(case.logits, case.starts, case.lengths, k, outs[prov][i]).all())
            for prov in ("gvr", "gvr2")
            for i, case in enumerate(cases)
        )
        for prov in ("gvr", "gvr2", "one"):
            other = "gvr2" if prov == "gvr" else "gvr"
            row = []
            for table in (calls, graphs):
                fn = table[prov][0]
                row += [
                    timer.cold(fn)[0],
                    timer.cold(fn, then=table[other][1])[0],
                    timer.cold(fn, prepare=layer)[0],
                ]
            print(
                f"b={b:3d} n={n:6d} k={k:4d} {prov:5s} | "
                + " ".join(f"{t:6.2f}" for t in row[:3])
                + " | "
                + " ".join(f"{t:6.2f}" for t in row[3:])
                + f" | {row[2] - row[0]:+5.2f} {row[5] - row[3]:+5.2f}"
                + ("" if exact else "  INEXACT"),
                flush=True,
            )


if __name__ == "__main__":
    main()
