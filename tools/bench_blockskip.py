"""Block-skip on the GPU, side by side in one run: GVR without block maxima, GVR with them
(the routed launch, and block skip forced on the same streaming route below the working-set
gate), upstream gvr_2 and torch.topk, on the same tensors.

Rows (decode, every row ``n`` scores long, ``b`` rows):

- ``gaussian``: standard normal;
- ``sink_window``: ``gvr_reference.workloads.sink_window`` (an attention sink and a recent
  window: the locality rows block-skip exists for);
- ``real:<set>``: the shared real score rows (``scratch/real_rows.npz`` or ``--real``),
  cycled to ``b`` rows at their own width.

Every GVR answer is checked against torch.topk's value multiset. Times: median of ``--reps``
launches, L2 flushed before each (cold), clocks raised first; eager launches of the compiled
kernel (``fn(*args)``: no dispatcher) and CUDA-graph replays of the same launch. Block maxima
come from the torch producer (``gvr_integration.indexer.block_maxima``), not timed.

    python tools/bench_blockskip.py --out bench_blockskip.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from device_streaming import timeit as time_eager  # noqa: E402
from device_streaming import timing_setup  # noqa: E402
from gvr_integration.indexer import block_maxima  # noqa: E402
from gvr_kernels.abi import KernelArgs  # noqa: E402
from gvr_kernels.routing import route_static  # noqa: E402
from gvr_kernels.testing import KernelProvider  # noqa: E402
from gvr_reference.blockskip import BLOCK, SKIPPED  # noqa: E402


def rows_of(kind, b, n, real):
    if kind == "gaussian":
        return torch.randn(b, n, device="cuda")
    if kind == "sink_window":
        x = torch.randn(b, n, device="cuda")
        x[:, :64] += 8
        x[:, n - min(4096, n // 4) :] += 6
        return x
    name = kind.split(":", 1)[1]
    lg, ln = real[name + "_logits"], real[name + "_lengths"]
    width = lg.shape[1]
    pick = np.arange(b) % lg.shape[0]
    x = torch.from_numpy(np.ascontiguousarray(lg[pick])).cuda()
    return x, torch.from_numpy(ln[pick].astype(np.int32)).cuda(), width


def time_graph(fn, flush, reps):
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a provider that cannot be captured
        return None, repr(e)[:120]
    return time_eager(g.replay, flush, reps), None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--real", default="scratch/real_rows.npz")
    ap.add_argument("--batches", default="1,32,128,512")
    ap.add_argument("--widths", default="65536,131072,262144")
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--kinds", default="gaussian,sink_window,real:kjv131k,real:stdlib32k")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = ap.parse_args()
    torch.manual_seed(0)
    kp = KernelProvider()
    real = dict(np.load(args.real)) if os.path.exists(args.real) else {}
    try:
        from flashinfer.topk_varlen.topk_varlen import top_k_varlen
    except Exception:  # noqa: BLE001
        top_k_varlen = None
    flush = timing_setup()
    dummy_f = torch.zeros(1, 1, device="cuda")
    records = []
    batches = [int(x) for x in args.batches.split(",")]
    for kind in args.kinds.split(","):
        widths = [int(x) for x in args.widths.split(",")] if ":" not in kind else [0]
        for n in widths:
            for b in batches:
                if kind.startswith("real:") and kind.split(":")[1] + "_logits" not in real:
                    continue
                if kind.startswith("real:"):
                    x, lens, n = rows_of(kind, b, n, real)
                else:
                    x = rows_of(kind, b, n, real)
                    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
                if args.dtype != "float32":
                    x = x.to(getattr(torch, args.dtype))
                bm = block_maxima(x.float(), BLOCK)
                for k in [int(v) for v in args.ks.split(",")]:
                    rec = run_cell(kp, kind, x, lens, bm, b, n, k, flush, args.reps, dummy_f,
                                   top_k_varlen)  # fmt: skip
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
                del x, bm
                torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "commit": os.environ.get(
            "GVR_COMMIT", "?"), "records": records}, f, indent=1)  # fmt: skip


def run_cell(kp, kind, x, lens, bm, b, n, k, flush, reps, dummy_f, top_k_varlen):
    want = torch.topk(
        torch.where(
            torch.arange(x.shape[1], device="cuda")[None, :] < lens[:, None].long(),
            x,
            -float("inf"),
        ),
        k,
        dim=1,
    ).values
    want = want.sort(dim=1).values  # fmt: skip
    dtype = str(x.dtype).removeprefix("torch.")
    rec = {"kind": kind, "dtype": dtype, "b": b, "n": n, "k": k,
           "gb": b * n * x.element_size() / 2**30}  # fmt: skip
    base = route_static(kp.spec, rows=b, n_env=n, k=k, dtype=dtype)
    routed = route_static(kp.spec, rows=b, n_env=n, k=k, dtype=dtype, block_skip=True)
    variants = {"gvr": (base, None), "gvr_bmax_routed": (routed, bm)}
    if base.family == "streaming":
        forced = replace(base.config, block_skip=True, l2_hints=False)
        if base.config.ragged and base.config.threads == 512:
            # the ragged split of many rows is never routed with block skip: one CTA a row
            forced = replace(forced, split=False, ragged=False)
            base = replace(base, parts=1, grid=b, workspace_words=0)
        variants["gvr_bmax_forced"] = (replace(base, config=forced), bm)
    else:
        s = route_static(kp.spec, rows=b, n_env=n, k=k, dtype=dtype, families=("streaming",))
        variants["gvr_streaming"] = (s, None)
        forced = replace(s.config, block_skip=True, l2_hints=False)
        variants["gvr_bmax_forced"] = (replace(s, config=forced), bm)
    rec["routes"] = {name: r.config.name for name, (r, _) in variants.items()}
    for name, (route, bmax) in variants.items():
        cfg = replace(route.config, record_paths=True)
        fn = kp.get(cfg)
        out = torch.empty(b, k, dtype=torch.int32, device="cuda")
        paths = torch.empty(b, dtype=torch.int32, device="cuda")
        a = KernelArgs(
            x,
            lens,
            kp.dummy_i,
            out,
            torch.empty(1, 1, device="cuda", dtype=x.dtype),
            kp.workspace,
            paths,
            k,
            1,
            0,
            route.parts,
            dummy_f if bmax is None else bmax,
        )
        fn(*a)
        torch.cuda.synchronize()
        got = torch.gather(x, 1, out.long().clamp(min=0)).sort(dim=1).values
        ok = bool(torch.equal(got, want) and (out >= 0).all())
        rec[name + "_exact"] = ok
        rec[name + "_skipped"] = float(((paths & SKIPPED) != 0).float().mean())
        cfg = route.config
        fn = kp.get(cfg)
        a = a._replace(paths=kp.dummy_i)
        rec[name + "_us"] = round(time_eager(lambda: fn(*a), flush, reps), 2)
        g, err = time_graph(lambda: fn(*a), flush, reps)
        rec[name + "_graph_us"] = None if g is None else round(g, 2)
    if top_k_varlen is not None and dtype == "float32":
        out = torch.empty(b, k, dtype=torch.int32, device="cuda")

        def gvr2():
            return top_k_varlen(x, lens, k, backend="gvr_2", skip_check=True, out_indices=out)

        try:
            gvr2()
            torch.cuda.synchronize()
            got = torch.gather(x, 1, out.long().clamp(min=0)).sort(dim=1).values
            rec["gvr2_exact"] = bool(torch.equal(got, want))
            rec["gvr2_us"] = round(time_eager(gvr2, flush, reps), 2)
            g, err = time_graph(gvr2, flush, reps)
            rec["gvr2_graph_us"] = None if g is None else round(g, 2)
        except Exception as e:  # noqa: BLE001
            rec["gvr2_error"] = repr(e)[:200]
    rec["torch_us"] = round(time_eager(lambda: torch.topk(x, k, dim=1), flush, reps), 2)
    for name in ("gvr_bmax_routed", "gvr_bmax_forced"):
        if rec.get(name + "_us"):
            rec[name + "_speedup"] = round(rec["gvr_us"] / rec[name + "_us"], 3)
    return rec


if __name__ == "__main__":
    main()
