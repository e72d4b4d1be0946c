"""Where a cluster-register row spends its time, on the GPU (results:
``benchmarks/results/h200/tune_cluster_phases.log``)::

    python3 tools/time_cluster_phases.py

A subclass of the kernel stamps ``%globaltimer`` from thread 0 of the leader CTA at the
kernel entry, after the row window, after the sample exchange, after the rung, after the
gather's stores, after its cluster barrier and after the leader's selection, into the debug
``paths`` tensor (words ``[16 row, 16 row + 7)``); the phases are the medians of 30 launches
with the L2 flushed before each, beside the event time of the unmodified kernel. Every answer is
checked against ``torch.topk``. Full-length rows only (the stamped kernel has no short-row
branch). The cases are configurations of the sampled path (no bracket, no early loads, the
family's defaults): the stamped subclass follows that path's phases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cutlass
import cutlass.cute as cute
import numpy as np
from cutlass import Int32, Int64, Uint32
from gvr_kernels.abi import KernelArgs, fake_kernel_args
from gvr_kernels.cluster import ClusterConfig
from gvr_kernels.cluster.kernel import ClusterTopK, allocate_shared
from gvr_kernels.device.cluster import cluster_sync, gather_selected
from gvr_kernels.device.layout import Ctl, Window
from gvr_kernels.device.window import row_window

sys.path.insert(0, str(Path(__file__).parent))

PHASES = ("entry->window", "load+exchange", "rung", "gather", "sync", "finish")
#: Stamp slots in the order of the phases' boundaries.
ORDER = (6, 0, 1, 2, 3, 4, 5)
CASES = [
    (65536, 512, ClusterConfig(cluster=8, threads=512, vecs=4)),
    (65536, 1024, ClusterConfig(cluster=8, threads=512, vecs=4)),
    (65536, 2048, ClusterConfig(cluster=4, threads=1024, vecs=4)),
    (32768, 512, ClusterConfig(cluster=4, threads=512, vecs=4)),
]


@cute.jit
def _stamp(paths, i: cutlass.Constexpr):
    tid, _, _ = cute.arch.thread_idx()
    rank, row, _ = cute.arch.block_idx()
    g = Int32(Int64(cute.arch.globaltimer()) & Int64(0x7FFFFFFF))
    if (tid == 0) & (rank == 0):
        paths[row * 16 + i] = g


class StampedClusterTopK(ClusterTopK):
    """The cluster kernel with time stamps between its phases (full-length rows only)."""

    @cute.kernel
    def kernel(
        self, logits, lens_a, lens_b, out, values, workspace, paths,
        k: Int32, next_n: Int32, cr_shift: Int32, parts: Int32,
    ):  # fmt: skip
        cfg = self.cfg
        rank, row, _ = cute.arch.block_idx()
        _stamp(paths, 6)
        sh, _ = allocate_shared(cfg)
        n, lead, base = row_window(cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift)
        nvec = (lead + n) >> 2
        win = Window(base, lead, nvec, cutlass.max(nvec * 4 - lead, Int32(0)), n)
        _stamp(paths, 0)
        regs, top, sample_key = self._load(sh, win, rank, None)
        self._exchange(sh, rank, top, sample_key)
        _stamp(paths, 1)
        code, thr, crowded = self._rung(sh, win, k)
        _stamp(paths, 2)
        lo = thr + Uint32(crowded)
        elems = [(key, regs.pos(i, cfg), key >= lo) for i, key in enumerate(regs.keys)]
        gather_selected(cfg.capacity, sh, Int32(0), Ctl.CNT, elems)
        _stamp(paths, 3)
        cluster_sync()
        _stamp(paths, 4)
        if rank == 0:
            self._finish(sh, win, out, values, paths, row, k, code, thr, lo, crowded)
        _stamp(paths, 5)


def main() -> None:
    import torch
    from device_streaming import timeit, timing_setup

    opts = "--enable-tvm-ffi"
    fns = {}
    for _, _, cfg in CASES:
        if cfg not in fns:
            fns[cfg] = [
                cute.compile(kind(cfg), *fake_kernel_args(), options=opts)
                for kind in (StampedClusterTopK, ClusterTopK)
            ]
    flush = timing_setup()
    dummy = torch.zeros(1, dtype=torch.int32, device="cuda")
    ws = torch.zeros(16, dtype=torch.int32, device="cuda").view(torch.uint32)
    for n, k, cfg in CASES:
        lg = torch.randn(1, n, device="cuda")
        kv = torch.full((1,), n, dtype=torch.int32, device="cuda")
        want = torch.sort(torch.topk(lg, k).values).values
        stamped, plain = fns[cfg]
        stamps = torch.zeros(16, dtype=torch.int32, device="cuda")
        out = torch.empty((1, k), dtype=torch.int32, device="cuda")
        none = torch.empty(1, 1, device="cuda")
        args = KernelArgs(
            lg, kv, dummy, out, none, ws, stamps, k, 1, 0, 1, torch.zeros(1, 1, device=lg.device)
        )
        deltas = []
        for _ in range(30):
            flush.zero_()
            stamped(*args)
            torch.cuda.synchronize()
            c = stamps.cpu().numpy().astype(np.int64)
            deltas.append([(c[ORDER[i + 1]] - c[ORDER[i]]) % (1 << 31) for i in range(6)])
        ok = torch.equal(torch.sort(torch.gather(lg, 1, out.long())).values, want)
        med = np.median(np.array(deltas), axis=0) / 1000
        plain_args = args._replace(paths=dummy)
        t_ev = timeit(lambda a=plain_args: plain(*a), flush, 40)
        cells = "  ".join(f"{p} {m:.2f}" for p, m in zip(PHASES, med, strict=True))
        print(
            f"n={n} k={k} {cfg.name}: exact {ok} event {t_ev:.1f} | {cells}  (sum {med.sum():.2f})"
        )


if __name__ == "__main__":
    main()
