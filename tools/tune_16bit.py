"""Time 16-bit streaming variants against float32 on bandwidth-bound shapes (cold L2, raw
kernel calls, every answer checked exact first); the variants compile in parallel into the
persistent cache first (``GVR_CACHE_DIR``). What ``gvr_kernels.routing``'s 16-bit tile shape
comes from (``benchmarks/results/h200/tune_16bit.log``):

    source .device/setup.sh && GVR_CACHE_DIR=/tmp/gvr-cache python3 tools/tune_16bit.py
"""

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

SHAPES = ((512, 262144), (1, 262144))
VARIANTS = (("u2", {}), ("u2pf", dict(prefetch=True)), ("u3", dict(unroll=3)))


def plan(spec):
    from gvr_kernels.routing import route_static

    out = []
    for b, n in SHAPES:
        for k in (512, 2048):
            base = route_static(spec, rows=b, n_env=n, k=k, dtype="bfloat16")
            vs = [("f32", route_static(spec, rows=b, n_env=n, k=k))]
            vs += [(nm, replace(base, config=replace(base.config, **kw))) for nm, kw in VARIANTS]
            out.append((b, n, k, vs))
    return out


def build(cfg):
    from gvr_dispatch.cache import KernelCache

    try:
        KernelCache().get(cfg, "sm_90a")
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:80]}"


if __name__ == "__main__":
    import torch
    from gvr_dispatch.cache import KernelCache
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.spec import spec_from_properties
    from gvr_kernels.testing import check_windows
    from tune_register import timed  # the tools' one cold-L2 timer (this folder)

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    cases = plan(spec)
    cfgs = list(dict.fromkeys(r.config for *_, vs in cases for _, r in vs))
    with ProcessPoolExecutor(len(cfgs)) as ex:
        errs = dict(zip(cfgs, ex.map(build, cfgs), strict=True))
    cache = KernelCache()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < 2:
        a @ a
    torch.cuda.synchronize()
    ws = torch.zeros(1 << 22, dtype=torch.int32, device="cuda").view(torch.uint32)
    dummy = torch.zeros(1, dtype=torch.int32, device="cuda")

    for b, n, k, vs in cases:
        x32 = torch.randn(b, n, device="cuda")
        x16 = x32.to(torch.bfloat16)
        kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
        line = [f"b={b} n={n} k={k}"]
        for name, route in vs:
            if errs[route.config]:
                line.append(f"{name}=ERR({errs[route.config]})")
                continue
            x = x32 if name == "f32" else x16
            fn = cache.get(route.config, "sm_90a")[0].fn
            out = torch.empty((b, k), dtype=torch.int32, device="cuda")
            val = torch.empty((1, 1), dtype=x.dtype, device="cuda")
            args = KernelArgs(x, kv, dummy, out, val, ws, dummy, k, 1, 0, route.parts)
            fn(*args)
            ok = bool(check_windows(x, torch.zeros_like(kv), kv, k, out).all())
            line.append(f"{name}={timed(lambda: fn(*args), flush, 15):.1f}{'' if ok else '!BAD'}")
        print(" ".join(line), flush=True)
