"""Device sweep for the streaming kernels: exactness at scale, forced paths, quick timings.

Run on a GPU machine (kernels exported with ``tools/export_kernels.py``, or JIT-compiled when
the CuTe DSL is installed)::

    python tools/device_streaming.py --aot .aot --check --paths --bench --out results/

Every case prints one line; failures print the first failing rows. Exit status 1 on any
inexact row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from gvr_kernels.abi import KernelArgs
from gvr_kernels.routing import RAGGED_BULK_MAX_ROWS, route_static
from gvr_kernels.streaming import StreamingConfig
from gvr_kernels.testing import (
    FAMILY_NAMES,
    KernelProvider,
    check_windows,
    families,
    poison_beyond,
)
from gvr_reference.ladder import row_plan
from gvr_reference.model import ModelConfig, simulate_row
from gvr_reference.model import Path as KPath
from gvr_reference.model import sample_positions as model_sample_positions

DEV = torch.device("cuda")


def workspace(words: int):
    """The provider's split workspace (large enough for every launch of this tool)."""
    assert words <= KP.workspace.numel()
    return KP.workspace


KP = None
SPEC = None
#: The logits dtype of the checking cases (``--dtype``): float32, or bfloat16 / float16 rows
#: (the family's scores rounded to it) for the 16-bit configurations.
DTYPE = torch.float32


def run(kern, *args, **kwargs):
    return kern.launch(*args, **kwargs)


def streaming_route(rows, width, k, mode):
    """The streaming family's route for a launch (whatever family the router would pick)."""
    dtype = str(DTYPE).removeprefix("torch.")
    return route_static(
        SPEC, rows=rows, n_env=width, k=k, mode=mode, dtype=dtype, families=("streaming",)
    )


def decode_lengths(kv, next_n, cr, width):
    r = torch.arange(kv.numel() * next_n, device=DEV)
    t = kv.to(torch.int64)[r // next_n] - next_n + (r % next_n) + 1
    return (t.clamp(min=0) // cr).clamp(max=width)


FAILS = []
#: Workspace words per row of the split core the tune table times.
_SPLIT_WORDS_PER_ROW = StreamingConfig(split=True).workspace_words_per_row


def report(tag, ok, extra=""):
    bad = (~ok).nonzero().flatten().tolist()
    status = "ok " if not bad else "BAD"
    print(f"{status} {tag} rows={ok.numel()} bad={len(bad)} {extra}", flush=True)
    if bad:
        FAILS.append((tag, bad[:10]))
    return ok.numel()


def case_decode(
    kern,
    g,
    k,
    b,
    n,
    family,
    *,
    next_n=1,
    cr=1,
    values=False,
    det=False,
    ragged=False,
    stride_pad=0,
    width=None,
    streaming=False,
):
    width = width or n
    rows = b * next_n
    vec = 4 if DTYPE == torch.float32 else 8
    alloc = -(-(width + stride_pad) // vec) * vec
    full = families(family, rows, alloc, k, g).to(DTYPE)
    logits = full[:, :width]
    if ragged:
        kv = torch.randint(
            0, width * cr + next_n + 1, (b,), generator=g, device=DEV, dtype=torch.int32
        )
        special = [0, 1, next_n - 1, k * cr + next_n - 1, (k + 1) * cr + next_n - 1, width * cr + 7]
        for i in range(min(len(special), b)):
            kv[i] = max(special[i], 0)
    else:
        kv = torch.full((b,), n * cr + next_n - 1, dtype=torch.int32, device=DEV)
    lengths = decode_lengths(kv, next_n, cr, width)
    starts = torch.zeros_like(lengths)
    poison_beyond(full, starts, lengths)
    out, val, _, route = run(
        kern,
        "decode",
        logits,
        kv,
        None,
        k,
        next_n=next_n,
        cr=cr,
        values=values,
        det=det,
        n_env=width,
        route=streaming_route(rows, width, k, "decode") if streaming else None,
    )
    ok = check_windows(logits, starts, lengths, k, out, val)
    if det:
        ok &= det_check(logits, starts, lengths, k, out)
    return report(
        f"decode k={k} b={b} n={n} {family} nn={next_n} cr={cr} v={values} det={det} "
        f"ragged={ragged} pad={stride_pad} parts={route.parts}",
        ok,
    )


def det_check(logits, starts, lengths, k, out):
    from gvr_kernels.testing import order_key_torch

    wmax = max(int(lengths.max().item()), k)
    pos = torch.arange(wmax, device=DEV)
    cols = (starts[:, None].to(torch.int64) + pos[None, :]).clamp(max=logits.shape[1] - 1)
    keys = order_key_torch(torch.gather(logits, 1, cols).float())
    keys = torch.where(pos[None, :] < lengths[:, None], keys, torch.full_like(keys, -1))
    order = torch.sort(keys, dim=1, descending=True, stable=True).indices[:, :k]
    m = torch.clamp(lengths, max=k)
    slot = torch.arange(k, device=DEV)[None, :]
    exp = torch.where(slot < m[:, None], order, torch.full_like(order, -1))
    return (torch.sort(exp, 1).values == torch.sort(out.to(torch.int64), 1).values).all(1)


def case_prefill(kern, g, k, rows, width, family, *, values=False, det=False, streaming=False):
    vec = 4 if DTYPE == torch.float32 else 8
    arena = families(family, rows, -(-width // vec) * vec, k, g).to(DTYPE)
    full = arena[:, :width]
    s = torch.randint(0, width, (rows,), generator=g, device=DEV)
    e = torch.randint(0, width + 1, (rows,), generator=g, device=DEV)
    s, e = torch.minimum(s, e), torch.maximum(s, e)
    s[:4] = torch.tensor([1, 2, 3, 0], device=DEV)[: min(4, rows)]
    e[:4] = torch.tensor([width, width - 1, 3 + k, k], device=DEV)[: min(4, rows)]
    lengths = e - s
    poison_beyond(arena, s, lengths)
    out, val, _, route = run(
        kern,
        "prefill",
        full,
        s.to(torch.int32),
        e.to(torch.int32),
        k,
        values=values,
        det=det,
        route=streaming_route(rows, width, k, "prefill") if streaming else None,
    )
    ok = check_windows(full, s, lengths, k, out, val)
    if det:
        ok &= det_check(full, s, lengths, k, out)
    return report(
        f"prefill k={k} rows={rows} w={width} {family} v={values} det={det} parts={route.parts}", ok
    )


def sample_positions(n, k, params, lead=0):
    p = row_plan(n, k, lead, params)
    return torch.from_numpy(model_sample_positions(p, 4, lead)), p


def case_paths(kern, g):
    """Rows built to reach every path; the kernel's recorded path must equal the model's."""
    total = 0
    for split in (False, True):
        # (split: five rows, one of each kind; else one CTA a row past the ragged split)
        b = 5 if split else RAGGED_BULK_MAX_ROWS + 88
        k = 2048
        n = 131072
        route = route_static(SPEC, rows=b, n_env=n, k=k, families=("streaming",))
        assert (route.parts > 1) == split, route
        mcfg = ModelConfig(route.ladder, parts=route.parts)
        x = torch.randn(b, n, generator=g, device=DEV)
        pos, plan = sample_positions(n, k, route.ladder)
        pos = pos[pos >= 0].to(DEV)
        kinds = []
        for r in range(b):
            kind = r % 5
            if kind == 1:  # only the top sample ranks are huge: first rung too high, retry works
                sel = pos[: plan.j1]
                x[r, sel] = 1000.0 + torch.arange(sel.numel(), device=DEV, dtype=torch.float32)
            elif kind == 2:  # every sampled score huge: no rung reaches k survivors
                x[r, pos] = 1000.0 + torch.arange(pos.numel(), device=DEV, dtype=torch.float32)
            elif kind == 3:  # a tie class far larger than the staging at the rung
                x[r] = torch.where(torch.rand(n, generator=g, device=DEV) < 0.3, 7.0, x[r])
            elif kind == 4:  # short and unsampled rows through kv_lens
                pass
            kinds.append(kind)
        kv = torch.full((b,), n, dtype=torch.int32, device=DEV)
        for r in range(b):
            if kinds[r] == 4:
                kv[r] = [k - 1, k, 2 * k, 3 * k + 1][r % 4]
        lengths = decode_lengths(kv, 1, 1, n)
        out, _, pth, _ = run(kern, "decode", x, kv, None, k, paths=True, route=route)
        ok = check_windows(x, torch.zeros_like(lengths), lengths, k, out)
        xs = x.cpu().numpy()
        want = torch.tensor(
            [int(simulate_row(xs[r, : int(lengths[r])], k, mcfg).path) for r in range(b)],
            device=DEV,
            dtype=torch.int32,
        )
        agree = pth == want
        seen = sorted({KPath(int(v)).name for v in want.tolist()})
        total += report(
            f"paths split={split} seen={seen}", ok & agree, f"disagree={(~agree).sum().item()}"
        )
        if not bool(agree.all()):
            bad = (~agree).nonzero().flatten()[:5].tolist()
            print("   kernel", [int(pth[i]) for i in bad], "model", [int(want[i]) for i in bad])
    return total


def bench(kern, g, out_dir):
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=DEV)
    results = []
    for k in (512, 1024, 2048):
        for n in (4096, 16384, 65536, 131072, 262144):
            if n <= k:
                continue
            for b in (1, 8, 32, 128, 512):
                x = torch.randn(b, n, generator=g, device=DEV)
                kv = torch.full((b,), n, dtype=torch.int32, device=DEV)
                route = route_static(SPEC, rows=b, n_env=n, k=k)
                fn = kern.get(route.config)
                out = torch.empty((b, k), dtype=torch.int32, device=DEV)
                val = torch.empty((1, 1), dtype=torch.float32, device=DEV)
                pth = torch.empty((1,), dtype=torch.int32, device=DEV)
                ws = workspace(route.workspace_words)

                args = KernelArgs(x, kv, kv, out, val, ws, pth, k, 1, 0, route.parts, NO_BOUNDS())

                def ours():
                    fn(*args)

                def theirs():
                    torch.topk(x, k, dim=1, sorted=False)

                ours()
                ok = bool(
                    check_windows(
                        x,
                        torch.zeros(b, device=DEV, dtype=torch.int64),
                        torch.full((b,), n, device=DEV),
                        k,
                        out,
                    ).all()
                )
                t_ours = timeit(ours, flush)
                t_torch = timeit(theirs, flush)
                rec = dict(
                    k=k,
                    n=n,
                    b=b,
                    parts=route.parts,
                    threads=route.config.threads,
                    gvr_us=t_ours,
                    torch_us=t_torch,
                    speedup=t_torch / t_ours,
                    exact=ok,
                )
                results.append(rec)
                print(
                    f"bench k={k:5d} n={n:7d} b={b:4d} parts={route.parts:3d} "
                    f"gvr={t_ours:9.1f}us torch={t_torch:9.1f}us x{t_torch / t_ours:6.2f} "
                    f"exact={ok}",
                    flush=True,
                )
    sp = [r["speedup"] for r in results]
    geo = math.exp(sum(math.log(s) for s in sp) / len(sp))
    print(f"bench geomean x{geo:.2f} min x{min(sp):.2f} cells={len(sp)}")
    if out_dir:
        Path(out_dir, "bench.json").write_text(json.dumps(results, indent=1))


def tune(kern, g):
    """Timings of configuration variants (cheap to run, pick by measurement): CTA size and
    one tile of bulk L2 prefetch for single-CTA rows, CTAs per split row (``tune.log`` is of
    the per-thread prefetch this field meant before 77d1227)."""
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=DEV)
    val = torch.empty((1, 1), dtype=torch.float32, device=DEV)
    pth = torch.empty((1,), dtype=torch.int32, device=DEV)
    variants = {
        "t1024": dict(threads=1024, capacity=16384),
        "t1024pf": dict(threads=1024, capacity=16384, prefetch=1),
        "t512": dict(threads=512, capacity=8192),
        "t512pf": dict(threads=512, capacity=8192, prefetch=1),
    }
    for k in (512, 2048):
        for n in (4096, 16384, 65536, 262144):
            for b in (1, 4, 16, 32, 64, 128, 256, 512, 1024):
                if b * n > (1 << 28):
                    continue
                x = torch.randn(b, n, generator=g, device=DEV)
                kv = torch.full((b,), n, dtype=torch.int32, device=DEV)
                out = torch.empty((b, k), dtype=torch.int32, device=DEV)
                ws = workspace(min(b, SPEC.sm_count // 2) * _SPLIT_WORDS_PER_ROW)
                row = []
                for name, core in variants.items():
                    fn = kern.get(StreamingConfig(mode="decode", **core))
                    args = KernelArgs(x, kv, kv, out, val, ws, pth, k, 1, 0, 1, NO_BOUNDS())
                    t = timeit(lambda: fn(*args), flush, 10)
                    row.append(f"{name}:{t:.1f}")
                for pf in (0, 1):
                    fn = kern.get(
                        StreamingConfig(
                            mode="decode",
                            threads=1024,
                            capacity=16384,
                            split=True,
                            aim_mult=3,
                            prefetch=pf,
                        )
                    )
                    for parts in (2, 4, 8, 16, 32):
                        if b * parts > SPEC.sm_count:
                            continue
                        args = KernelArgs(x, kv, kv, out, val, ws, pth, k, 1, 0, parts, NO_BOUNDS())
                        t = timeit(lambda: fn(*args), flush, 10)
                        row.append(f"{'q' if pf else 'p'}{parts}:{t:.1f}")
                print(f"tune k={k} n={n} b={b} " + " ".join(row), flush=True)


def timing_setup():
    """The buffer :func:`timeit` zeroes to flush the L2 (twice the H200's 60 MiB), made after
    2 s of bf16 matmuls that raise the clocks."""
    flush = torch.empty(2 * 60 * 2**20 // 4, dtype=torch.float32, device="cuda")
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time.time()
    while time.time() - t < 2:
        x @ x
    return flush


def NO_BOUNDS():
    """A float32 ``[1, 1]`` stand-in for ``KernelArgs.block_max`` (read by no kernel here)."""
    return torch.zeros(1, 1, device="cuda", dtype=torch.float32)


def decode_args(kp, logits, kv, out, k, parts=1, block_max=None):
    """``KernelArgs`` of a direct decode launch of a ``KernelProvider``'s kernel: ``next_n``
    1, no values (a placeholder in the logits dtype), no path log, the provider's workspace;
    ``block_max`` for a block-skip configuration."""
    return KernelArgs(
        logits=logits, lens_a=kv, lens_b=kp.dummy_i, out=out,
        values=torch.empty(1, 1, device="cuda", dtype=logits.dtype), workspace=kp.workspace,
        paths=kp.dummy_i, k=k, next_n=1, cr_shift=0, parts=parts,
        block_max=NO_BOUNDS() if block_max is None else block_max,
    )  # fmt: skip


def timed_exact(kp, cfg, parts, logits, kv, k, flush, reps=40):
    """A direct decode launch of ``cfg`` (``kp``'s kernel, ``parts`` its argument) checked
    first (each row's selected values equal ``torch.topk``'s over its window, as multisets; a
    row of ``n <= k`` scores the identity), then timed (:func:`timeit`): ``(us, exact)``."""
    f = kp.get(cfg)
    out = torch.empty((logits.shape[0], k), dtype=torch.int32, device="cuda")
    args = decode_args(kp, logits, kv, out, k, parts)
    f(*args)
    torch.cuda.synchronize()
    ok = True
    for r, n in enumerate(kv.tolist()):
        if n <= k:
            ok &= bool(torch.equal(out[r, :n].cpu(), torch.arange(n, dtype=torch.int32)))
            continue
        got = torch.sort(logits[r, :n][out[r].long()]).values
        want = torch.sort(torch.topk(logits[r, :n], k).values).values
        ok &= bool(torch.equal(got, want))
    return timeit(lambda: f(*args), flush, reps), ok


def timeit(fn, flush, reps=20):
    times = []
    for _ in range(reps):
        flush.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1000.0)
    return statistics.median(times)


def main():
    global SPEC
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--aot", default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--paths", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--small", action="store_true", help="one small case per launch shape")
    ap.add_argument(
        "--sanitize",
        action="store_true",
        help="tiny cases of each launch shape (single, split, prefill) for compute-sanitizer",
    )
    ap.add_argument("--tune", action="store_true", help="routing-constant timings")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="logits dtype of the --small / --sanitize / --check cases",
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    global KP, DTYPE
    DTYPE = getattr(torch, args.dtype)
    KP = kern = KernelProvider(args.aot)
    SPEC = kern.spec
    print("device", SPEC)
    seed = args.seed if args.seed is not None else int(time.time())
    print("seed", seed)
    g = torch.Generator(device=DEV).manual_seed(seed)
    rows = 0
    t0 = time.time()
    if args.small:
        rows += case_decode(kern, g, 512, 4, 20000, "gaussian", ragged=True)
        rows += case_decode(kern, g, 512, 1, 70000, "gaussian")
        rows += case_decode(kern, g, 512, 2, 70000, "two_valued", det=True, values=True)
        rows += case_prefill(kern, g, 512, 8, 9000, "gaussian", values=True)
    if args.sanitize:
        # Every launch shape of the streaming family (routed to it whatever the router would
        # pick for the shape); the register and cluster families have their own
        # (tools/sanitize_register.py, the cluster device tests).
        for case, args_, kw in (
            (case_decode, (512, 140, 33000, "gaussian"), {"values": True}),  # single CTA
            (case_decode, (512, 1, 40000, "gaussian"), {}),  # split rows
            (case_decode, (512, 1, 40000, "two_valued"), {"det": True}),  # split + rescue
            (case_prefill, (512, 4, 40001, "gaussian"), {"values": True}),  # prefill, split
            (case_prefill, (512, 140, 33001, "gaussian"), {"det": True}),  # prefill, single
            (case_decode, (512, 1, 40000, "constant"), {"det": True}),  # split + tie scan
            (case_decode, (512, 70, 33000, "few_finite"), {"values": True}),  # single + ties
            (case_decode, (1024, 40, 140000, "gaussian"), {"ragged": True}),  # ragged split
            # ragged split of more rows than SMs (512-thread CTAs, rows meeting in slots)
            (case_decode, (1024, 150, 140000, "gaussian"), {"ragged": True}),
            # ... and of up to two rows per SM from a shorter envelope
            (case_decode, (512, 200, 100000, "gaussian"), {"ragged": True}),
            # K above 1024: the split and the ragged split aim at 2 K survivors
            (case_decode, (2048, 1, 40000, "gaussian"), {}),
            (case_decode, (2048, 40, 140000, "gaussian"), {"ragged": True}),
        ):
            rows += case(kern, g, *args_, streaming=True, **kw)
    if args.check:
        for k in (512, 1024, 2048):
            for n, b in (
                (4096, 64),
                (16384, 16),
                (65536, 8),
                (262144, 2),
                (262144, 1),
                (30000, 200),
                (9000, 600),
            ):
                rows += case_decode(kern, g, k, b, n, "gaussian")
            for fam in FAMILY_NAMES[1:]:  # every family but gaussian
                rows += case_decode(kern, g, k, 24, 50000, fam, ragged=True)
                rows += case_decode(kern, g, k, 2, 200000, fam)
            for nn in (1, 2, 3, 4):
                for cr in (1, 4):
                    rows += case_decode(
                        kern,
                        g,
                        k,
                        40,
                        40000,
                        "gaussian",
                        next_n=nn,
                        cr=cr,
                        ragged=True,
                        stride_pad=8,
                        width=40003,
                    )
            rows += case_decode(kern, g, k, 1024, 5000, "gaussian", ragged=True)
            rows += case_decode(kern, g, k, 3, 100000, "quantized", values=True, det=True)
            rows += case_decode(
                kern, g, k, 300, 12000, "two_valued", values=True, det=True, ragged=True
            )
            rows += case_prefill(kern, g, k, 100, 30001, "gaussian", values=True)
            rows += case_prefill(kern, g, k, 300, 9000, "quantized", det=True)
        rows += case_prefill(kern, g, 512, 70000, 700, "gaussian")
        for k in (1, 7, 100, 1000, 2047):
            rows += case_decode(kern, g, k, 16, 40000, "quantized", ragged=True, values=True)
    if args.paths:
        rows += case_paths(kern, g)
    print(f"checked {rows} rows in {time.time() - t0:.0f}s; failures: {len(FAILS)}")
    for f in FAILS[:20]:
        print("FAIL", f)
    if args.bench:
        bench(kern, g, args.out)
    if args.tune:
        tune(kern, g)
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
