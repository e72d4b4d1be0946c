"""Where a register-resident row spends its time, on the GPU::

    python3 tools/time_register_phases.py                     # b = 1, n = 4,096 / 16,384
    python3 tools/time_register_phases.py --ns 16384 --ks 512 --batches 1,132

Each cell is routed as the dispatcher routes a decode call (``gvr_kernels.routing.route_static``)
and must land on the register-resident family. That configuration is compiled twice: as
routed, and with ``stamp_phases`` (thread 0 of every CTA stamps ``%globaltimer`` at the
boundaries of ``gvr_kernels.register.config.STAMPS``; the stamps change no result). For each of
30 launches, the L2 flushed before each, the tool reads every CTA's phases (the time from each
boundary it stamped to the next; a path that skips a boundary folds its time into the next
one) and takes their median over the CTAs, then the median over the launches, in
microseconds, beside the event time of the routed kernel (CUDA events, median of 40) and the
slowest CTA's total. The stamped answer is checked against ``torch.topk`` (the selected values
as multisets), on gaussian float32 rows of full length.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

WRAP = 1 << 31


def cta_phases(stamps: np.ndarray, names: tuple[str, ...]) -> list[dict[str, float]]:
    """Per CTA (rows of ``stamps``, int64 ``[grid, >= len(names)]``, zero where a boundary was
    not stamped), the ns from each stamped boundary to the next stamped one, keyed by the
    later boundary's name, and ``total`` (first to last stamp); the stamps wrap every
    ``2**31`` ns. CTAs that stamped fewer than two boundaries are left out."""
    out = []
    for row in stamps:
        hit = [i for i in range(len(names)) if row[i] != 0]
        if len(hit) < 2:
            continue
        ph = {}
        for a, b in zip(hit, hit[1:], strict=False):
            ph[names[b]] = float((int(row[b]) - int(row[a])) % WRAP)
        ph["total"] = float((int(row[hit[-1]]) - int(row[hit[0]])) % WRAP)
        out.append(ph)
    return out


def launch_summary(per_cta: list[dict[str, float]], names: tuple[str, ...]) -> dict[str, float]:
    """One launch: the median over its CTAs of each phase, and the slowest CTA's total
    (``slowest``)."""
    med = {}
    for m in names[1:] + ("total",):
        vals = [p[m] for p in per_cta if m in p]
        if vals:
            med[m] = float(np.median(vals))
    if per_cta:
        med["slowest"] = max(p["total"] for p in per_cta)
    return med


def main() -> None:
    import torch
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.compile import compile_config
    from gvr_kernels.family import STAMP_WORDS
    from gvr_kernels.register.config import STAMPS
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import spec_from_properties

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="4096,16384")
    ap.add_argument("--ks", default="512,1024,2048")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    from device_streaming import timeit, timing_setup

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    flush = timing_setup()
    dummy_i = torch.zeros(1, dtype=torch.int32, device="cuda")
    fns = {}
    for b in map(int, args.batches.split(",")):
        for n in map(int, args.ns.split(",")):
            for k in map(int, args.ks.split(",")):
                route = route_static(spec, rows=b, n_env=n, k=k)
                cfg = route.config
                if cfg.family != "register":
                    print(f"b={b} n={n} k={k}: routed to {cfg.name}, not the register family")
                    continue
                stamped_cfg = replace(cfg, stamp_phases=True)
                for c in (cfg, stamped_cfg):
                    if c not in fns:
                        fns[c] = compile_config(c)
                g = torch.Generator(device="cuda").manual_seed(n + k + b)
                lg = torch.randn(b, n, generator=g, device="cuda")
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                out = torch.empty((b, k), dtype=torch.int32, device="cuda")
                stamps = torch.zeros(route.grid * STAMP_WORDS, dtype=torch.int32, device="cuda")
                base = KernelArgs(
                    logits=lg, lens_a=kv, lens_b=dummy_i, out=out,
                    values=torch.empty(1, 1, device="cuda"),
                    workspace=dummy_i.view(torch.uint32), paths=stamps, k=k, next_n=1,
                    cr_shift=0, parts=route.parts, block_max=torch.zeros(1, 1, device="cuda"),
                )  # fmt: skip
                runs = []
                for _ in range(args.reps):
                    flush.zero_()
                    stamps.zero_()
                    fns[stamped_cfg](*base)
                    torch.cuda.synchronize()
                    st = stamps.view(route.grid, STAMP_WORDS).cpu().numpy().astype(np.int64)
                    runs.append(launch_summary(cta_phases(st, STAMPS), STAMPS))
                want = torch.sort(torch.topk(lg, k).values).values
                got = torch.sort(torch.gather(lg, 1, out.long())).values
                exact = torch.equal(got, want)
                plain = base._replace(paths=dummy_i)
                t_ev = timeit(lambda a=plain: fns[cfg](*a), flush, 40)
                keys = STAMPS[1:] + ("total", "slowest")
                med = {m: np.median([r[m] for r in runs if m in r]) / 1000 for m in keys
                       if any(m in r for r in runs)}  # fmt: skip
                cells = "  ".join(f"{m} {v:.2f}" for m, v in med.items())
                print(
                    f"b={b} n={n} k={k} {cfg.name}: exact {exact} event {t_ev:.1f} | {cells}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
