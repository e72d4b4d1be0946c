"""Time variants of the routed streaming configuration (``--variants``: L2 prefetch depth,
vectors per thread, ...) on the bandwidth-bound shapes, beside gvr_2 and a one-pass read
(``torch.amax``) of the same tensor (cold L2, raw kernel calls, every answer checked exact
first). The variants compile in parallel into the persistent cache first (``GVR_CACHE_DIR``).
What ``gvr_kernels.routing``'s prefetch depth and 16-bit tile come from
(``benchmarks/results/h200/tune_bandwidth.log``):

    source .device/setup.sh && GVR_CACHE_DIR=/tmp/gvr-cache python3 tools/tune_bandwidth.py \
        --variants pf0:prefetch=0,pf1:prefetch=1,u4:unroll=4

gvr_2 (FlashInfer ``top_k_varlen(backend="gvr_2", skip_check=True)``, staged by
``stage.sh jit --gvr2``) runs on the float32 rows only; it is skipped where it is not importable.
"""

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

SHAPES = ((512, 262144), (256, 262144), (128, 262144), (512, 65536), (128, 65536),
          (32, 65536), (1, 262144))  # fmt: skip
VARIANTS = "pf1:prefetch=1,pf2:prefetch=2,pf4:prefetch=4"


def parse_variants(text):
    """``name:field=int[;field=int],...`` -> ``[(name, {field: int})]``."""
    out = []
    for item in filter(None, text.split(",")):
        name, _, fields = item.partition(":")
        out.append((name, {f: int(v) for f, v in (kv.split("=") for kv in fields.split(";"))}))
    return out


def plan(spec, ks, dtypes, variants):
    from gvr_kernels.routing import route_static

    out = []
    for dtype in dtypes:
        for b, n in SHAPES:
            for k in ks:
                base = route_static(spec, rows=b, n_env=n, k=k, dtype=dtype)
                vs = [("route", base)]
                if base.family == "streaming":
                    for name, fields in variants:
                        vs.append((name, replace(base, config=replace(base.config, **fields))))
                out.append((dtype, b, n, k, vs))
    return out


def build(cfg):
    from gvr_dispatch.cache import KernelCache

    try:
        KernelCache().get(cfg, "sm_90a")
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:80]}"


def main():
    import torch
    from gvr_dispatch.cache import KernelCache
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.spec import spec_from_properties
    from gvr_kernels.testing import check_windows
    from tune_register import timed  # the tools' one cold-L2 timer (this folder)

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ks", default="512,2048")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--variants", default=VARIANTS, help="name:field=int[;field=int],...")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None, help="JSON file for the table")
    args = ap.parse_args()
    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    cases = plan(
        spec,
        [int(k) for k in args.ks.split(",")],
        args.dtypes.split(","),
        parse_variants(args.variants),
    )
    cfgs = list(dict.fromkeys(r.config for *_, vs in cases for _, r in vs))
    with ProcessPoolExecutor(min(len(cfgs), 16)) as ex:
        errs = dict(zip(cfgs, ex.map(build, cfgs), strict=True))
    try:
        from flashinfer.topk_varlen.topk_varlen import top_k_varlen
    except Exception:  # not staged
        top_k_varlen = None
    cache = KernelCache()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < 3:
        a @ a
    torch.cuda.synchronize()
    ws = torch.zeros(1 << 22, dtype=torch.int32, device="cuda").view(torch.uint32)
    dummy = torch.zeros(1, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(12)
    table = []
    for dtype, b, n, k, vs in cases:
        x = torch.randn(b, n, device="cuda", generator=g).to(getattr(torch, dtype))
        kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
        cell = {"dtype": dtype, "b": b, "n": n, "k": k, "route": vs[0][1].config.name}
        cell["amax"] = timed(lambda: torch.amax(x, dim=1), flush, args.reps)
        if top_k_varlen is not None and dtype == "float32":
            o2 = torch.empty((b, k), dtype=torch.int32, device="cuda")

            def g2():
                return top_k_varlen(x, kv, k, backend="gvr_2", skip_check=True, out_indices=o2)

            g2()
            ok = bool(check_windows(x, torch.zeros_like(kv), kv, k, o2).all())
            cell["gvr2"] = timed(g2, flush, args.reps) if ok else "inexact"
        for name, route in vs:
            if errs[route.config]:
                cell[name] = f"ERR({errs[route.config]})"
                continue
            fn = cache.get(route.config, "sm_90a")[0].fn
            out = torch.empty((b, k), dtype=torch.int32, device="cuda")
            val = torch.empty((1, 1), dtype=x.dtype, device="cuda")
            kargs = KernelArgs(
                x, kv, dummy, out, val, ws, dummy, k, 1, 0, route.parts,
                torch.zeros(1, 1, device=x.device),
            )  # fmt: skip
            fn(*kargs)
            ok = bool(check_windows(x, torch.zeros_like(kv), kv, k, out).all())
            cell[name] = timed(lambda: fn(*kargs), flush, args.reps) if ok else "inexact"
        table.append(cell)
        print(" ".join(f"{key}={v:.1f}" if isinstance(v, float) else f"{key}={v}"
                       for key, v in cell.items()), flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
