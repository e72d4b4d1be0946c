"""Where a split streaming row spends its time, on the GPU::

    python3 tools/time_split_phases.py                       # b = 1, n = 131,072 / 262,144
    python3 tools/time_split_phases.py --ns 262144 --ks 512 --batches 1,8

Each cell is routed as the dispatcher routes a decode call (``gvr_kernels.routing.route_static``)
and must land on a split streaming configuration. That configuration is compiled twice: as
routed, and with ``stamp_phases`` (thread 0 of every CTA stamps ``%globaltimer`` at the
boundaries of ``gvr_kernels.streaming.config.STAMPS``; the stamps change no result). For each
of 30 launches, the L2 flushed before each, the tool takes the CTA that finished row 0 and
reads its phases, from the first CTA's entry (the launch's ``entry`` skew) to its finish. It
also takes the last arrival of the other CTAs (``others``). Medians, in microseconds, beside
the event time of the routed kernel (CUDA events, median of 40). The stamped answer is checked
against ``torch.topk`` (the selected values as multisets), on gaussian float32 rows.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from gvr_kernels.abi import KernelArgs
from gvr_kernels.compile import compile_config
from gvr_kernels.routing import route_static
from gvr_kernels.spec import spec_from_properties
from gvr_kernels.streaming.config import STAMP_WORDS, STAMPS

sys.path.insert(0, str(Path(__file__).parent))

WRAP = 1 << 31


def phases(stamps: np.ndarray, grid: int, parts: int) -> dict[str, float] | None:
    """The phases (ns) of row 0's finishing CTA in one launch's stamps (``[grid, STAMP_WORDS]``
    of int64, zero where not stamped), or None when no CTA of row 0 stamped a finish."""
    fin = STAMPS.index("finish")
    row = stamps[:parts]
    done = [c for c in range(parts) if row[c, fin] != 0]
    if len(done) != 1:
        return None
    c = done[0]
    # The first entry, as a signed offset from this CTA's (the stamps wrap every 2**31 ns).
    ref = int(row[c, 0])
    t0 = ref + min(((int(e) - ref + WRAP // 2) % WRAP) - WRAP // 2 for e in row[:, 0])
    out = {"entry": float((int(row[c, 0]) - t0) % WRAP)}
    prev = int(row[c, 0])
    for i, name in enumerate(STAMPS[1:], start=1):
        if row[c, i] == 0:
            continue
        out[name] = float((int(row[c, i]) - prev) % WRAP)
        prev = int(row[c, i])
    arrive = STAMPS.index("arrive")
    others = [(int(row[o, arrive]) - t0) % WRAP for o in range(parts) if o != c and row[o, arrive]]
    if others:
        out["others"] = float(max(others))
    out["total"] = float((prev - t0) % WRAP)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="131072,262144")
    ap.add_argument("--ks", default="512,1024,2048")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    from device_streaming import timeit, timing_setup

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    flush = timing_setup()
    dummy_i = torch.zeros(1, dtype=torch.int32, device="cuda")
    no_bounds = torch.zeros(1, 1, device="cuda")
    fns = {}
    names = ("entry",) + STAMPS[1:] + ("others", "total")
    for b in map(int, args.batches.split(",")):
        for n in map(int, args.ns.split(",")):
            for k in map(int, args.ks.split(",")):
                route = route_static(spec, rows=b, n_env=n, k=k)
                cfg = route.config
                if not getattr(cfg, "split", False):
                    print(f"b={b} n={n} k={k}: routed to {cfg.name}, not a split row; skipped")
                    continue
                stamped_cfg = replace(cfg, stamp_phases=True)
                for c in (cfg, stamped_cfg):
                    if c not in fns:
                        fns[c] = compile_config(c)
                g = torch.Generator(device="cuda").manual_seed(n + k + b)
                lg = torch.randn(b, n, generator=g, device="cuda")
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                ws = torch.zeros(max(route.workspace_words, 4), dtype=torch.int32, device="cuda")
                out = torch.empty((b, k), dtype=torch.int32, device="cuda")
                stamps = torch.zeros(route.grid * STAMP_WORDS, dtype=torch.int32, device="cuda")
                base = KernelArgs(
                    logits=lg, lens_a=kv, lens_b=dummy_i, out=out,
                    values=torch.empty(1, 1, device="cuda"), workspace=ws.view(torch.uint32),
                    paths=stamps, k=k, next_n=1, cr_shift=0, parts=route.parts,
                    block_max=no_bounds,
                )  # fmt: skip
                runs = []
                for _ in range(args.reps):
                    flush.zero_()
                    stamps.zero_()
                    fns[stamped_cfg](*base)
                    torch.cuda.synchronize()
                    st = stamps.view(route.grid, STAMP_WORDS).cpu().numpy().astype(np.int64)
                    ph = phases(st, route.grid, route.parts)
                    if ph is not None:
                        runs.append(ph)
                want = torch.sort(torch.topk(lg, k).values).values
                got = torch.sort(torch.gather(lg, 1, out.long())).values
                exact = torch.equal(got, want)
                plain = base._replace(paths=dummy_i)
                t_ev = timeit(lambda a=plain: fns[cfg](*a), flush, 40)
                med = {m: np.median([r[m] for r in runs if m in r]) / 1000 for m in names
                       if any(m in r for r in runs)}  # fmt: skip
                cells = "  ".join(f"{m} {v:.2f}" for m, v in med.items())
                print(
                    f"b={b} n={n} k={k} {cfg.name} p{route.parts}: exact {exact} "
                    f"event {t_ev:.1f} | {cells}  ({len(runs)} launches)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
