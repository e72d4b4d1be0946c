"""ncu kernel durations at b = 1 for GVR (through ``gvr_dispatch.topk_decode``) and gvr_2
(FlashInfer's ``top_k_varlen(backend="gvr_2", skip_check=True)``), on the same gaussian
float32 rows, for every K and n of the decode grid (results:
``benchmarks/results/h200/ncu_b1.log``)::

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \\
        --csv python3 tools/ncu_b1.py --reps 5 > ncu_b1.csv
    python3 tools/ncu_b1.py --report ncu_b1.csv --reps 5

Both providers are called (and, for GVR, compiled) before the profiled range; inside it
each makes ``--reps`` calls per cell (one round over every cell and provider, then the
next round), ncu flushing the caches before each kernel; every kernel a call launches is
summed (gvr_2's cluster family launches one kernel, GVR one), and the report gives the
median call of each cell and provider beside the range of the others.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics

NS = (4096, 16384, 65536, 131072, 262144)
KS = (512, 1024, 2048)


def cells():
    return [(n, k) for n in NS for k in KS]


def checked_pair(x, kv, k: int):
    """Two callables on decode rows ``x`` (lengths ``kv``): GVR (``gvr_dispatch.topk_decode``)
    and gvr_2 (``top_k_varlen(backend="gvr_2", skip_check=True)``), each run twice and its
    answer checked against ``torch.topk`` before they are returned."""
    import gvr_dispatch as gvr
    import torch
    from flashinfer.topk_varlen.topk_varlen import top_k_varlen

    rows = x.shape[0]
    out_g = torch.empty((rows, k), dtype=torch.int32, device=x.device)
    out_u = torch.empty((rows, k), dtype=torch.int32, device=x.device)

    def a():
        gvr.topk_decode(x, kv, k, out=out_g, max_seq_len=x.shape[1])

    def b():
        top_k_varlen(x, kv, k, backend="gvr_2", skip_check=True, out_indices=out_u)

    for f in (a, b, a, b):
        f()
    torch.cuda.synchronize()
    want = torch.sort(torch.topk(x, k).values).values
    for out in (out_g, out_u):
        got = torch.sort(torch.gather(x, 1, out.long())).values
        assert torch.equal(got, want), (tuple(x.shape), k)
    return a, b


def run(reps: int) -> None:
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    calls = []
    for n, k in cells():
        x = torch.randn(1, n, device="cuda", generator=g)
        kv = torch.full((1,), n, dtype=torch.int32, device="cuda")
        a, b = checked_pair(x, kv, k)
        calls += [(f"gvr n={n} k={k}", a), (f"gvr2 n={n} k={k}", b)]
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(reps):
        for _name, f in calls:
            torch.cuda._sleep(100)  # the delimiter between two calls' kernels
            f()
            torch.cuda.synchronize()
    torch.cuda._sleep(100)
    torch.cuda.profiler.stop()


def report(path: str, reps: int) -> None:
    text = open(path).read()
    rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"') :])))
    rows = [r for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    names = [f"{p} n={n} k={k}" for n, k in cells() for p in ("gvr", "gvr2")]
    # The delimiter kernels split the launches into calls; every kernel of a call is summed.
    groups, cur = [], None
    for r in rows:
        if "spin_kernel" in r["Kernel Name"]:
            if cur is not None:
                groups.append(cur)
            cur = []
        elif cur is not None:
            us = float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]]
            cur.append((_short(r["Kernel Name"]), us))
    assert len(groups) == reps * len(names), (len(groups), reps, len(names))
    width = len(names)
    sums = [[sum(d for _, d in groups[r * width + i]) for r in range(reps)] for i in range(width)]
    print(
        f"ncu gpu__time_duration (us), b = 1, every kernel of one call summed; median of {reps}"
        " calls a cell [min-max]"
    )
    for i in range(0, len(names), 2):
        g = statistics.median(sums[i])
        u = statistics.median(sums[i + 1])
        kinds = (
            " + ".join(k for k, _ in groups[i]) + " | " + " + ".join(k for k, _ in groups[i + 1])
        )
        print(
            f"{names[i][4:]:>16}: GVR {g:6.2f} [{min(sums[i]):5.2f}-{max(sums[i]):5.2f}]  "
            f"gvr_2 {u:6.2f} [{min(sums[i + 1]):5.2f}-{max(sums[i + 1]):5.2f}]  "
            f"ratio {g / u:4.2f}  [{kinds}]"
        )


def _short(name: str) -> str:
    """A kernel's family from its mangled name."""
    for key in ("Streaming", "Register", "Cluster", "GvrTopk"):
        at = name.find(key)
        if at >= 0:
            return name[at : at + 28].split("_")[0]
    return name[:28]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", default=None)
    ap.add_argument("--reps", type=int, default=1, help="calls a cell and provider")
    args = ap.parse_args()
    report(args.report, args.reps) if args.report else run(args.reps)
