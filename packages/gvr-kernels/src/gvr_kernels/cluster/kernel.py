"""The cluster-register GVR top-K family: one thread-block cluster per row, the row held in
the registers of its CTAs.

Per row (decisions and their CPU model: ``gvr_reference.cluster_model``; invariants in
``docs/kernels.md``):

1. **Window** as in the streaming family; rows with ``n <= k`` are written by the leader
   (rank 0) as the identity then ``-1``.
2. **Load.** CTA ``r`` issues the 16-byte loads of its chunk (vector ``r V + tid + j *
   threads``, ``V = threads * vecs``), the last CTA's warp 0 the 0-3 tail scores, all before
   any is used; every CTA zeroes its control words and arrives at the cluster barrier while
   the loads are in flight (a remote write must not reach a CTA before it runs, nor before
   its words are zeroed).
3. **Sample exchange.** Every thread stores its sample key into slot ``r * threads + tid``
   of every CTA's sample array (DSMEM), every warp adds its valid-slot count to every CTA's
   counter and its largest key to the leader's; one cluster barrier, and every CTA holds the
   whole sample.
4. **Rung.** Every CTA narrows the same sample with the same arithmetic, so all find the
   same ``T`` without a broadcast.
5. **Gather.** Every CTA appends its keys ``>= T`` (above ``T`` on a crowded rung, whose
   ties are counted) to the leader's staging: one remote atomic per warp, remote stores of
   (key, position). One cluster barrier; the other CTAs are done.
6. **Select** (the leader): radix narrowing over the staged keys and one emission (values
   read back from global memory for the selected scores only); a crowded rung with too few
   keys above it adds the first ties by an in-order scan; too many or too few survivors take
   the whole-row radix selection from global memory.

Barriers on the critical path of a ``FIRST`` row: 3 cluster barriers (start, sample,
gather) + 2 per rung level + 2 per selection level + the emission's 2 on the leader. No
global memory is written before the answer and nothing is left to clean: the family needs
no workspace and is safe under CUDA-graph replay.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32
from gvr_reference.model import Path
from gvr_reference.register_model import register_plan

from ..device import shared
from ..device.cluster import cluster_sync, gather_selected, remote, store_remote
from ..device.keys import KEY_MAX, order_key
from ..device.layout import Ctl, EmitArgs, Goal, Rank, RegisterRow, Source, Window
from ..device.memory import load_scalar, load_vec4
from ..device.ops import DEVICE_OPS
from ..device.sampling import thread_sample_key
from ..device.select import emit_rule, emit_ties_in_order, narrow, select_and_emit
from ..device.shared import ctl_u32, record_path
from ..device.window import row_window, write_short_row
from .config import CTL_WORDS, HIST_BINS, SMEM_ALIGN, ClusterConfig

__all__ = ["ClusterTopK", "allocate_shared"]

#: Control word counting the valid sample keys of the row.
_SVALID = Ctl.TOTAL
#: The leader CTA of a row's cluster.
_LEADER = 0


@cute.jit
def allocate_shared(cfg: cutlass.Constexpr):
    """The CTA's shared arrays (``cfg.shared_layout()``) and their allocator."""
    return shared.allocate_shared(cfg.shared_layout(), SMEM_ALIGN)


class ClusterTopK:
    """Exact top-K over rows of fp32 logits held in the registers of a thread-block cluster
    (see the module docstring).

    Launch arguments: the common kernel ABI (``gvr_kernels.abi.KernelArgs``); ``workspace``
    and ``parts`` are unused (the grid is ``cluster`` CTAs per row, one cluster each).
    Supported: as the streaming family (fp32, unit inner stride, row stride a multiple of 4,
    16-byte-aligned base), ``1 <= k <= 2048``, any row length (rows longer than
    ``config.max_n`` are read from memory by the leader), at most 65,535 rows per launch (the
    grid's second dimension; the router sends at most ``sm_count / 8`` rows here).
    """

    def __init__(self, config: ClusterConfig):
        self.cfg = config

    # ------------------------------------------------------------------ host launcher
    @cute.jit
    def __call__(
        self,
        logits: cute.Tensor,  # (rows, width) : (row_stride, 1), fp32
        lens_a: cute.Tensor,  # (?,) int32
        lens_b: cute.Tensor,  # (?,) int32
        out: cute.Tensor,  # (rows, k) int32
        values: cute.Tensor,  # (rows, k) fp32
        workspace: cute.Tensor,  # (?,) uint32, unused
        paths: cute.Tensor,  # (?,) int32
        k: Int32,
        next_n: Int32,
        cr_shift: Int32,
        parts: Int32,
        stream: cuda.CUstream,
    ):
        rows = out.shape[0]
        self.kernel(
            logits, lens_a, lens_b, out, values, workspace, paths, k, next_n, cr_shift, parts
        ).launch(
            grid=[self.cfg.cluster, rows, 1],
            block=[self.cfg.threads, 1, 1],
            cluster=[self.cfg.cluster, 1, 1],
            smem=self.cfg.smem_bytes,
            stream=stream,
            min_blocks_per_mp=1,
            preferred_smem_carveout=100,
        )

    # ------------------------------------------------------------------ device kernel
    @cute.kernel
    def kernel(
        self,
        logits: cute.Tensor,
        lens_a: cute.Tensor,
        lens_b: cute.Tensor,
        out: cute.Tensor,
        values: cute.Tensor,
        workspace: cute.Tensor,
        paths: cute.Tensor,
        k: Int32,
        next_n: Int32,
        cr_shift: Int32,
        parts: Int32,
    ):
        cfg = self.cfg
        rank, row, _ = cute.arch.block_idx()
        sh, _ = allocate_shared(cfg)

        n, lead, base = row_window(cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift)

        # Every CTA of the cluster sees the same window, so all take the same branch.
        if n <= k:
            if rank == _LEADER:
                write_short_row(cfg, out, values, base, lead, row, n, k)
                self._record(paths, row, Int32(Path.SHORT))
        else:
            nvec = (lead + n) >> 2
            win = Window(base, lead, nvec, cutlass.max(nvec * 4 - lead, Int32(0)), n)
            if (nvec >= 1) & (nvec <= cfg.cluster * cfg.threads * cfg.vecs):
                self._held_row(sh, out, values, paths, win, rank, row, k)
            elif rank == _LEADER:
                self._zero_shared(sh)
                cute.arch.barrier()
                select_and_emit(
                    cfg, sh, win, Source.ROW, out, values, row, k, Uint32(0), Uint32(KEY_MAX), n
                )
                self._record(paths, row, Int32(Path.WHOLE_ROW))

    # ------------------------------------------------------------------ row bodies
    @cute.jit
    def _zero_shared(self, sh):
        tid, _, _ = cute.arch.thread_idx()
        if tid < HIST_BINS:
            sh.hist[tid] = Int32(0)
        if tid < CTL_WORDS:
            sh.ctl[tid] = Int32(0)

    @cute.jit
    def _held_row(self, sh, out, values, paths, win, rank: Int32, row: Int32, k: Int32):
        regs, top, sample_key = self._load(sh, win, rank)
        self._exchange(sh, rank, top, sample_key)
        code, thr, crowded = self._rung(sh, win, k)
        lo = thr + Uint32(crowded)
        self._gather(sh, regs, thr, lo, crowded)
        if rank == _LEADER:
            self._finish(sh, win, out, values, paths, row, k, code, thr, lo, crowded)

    @cute.jit
    def _load(self, sh, win, rank: Int32):
        """Load this CTA's chunk (and, on the last CTA, the tail), zero the control words and
        arrive at the cluster barrier while the loads are in flight; returns the held keys (a
        :class:`~..device.layout.RegisterRow`: 0 outside the window), the warp's largest key
        and this thread's sample key."""
        cfg = self.cfg
        threads = cfg.threads
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp_id = tid // 32
        base, lead, nvec, tail_start, n = win
        v0 = rank * (threads * cfg.vecs)
        raw = []
        for j in cutlass.range_constexpr(cfg.vecs):
            v = v0 + tid + j * threads
            raw.append(load_vec4(base + Int64(cutlass.select_(v < nvec, v, Int32(0))) * Int64(4)))
        t_pos = tail_start + lane
        tail_ok = (rank == cfg.cluster - 1) & (warp_id == 0) & (t_pos < n)
        tail_bits = load_scalar(base + (lead + cutlass.select_(tail_ok, t_pos, Int32(0))))
        self._zero_shared(sh)
        # Release: this CTA runs and its words are zero before any remote write reaches it.
        cute.arch.cluster_arrive()

        p0 = (v0 + tid) * 4 - lead
        keys = []
        for j in cutlass.range_constexpr(cfg.vecs):
            v_ok = v0 + tid + j * threads < nvec
            for q in cutlass.range_constexpr(4):
                ok = v_ok & (p0 + (j * 4 * threads + q) >= 0)
                keys.append(Uint32(cutlass.select_(ok, order_key(raw[j][q]), Uint32(0))))
        keys.append(Uint32(cutlass.select_(tail_ok, order_key(tail_bits), Uint32(0))))
        top = keys[0]
        for i in cutlass.range_constexpr(1, len(keys)):
            top = cutlass.max(top, keys[i])
        top = Uint32(cute.arch.warp_redux_sync(top, "umax"))
        return RegisterRow(keys, p0, t_pos), top, thread_sample_key(cfg.vecs, keys)

    @cute.jit
    def _exchange(self, sh, rank: Int32, top: Uint32, sample_key: Uint32):
        """The sample key to slot ``rank * threads + tid`` of every CTA, the warp's valid
        sample count to every CTA and its largest key to the leader (DSMEM); ends with a
        cluster barrier, after which every CTA holds the row's whole sample."""
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        n_valid = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(sample_key != Uint32(0))))
        cute.arch.cluster_wait()
        slot = sh.sample.iterator + (rank * cfg.threads + tid)
        for d in cutlass.range_constexpr(cfg.cluster):
            store_remote(slot, Int32(d), sample_key)
        if cute.arch.lane_idx() == 0:
            for d in cutlass.range_constexpr(cfg.cluster):
                cute.arch.atomic_add(
                    remote(sh.ctl.iterator + _SVALID, Int32(d)), n_valid, scope="cluster"
                )
            cute.arch.atomic_max(
                remote(ctl_u32(sh.ctl, Ctl.MAXKEY), Int32(_LEADER)), top, scope="cluster"
            )
        cluster_sync()

    @cute.jit
    def _rung(self, sh, win, k: Int32):
        """The rung: the same narrowing of the same sample in every CTA. Returns
        ``(code, thr, crowded)``: ``UNSAMPLED`` with ``thr = 1`` for rows of ``n <= 2 aim``,
        else ``FIRST`` and the rung, and whether it is crowded (a single key that at least
        two sample keys share, ``gvr_reference.model.crowded_rung``)."""
        cfg = self.cfg
        plan = register_plan(win.n, k, sh.ctl[_SVALID], cfg.aim_mult, DEVICE_OPS)
        code = Int32(Path.UNSAMPLED)
        thr = Uint32(1)
        crowded = Int32(0)
        if not plan.unsampled:
            code = Int32(Path.FIRST)
            thr, ties, _ = narrow(
                cfg,
                sh,
                win,
                Source.SAMPLE,
                Rank.BY_KEY,
                Goal.RUNG,
                plan.j1,
                Uint32(1),
                Uint32(KEY_MAX),
                Uint32(0),
                Int32(cfg.sample_slots),
            )
            if (ties >= 2) & (thr < Uint32(KEY_MAX)):
                crowded = Int32(1)
        return code, thr, crowded

    @cute.jit
    def _gather(self, sh, regs, thr: Uint32, lo: Uint32, crowded: Int32):
        """Every key ``>= lo`` with its position to the leader's staging (a crowded rung:
        the keys equal to ``thr`` counted into the leader's ``EQCNT``); ends with a cluster
        barrier, after which the leader holds every survivor of the row."""
        gather_selected(
            self.cfg.capacity,
            sh,
            Int32(_LEADER),
            Ctl.CNT,
            [(key, regs.pos(i, self.cfg.threads), key >= lo) for i, key in enumerate(regs.keys)],
        )
        keys = regs.keys
        if crowded == 1:
            mine = Int32(0)
            for i in cutlass.range_constexpr(len(keys)):
                mine = mine + cutlass.select_(keys[i] == thr, 1, 0)
            mine = Int32(cute.arch.warp_redux_sync(mine, "add"))
            if cute.arch.lane_idx() == 0:
                cute.arch.atomic_add(
                    remote(sh.ctl.iterator + Ctl.EQCNT, Int32(_LEADER)), mine, scope="cluster"
                )
        cluster_sync()

    @cute.jit
    def _finish(self, sh, win, out, values, paths, row, k, code, thr, lo, crowded):
        """The leader's selection over the gathered survivors, or the exact fallbacks."""
        cfg = self.cfg
        count = sh.ctl[Ctl.CNT]
        eq = sh.ctl[Ctl.EQCNT]
        max_key = Uint32(sh.ctl[Ctl.MAXKEY])
        if count > cfg.capacity:
            code = Int32(Path.RESCUE_OVERFLOW)
            select_and_emit(
                cfg, sh, win, Source.ROW, out, values, row, k, lo, Uint32(KEY_MAX), count
            )
        elif count >= k:
            select_and_emit(
                cfg, sh, win, Source.STAGE, out, values, row, k, lo, max_key, count,
                values_from=win,
            )  # fmt: skip
        elif (crowded == 1) & (count + eq >= k):
            # Every staged key is above the rung; the first k - count keys equal to it
            # complete the answer (the row holds eq >= k - count of them).
            code = Int32(Path.TIE)
            need_eq = k - count
            emit_rule(
                cfg, sh, win, Source.STAGE, out, values, row, k, thr, need_eq, Int32(0), count,
                values_from=win,
            )  # fmt: skip
            ea = EmitArgs(out, values, row, k, count, need_eq, thr, Uint32(KEY_MAX))
            emit_ties_in_order(cfg, sh, win, ea)
        else:
            code = Int32(Path.RESCUE_UNDERESTIMATE)
            select_and_emit(
                cfg, sh, win, Source.ROW, out, values, row, k, Uint32(0), Uint32(KEY_MAX), count
            )
        self._record(paths, row, code)

    @cute.jit
    def _record(self, paths, row: Int32, code: Int32):
        record_path(self.cfg, paths, row, code)
