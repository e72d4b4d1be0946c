"""Where the small-batch kernels spend their time: ncu profiles of GVR's routed kernels, of
gvr_2's and of a *floor* kernel per CTA shape, on the same gaussian float32 rows (results:
``benchmarks/results/h200/ncu_profile.log``)::

    ncu --clock-control none --profile-from-start off --set full --import-source no \\
        -o prof python3 tools/ncu_profile.py
    ncu -i prof.ncu-rep --page source --print-source sass --csv > source.csv
    python3 tools/ncu_profile.py --regions source.csv
    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \\
        --csv python3 tools/ncu_profile.py --rows 1 > b1.csv
    python3 tools/ncu_profile.py --durations b1.csv

The floor kernel of a shape does what any kernel of that shape must: read the row's length,
load the row into registers (the same 16-byte loads as the register family), one CTA-wide
maximum (one barrier) and the write of ``k`` indices; its duration is the time no selection
can go below on that shape (variants: a thread-block cluster, a large shared-memory request,
the row requested before its length is read). ``--regions`` prints per kernel the warp-state
samples and instructions between consecutive CTA barriers (``BAR.SYNC``) of the SASS, so the
time of each phase can be read off without changing the kernel; ``--only`` picks launches by
name, ``--rows`` sets the batch of every launch.
"""

import argparse
import csv
import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: (label, rows, n, k): one wave of CTAs or clusters of the routed shape of each cell.
CELLS = [
    ("reg512x2", 128, 4096, 512),
    ("reg512x2", 128, 4096, 1024),
    ("reg1024x4", 128, 16384, 512),
    ("cluster8x512", 8, 65536, 512),
    ("split16", 8, 262144, 512),
    ("split32", 1, 262144, 512),
    ("split32", 1, 262144, 1024),
]
#: Floor kernels: (threads, vecs, cluster, dynamic shared bytes, preload, rows, n, k).
FLOORS = [
    (512, 2, 1, 0, False, 128, 4096, 512),
    (1024, 1, 1, 0, False, 128, 4096, 512),
    (1024, 1, 1, 0, True, 128, 4096, 512),
    (512, 2, 1, 76000, False, 128, 4096, 512),
    (1024, 4, 1, 0, False, 128, 16384, 512),
    (1024, 4, 1, 0, True, 128, 16384, 512),
    (512, 4, 8, 0, False, 8, 65536, 512),
    (512, 4, 8, 150000, False, 8, 65536, 512),
    (512, 4, 8, 0, True, 8, 65536, 512),
    (1024, 4, 4, 0, False, 8, 65536, 512),
]
#: Register-family configurations forced on cells: (threads, vecs, bracket, rows, n, k).
FORCED = [
    (512, 2, True, 128, 4096, 512),
    (512, 2, True, 128, 4096, 2048),
    (1024, 1, True, 128, 4096, 512),
    (1024, 1, False, 128, 4096, 512),
    (1024, 4, True, 128, 16384, 512),
    (1024, 4, True, 128, 16384, 2048),
]


def _floor_kernel():
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64, Uint32
    from gvr_kernels.device.cluster import cluster_sync, remote
    from gvr_kernels.device.keys import order_key
    from gvr_kernels.device.memory import load_vec4
    from gvr_kernels.device.ops import umax
    from gvr_kernels.device.window import row_window

    class FloorKernel:
        """Row length, the row into registers, one CTA (cluster) maximum, ``k`` indices
        written. ``cluster``: CTAs per row (a thread-block cluster, the maximum gathered in
        the leader through DSMEM); ``smem``: dynamic shared memory bytes asked for (to see
        what a large carveout costs); ``preload``: the row's loads are issued from the
        logits width before its length is read (keys past the length masked after)."""

        def __init__(self, threads: int, vecs: int, cluster: int = 1, smem: int = 0,
                     preload: bool = False):  # fmt: skip
            self.threads, self.vecs, self.cluster = threads, vecs, cluster
            self.smem, self.preload = smem, preload

        @cute.jit
        def __call__(self, logits, lens, out, top, k: Int32, stream):
            if cutlass.const_expr(self.cluster > 1):
                self.kernel(logits, lens, out, top, k).launch(
                    grid=[self.cluster, out.shape[0], 1], block=[self.threads, 1, 1],
                    cluster=[self.cluster, 1, 1], smem=self.smem + 16, stream=stream,
                )  # fmt: skip
            else:
                self.kernel(logits, lens, out, top, k).launch(
                    grid=[out.shape[0], 1, 1], block=[self.threads, 1, 1],
                    smem=self.smem + 16, stream=stream,
                )  # fmt: skip

        @cute.kernel
        def kernel(self, logits, lens, out, top, k: Int32):
            rank, row, _ = cute.arch.block_idx()
            if cutlass.const_expr(self.cluster == 1):
                row = rank
                rank = Int32(0)
            tid, _, _ = cute.arch.thread_idx()
            smem = cutlass.memory.SmemAllocator()
            word = smem.allocate_tensor(Uint32, cute.make_layout(4), byte_alignment=16)
            v0 = rank * (self.threads * self.vecs)
            raw = []
            if cutlass.const_expr(self.preload):
                wvec = logits.shape[1] >> 2
                base0 = logits.iterator + Int64(row) * Int64(logits.stride[0])
                for j in cutlass.range_constexpr(self.vecs):
                    v = v0 + tid + j * self.threads
                    v = cutlass.select_(v < wvec, v, 0)
                    raw.append(load_vec4(base0 + Int64(v) * Int64(4)))
            n, _lead, base = row_window("decode", logits, lens, lens, row, Int32(1), Int32(0))
            nvec = n >> 2
            if cutlass.const_expr(not self.preload):
                for j in cutlass.range_constexpr(self.vecs):
                    v = v0 + tid + j * self.threads
                    v = cutlass.select_(v < nvec, v, 0)
                    raw.append(load_vec4(base + Int64(v) * Int64(4)))
            if tid == 0:
                word[0] = Uint32(0)
            if cutlass.const_expr(self.cluster > 1):
                cluster_sync()
            else:
                cute.arch.barrier()
            m = Uint32(0)
            for j in cutlass.range_constexpr(self.vecs):
                ok = v0 + tid + j * self.threads < nvec
                for q in cutlass.range_constexpr(4):
                    m = umax(m, cutlass.select_(ok, order_key(raw[j][q]), Uint32(0)))
            m = Uint32(cute.arch.warp_redux_sync(m, "umax"))
            if cute.arch.lane_idx() == 0:
                if cutlass.const_expr(self.cluster > 1):
                    cute.arch.atomic_max(remote(word.iterator, Int32(0)), m, scope="cluster")
                else:
                    cute.arch.atomic_max(word.iterator, m)
            if cutlass.const_expr(self.cluster > 1):
                cluster_sync()
            else:
                cute.arch.barrier()
            if rank == 0:
                for j in cutlass.range(tid, k, self.threads):
                    out[row, j] = j
                if tid == 0:
                    top[row] = Int32(word[0])

    return FloorKernel


def _compile_floor(threads: int, vecs: int, cluster: int = 1, smem: int = 0, preload=False):
    import cutlass.cute as cute
    from cutlass import Float32, Int32

    rows, width, kdim = cute.sym_int(), cute.sym_int(), cute.sym_int()
    logits = cute.runtime.make_fake_tensor(
        Float32, (rows, width), (cute.sym_int64(divisibility=4), 1), assumed_align=16
    )
    lens = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
    out = cute.runtime.make_fake_compact_tensor(Int32, (rows, kdim), stride_order=(1, 0))
    top = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    kern = _floor_kernel()(threads, vecs, cluster, smem, preload)
    return cute.compile(kern, logits, lens, out, top, Int32(1), stream, options="--enable-tvm-ffi")


def run(rows_override=None, only=None) -> None:
    import torch
    from ncu_b1 import checked_pair

    g = torch.Generator(device="cuda").manual_seed(7)
    calls = []

    def wanted(name: str) -> bool:
        return not only or any(o in name for o in only)

    for label, rows, n, k in CELLS:
        rows = rows_override or rows
        if not (
            wanted(f"gvr {label} b={rows} n={n} k={k}") or wanted(f"gvr2 b={rows} n={n} k={k}")
        ):
            continue
        x = torch.randn(rows, n, device="cuda", generator=g)
        kv = torch.full((rows,), n, dtype=torch.int32, device="cuda")
        a, b = checked_pair(x, kv, k)
        calls += [(f"gvr {label} b={rows} n={n} k={k}", a), (f"gvr2 b={rows} n={n} k={k}", b)]
    for threads, vecs, cluster, smem, preload, rows, n, k in FLOORS:
        rows = rows_override or rows
        tag = f"floor {threads}x{vecs} c{cluster} smem{smem} pre{int(preload)}"
        if not wanted(f"{tag} b={rows} n={n} k={k}"):
            continue
        fn = _compile_floor(threads, vecs, cluster, smem, preload)
        x = torch.randn(rows, n, device="cuda", generator=g)
        kv = torch.full((rows,), n, dtype=torch.int32, device="cuda")
        out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
        top = torch.empty((rows,), dtype=torch.int32, device="cuda")

        def f(fn=fn, x=x, kv=kv, out=out, top=top, k=k):
            fn(x, kv, out, top, k)

        f()
        torch.cuda.synchronize()
        assert bool((out[:, :k] == torch.arange(k, device="cuda")).all())
        calls.append((f"{tag} b={rows} n={n} k={k}", f))
    from gvr_kernels.register import RegisterConfig
    from gvr_kernels.routing import Route
    from gvr_kernels.testing import KernelProvider

    prov = KernelProvider()
    for threads, vecs, bracket, rows, n, k in FORCED:
        rows = rows_override or rows
        cfg = RegisterConfig(threads=threads, vecs=vecs, bracket=bracket)
        if not wanted(f"forced {cfg.name} b={rows} n={n} k={k}"):
            continue
        route = Route(config=cfg, parts=1, grid=rows, workspace_words=0, n_env=n)
        x = torch.randn(rows, n, device="cuda", generator=g)
        kv = torch.full((rows,), n, dtype=torch.int32, device="cuda")

        def f(x=x, kv=kv, k=k, route=route):
            return prov.launch("decode", x, kv, None, k, route=route)[0]

        got = torch.sort(torch.gather(x, 1, f().long())).values
        assert torch.equal(got, torch.sort(torch.topk(x, k).values).values), cfg.name
        calls.append((f"forced {cfg.name} b={rows} n={n} k={k}", f))
    # Clocks up before the profiled range (ncu leaves them uncontrolled).
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):
        a @ a
    calls = [(name, f) for name, f in calls if wanted(name)]
    torch.cuda.synchronize()
    for name, _ in calls:
        print("plan:", name)
    torch.cuda.profiler.start()
    for _name, f in calls:
        torch.cuda._sleep(100)
        f()
        torch.cuda.synchronize()
    torch.cuda._sleep(100)
    torch.cuda.profiler.stop()


# ---------------------------------------------------------------------------- report
def _csv_rows(text: str):
    at = text.find('"ID"')
    return list(csv.DictReader(io.StringIO(text[at:]))) if at >= 0 else []


def report_durations(path: str) -> None:
    """Kernel durations of a ``--metrics gpu__time_duration.sum --csv`` run, one line per
    launch (the ``plan:`` lines the run printed name them; the sleep kernels between launches
    delimit them)."""
    text = open(path).read()
    plans = [line[6:].strip() for line in text.splitlines() if line.startswith("plan:")]
    groups, cur = [], None
    for r in _csv_rows(text):
        if r["Metric Name"] != "gpu__time_duration.sum":
            continue
        if "spin_kernel" in r["Kernel Name"]:
            if cur is not None:
                groups.append(cur)
            cur = []
        elif cur is not None and "elementwise" not in r["Kernel Name"]:
            cur.append(float(r["Metric Value"].replace(",", "")) / 1e3)
    for name, us in zip(plans, groups, strict=False):
        print(f"{name:72s} " + " + ".join(f"{u:6.2f}" for u in us) + " us")


def report_regions(path: str) -> None:
    """Per kernel of an ``ncu --page source --print-source sass --csv`` export: the warp-state
    samples and executed instructions of each stretch of SASS between CTA barriers
    (``BAR.SYNC``) and exits, the phases of the kernel, with the region's three commonest
    stall reasons (sample counts; ``no_inst``: the warp waited for its next instruction to be
    fetched). ``(xN)``: how many warps executed the region's last instruction, so one CTA's
    regions (a split row's finishing CTA) stand apart from every CTA's."""
    text = open(path).read()
    for block in re.split(r'\n(?="Kernel Name")', text):
        lines = block.strip().splitlines()
        if len(lines) < 3 or "spin_kernel" in lines[0] or "elementwise" in lines[0]:
            continue
        table = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
        key = "Warp Stall Sampling (All Samples)"
        if not table or key not in table[0]:
            continue
        total = sum(float(t[key] or 0) for t in table) or 1.0
        reasons = [c for c in table[0] if c.startswith("stall_") and "Not Issued" not in c]
        print(lines[0][:110])
        samples = inst = 0.0
        why = dict.fromkeys(reasons, 0.0)
        first = 0
        for i, t in enumerate(table):
            samples += float(t[key] or 0)
            for r in reasons:
                why[r] += float(t[r] or 0)
            executed = float(t["Instructions Executed"] or 0)
            inst += executed
            src = t["Source"].strip()
            if ("BAR.SYNC" in src or "EXIT" in src) and (executed > 0 or samples > 0):
                top = sorted(((v, r) for r, v in why.items() if v), reverse=True)[:3]
                print(
                    f"    [{first:5d}-{i:5d}] {100 * samples / total:5.1f}% of samples "
                    f"({samples:.0f}), {inst:10.0f} warp instructions, ends {src[:30]} "
                    f"(x{executed:.0f}) | " + ", ".join(f"{r[6:]} {v:.0f}" for v, r in top)
                )
                samples = inst = 0.0
                why = dict.fromkeys(reasons, 0.0)
                first = i + 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--durations", default=None, help="report a --csv duration run")
    ap.add_argument("--regions", default=None, help="report a --page source --csv export")
    ap.add_argument(
        "--only", nargs="+", default=None, help="launches whose name holds one of these"
    )
    ap.add_argument(
        "--rows", type=int, default=None, help="rows of every launch (default: one wave)"
    )
    args = ap.parse_args()
    if args.durations:
        report_durations(args.durations)
    elif args.regions:
        report_regions(args.regions)
    else:
        sys.exit(run(args.rows, args.only))
