"""The cluster-register GVR top-K family: one thread-block cluster per row, the row held in
the registers of its CTAs.

Per row (decisions and their CPU model: ``gvr_reference.cluster_model``; invariants in
``docs/kernels.md``):

1. **Window** as in the streaming family; rows with ``n <= k`` are written by the leader
   (rank 0) as the identity then ``-1``.
2. **Load.** CTA ``r`` issues the 16-byte loads of its chunk (vector ``r V + tid + j *
   threads``, ``V = threads * vecs``), the last CTA's warp 0 the tail scores (fewer than a
   vector's), all before any is used (a decode row's vectors addressed within the logits
   width, ``device.window.load_limit``: they go out before its ``kv_lens`` entry arrives);
   every CTA zeroes its control words and arrives at the
   cluster barrier while the loads are in flight (a remote write must not reach a CTA before
   it runs, nor before its words are zeroed).
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
gather) + 2 per rung level + 2 per selection level + the emission's 2 on the leader.

A configuration built with ``bracket`` first tries the bracket histogram over the cluster
(``docs/kernels.md``, "The bracket path of the cluster family"): after the start barrier,
the cluster's reductions (the bracket's ends, the crowd test), the histogram slices sent to
their owners with every warp's total, and the crossing bin sent by its owner travel as
asynchronous DSMEM stores that complete on the receivers' mbarriers; every CTA writes its
keys of higher bins through one cluster-wide cursor, the crossing bin is written whole or
gathered to the leader and ranked or narrowed; one relaxed cluster barrier before the CTAs
leave. Rows the bracket cannot serve take steps 3-6.

No global memory is written before the answer and nothing is left to clean: the family needs
no workspace and is safe under CUDA-graph replay.

16-bit logits (``ClusterConfig.dtype``) are held as raw bits, eight scores a vector, as in the
register-resident family: the bracket bins their exact float32 widening, the sample, the rung,
the staged keys and every radix selection use the 16-bit key space.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, const_expr
from gvr_reference.model import Path
from gvr_reference.register_model import CROWD_MIN, RANK_MAX, register_plan

from ..device import shared
from ..device.bracket import (
    POS_INF_BITS,
    bin_masks,
    bracket_setup,
    count_bracket,
    crowd_clear,
    crowd_word,
    find_crossing_cta,
    fmax_nan,
    fmin,
    hist_base,
    may_lead,
    narrow_crossing,
    rank_crossing,
    spill_floor,
    stage_masked,
    warp_crowd,
    write_masked,
)
from ..device.cluster import (
    arrive_own_shared,
    cluster_sync,
    gather_selected,
    remote,
    store_async,
    store_remote,
)
from ..device.keys import KEY_MAX, format_key_of, order_key, widen_bits
from ..device.layout import Ctl, EmitArgs, Goal, Rank, RegisterRow, Source, Window
from ..device.ops import DEVICE_OPS, umax, umin
from ..device.sampling import sample_slot, thread_sample_key
from ..device.select import emit_rule, emit_ties_in_order, narrow, select_and_emit
from ..device.shared import ctl_u32, record_path
from ..device.staging import packed_warp_slots, warp_slots
from ..device.window import held_vectors, issue_vectors, load_limit, row_window, write_short_row
from .config import BRACKET_BINS, CTL_WORDS, HIST_BINS, SMEM_ALIGN, ClusterConfig

__all__ = ["ClusterTopK", "allocate_shared"]

#: Control word counting the valid sample keys of the row.
_SVALID = Ctl.TOTAL
#: The leader CTA of a row's cluster.
_LEADER = 0
#: Control word of the leader holding the bracket path's cluster-wide emission cursor (a
#: split-row word, unused by this family's own phases).
_GT_CURSOR = Ctl.LAST
#: The bracket path's mbarriers: the cluster's reductions, the histogram copies and partial
#: totals, the crossing bin, the gathered crossing-bin keys (the leader's).
_M_STATS, _M_MERGE, _M_CROSS, _M_GATHER = 0, 1, 2, 3


@cute.jit
def allocate_shared(cfg: cutlass.Constexpr):
    """The CTA's shared arrays (``cfg.shared_layout()``) and their allocator."""
    return shared.allocate_shared(cfg.shared_layout(), SMEM_ALIGN)


class ClusterTopK:
    """Exact top-K over rows of float32, bfloat16 or float16 logits (``config.dtype``) held in
    the registers of a thread-block cluster (see the module docstring).

    Launch arguments: the common kernel ABI (``gvr_kernels.abi.KernelArgs``); ``workspace``
    and ``parts`` are unused (the grid is ``cluster`` CTAs per row, one cluster each).
    Supported: as the streaming family (unit inner stride, row stride a multiple of a 16-byte
    vector's scores, 16-byte-aligned base; values in the logits dtype), ``1 <= k <= 2048``,
    any row length (rows longer than ``config.max_n`` are read from memory by the leader), at
    most 65,535 rows per launch (the grid's second dimension; the router sends at most
    ``sm_count / 8`` rows here).
    """

    def __init__(self, config: ClusterConfig):
        self.cfg = config

    # ------------------------------------------------------------------ host launcher
    @cute.jit
    def __call__(
        self,
        logits: cute.Tensor,  # (rows, width) : (row_stride, 1), config.dtype
        lens_a: cute.Tensor,  # (?,) int32
        lens_b: cute.Tensor,  # (?,) int32
        out: cute.Tensor,  # (rows, k) int32
        values: cute.Tensor,  # (rows, k) config.dtype
        workspace: cute.Tensor,  # (?,) uint32, unused
        paths: cute.Tensor,  # (?,) int32
        k: Int32,
        next_n: Int32,
        cr_shift: Int32,
        parts: Int32,
        block_max: cute.Tensor,  # unused (the common ABI's block maxima)
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
        fmt = cfg.key_format
        rank, row, _ = cute.arch.block_idx()
        sh, _ = allocate_shared(cfg)

        n, lead, base = row_window(cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift, fmt)
        nvec = (lead + n) >> Int32(fmt.vec.bit_length() - 1)
        raw = None
        if const_expr(cfg.early_loads):
            # This CTA's vectors go out before any branch on the row's length, addressed
            # within the logits width: they do not wait for kv_lens.
            lim = load_limit(cfg.mode, logits, nvec, fmt)
            raw = issue_vectors(
                base, rank * (cfg.threads * cfg.vecs), lim, cfg.threads, cfg.vecs, fmt
            )

        # Every CTA of the cluster sees the same window, so all take the same branch.
        if n <= k:
            if rank == _LEADER:
                write_short_row(cfg, out, values, base, lead, row, n, k)
                self._record(paths, row, Int32(Path.SHORT))
        else:
            win = Window(base, lead, nvec, cutlass.max(nvec * fmt.vec - lead, Int32(0)), n)
            if (nvec >= 1) & (nvec <= cfg.cluster * cfg.threads * cfg.vecs):
                self._held_row(sh, out, values, paths, win, rank, row, k, raw)
            elif rank == _LEADER:
                self._zero_shared(sh)
                cute.arch.barrier()
                select_and_emit(
                    cfg, sh, win, Source.ROW, out, values, row, k, Uint32(0),
                    Uint32(fmt.key_max), n,
                )  # fmt: skip
                self._record(paths, row, Int32(Path.WHOLE_ROW))

    # ------------------------------------------------------------------ row bodies
    @cute.jit
    def _zero_shared(self, sh):
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        if tid < HIST_BINS:
            sh.hist[tid] = Int32(0)
        if tid < CTL_WORDS:
            sh.ctl[tid] = Int32(0)
        if const_expr(cfg.bracket):
            for i in cutlass.range_constexpr(BRACKET_BINS // cfg.threads):
                sh.bhist[tid + i * cfg.threads] = Int32(0)

    @cute.jit
    def _held_row(self, sh, out, values, paths, win, rank: Int32, row: Int32, k: Int32, raw):
        if const_expr(self.cfg.bracket):
            self._bracket_row(sh, out, values, paths, win, rank, row, k, raw)
        else:
            regs, top, sample_key = self._load(sh, win, rank, raw)
            self._exchange(sh, rank, top, sample_key)
            self._sampled(sh, regs, win, out, values, paths, rank, row, k)

    @cute.jit
    def _sampled(self, sh, regs, win, out, values, paths, rank: Int32, row: Int32, k: Int32):
        """Steps 4-6 (rung, gather, the leader's selection) once every CTA holds the sample,
        its valid count and (the leader) the row's largest key."""
        code, thr, crowded = self._rung(sh, win, k)
        lo = thr + Uint32(crowded)
        self._gather(sh, regs, thr, lo, crowded)
        if rank == _LEADER:
            self._finish(sh, win, out, values, paths, row, k, code, thr, lo, crowded)

    @cute.jit
    def _load(self, sh, win, rank: Int32, raw):
        """Load the tail (the last CTA; this CTA's vectors ``raw`` are in flight), zero the
        control words and arrive at the cluster barrier while the loads are in flight; returns
        the held keys (a
        :class:`~..device.layout.RegisterRow`: 0 outside the window), the warp's largest key
        and this thread's sample key."""
        cfg = self.cfg
        threads = cfg.threads
        tid, _, _ = cute.arch.thread_idx()
        base, lead, nvec, tail_start, n = win
        v0 = rank * (threads * cfg.vecs)
        raw, t_pos, tail_ok, tail_bits = self._issue_loads(win, rank, raw)
        self._zero_shared(sh)
        # Release: this CTA runs and its words are zero before any remote write reaches it
        # (its own shared words only, the loads left in flight, where that does not spill).
        self._arrive_at_start()

        fmt = cfg.key_format
        vec = fmt.vec
        p0 = (v0 + tid) * vec - lead
        keys = []
        for j in cutlass.range_constexpr(cfg.vecs):
            for q in cutlass.range_constexpr(vec):
                ok = self._slot_ok(j, q, v0, p0, nvec)
                keys.append(Uint32(cutlass.select_(ok, order_key(raw[j][q], fmt), Uint32(0))))
        keys.append(Uint32(cutlass.select_(tail_ok, order_key(tail_bits, fmt), Uint32(0))))
        top = keys[0]
        for i in cutlass.range_constexpr(1, len(keys)):
            top = cutlass.max(top, keys[i])
        top = Uint32(cute.arch.warp_redux_sync(top, "umax"))
        return RegisterRow(keys, p0, t_pos), top, thread_sample_key(cfg.vecs, keys, vec)

    @cute.jit
    def _arrive_at_start(self):
        """Arrive at the row's start barrier: releasing this CTA's own shared memory only
        (``ClusterConfig.restricted_start``), else with a cluster-scope release."""
        if const_expr(self.cfg.restricted_start):
            arrive_own_shared()
        else:
            cute.arch.cluster_arrive()

    @cute.jit
    def _issue_loads(self, win, rank: Int32, raw):
        """This CTA's vectors (``raw``, already in flight with ``early_loads``; else issued
        here, vector ``r V + tid + j * threads``, a missing one reading position 0 and
        discarded) and, on the last CTA's warp 0, the tail scores, all before any is used.
        Returns ``(the raw bits of each vector's scores, tail position, whether this lane
        holds a tail score, its bits)``."""
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        _base, _lead, _nvec, tail_start, n = win
        t_pos = tail_start + cute.arch.lane_idx()
        tail_ok = (rank == cfg.cluster - 1) & (tid // 32 == 0) & (t_pos < n)
        v0 = rank * (cfg.threads * cfg.vecs)
        raw, tail_bits = held_vectors(
            win, v0, t_pos, tail_ok, raw, cfg.threads, cfg.vecs, cfg.key_format
        )
        return raw, t_pos, tail_ok, tail_bits

    @cute.jit
    def _exchange(self, sh, rank: Int32, top: Uint32, sample_key: Uint32):
        """The sample key to slot ``rank * threads + tid`` of every CTA, the warp's valid
        sample count to every CTA and its largest key to the leader (DSMEM); ends with a
        cluster barrier, after which every CTA holds the row's whole sample."""
        n_valid = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(sample_key != Uint32(0))))
        cute.arch.cluster_wait()
        self._send_sample(sh, rank, sample_key)
        if cute.arch.lane_idx() == 0:
            for d in cutlass.range_constexpr(self.cfg.cluster):
                cute.arch.atomic_add(
                    remote(sh.ctl.iterator + _SVALID, Int32(d)), n_valid, scope="cluster"
                )
            cute.arch.atomic_max(
                remote(ctl_u32(sh.ctl, Ctl.MAXKEY), Int32(_LEADER)), top, scope="cluster"
            )
        cluster_sync()

    @cute.jit
    def _send_sample(self, sh, rank: Int32, sample_key: Uint32):
        """This thread's sample key to slot ``rank * threads + tid`` of every CTA (DSMEM)."""
        tid, _, _ = cute.arch.thread_idx()
        slot = sh.sample.iterator + (rank * self.cfg.threads + tid)
        for d in cutlass.range_constexpr(self.cfg.cluster):
            store_remote(slot, Int32(d), sample_key)

    @cute.jit
    def _rung(self, sh, win, k: Int32):
        """The rung: the same narrowing of the same sample in every CTA. Returns
        ``(code, thr, crowded)``: ``UNSAMPLED`` with ``thr = 1`` for rows of ``n <= 2 aim``,
        else ``FIRST`` and the rung, and whether it is crowded (a single key that at least
        two sample keys share, ``gvr_reference.model.crowded_rung``)."""
        cfg = self.cfg
        key_max = Uint32(cfg.key_format.key_max)
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
                key_max,
                Uint32(0),
                Int32(cfg.sample_slots),
            )
            if (ties >= 2) & (thr < key_max):
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
            [(key, regs.pos(i, self.cfg), key >= lo) for i, key in enumerate(regs.keys)],
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
        key_max = Uint32(cfg.key_format.key_max)
        count = sh.ctl[Ctl.CNT]
        eq = sh.ctl[Ctl.EQCNT]
        max_key = Uint32(sh.ctl[Ctl.MAXKEY])
        if count > cfg.capacity:
            code = Int32(Path.RESCUE_OVERFLOW)
            select_and_emit(cfg, sh, win, Source.ROW, out, values, row, k, lo, key_max, count)
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
                cfg, sh, win, Source.ROW, out, values, row, k, Uint32(0), key_max, count
            )
        self._record(paths, row, code)

    # ------------------------------------------------------------------ bracket path
    @cute.jit
    def _bracket_row(self, sh, out, values, paths, win, rank: Int32, row: Int32, k: Int32, raw):
        """A row of a bracket configuration: load, the cluster's reductions, then the bracket
        path, or the sampled path for rows it cannot serve."""
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        threads = cfg.threads
        warps = threads // 32
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp_id = tid // 32
        base, lead, nvec, tail_start, n = win
        v0 = rank * (threads * cfg.vecs)
        # ---- load: the vectors are in flight (``raw``); the tail
        raw, t_pos, tail_ok, tail_bits = self._issue_loads(win, rank, raw)
        self._zero_shared(sh)
        if tid == 0:
            self._init_barriers(sh)
        # Release: this CTA runs, its words are zero and its mbarriers initialised before any
        # remote write reaches it (its own shared memory only, the loads left in flight, where
        # that does not spill).
        self._arrive_at_start()

        # ---- the held scores as raw bits, -inf outside the window (the float reductions
        # read their exact float32 widening)
        neg_inf = Uint32(fmt.sign | fmt.inf_bits)
        p0 = (v0 + tid) * vec - lead
        bits = []
        for j in cutlass.range_constexpr(cfg.vecs):
            for q in cutlass.range_constexpr(vec):
                ok = self._slot_ok(j, q, v0, p0, nvec)
                bits.append(Uint32(cutlass.select_(ok, raw[j][q], neg_inf)))
        bits.append(Uint32(cutlass.select_(tail_ok, tail_bits, neg_inf)))
        regs = RegisterRow(bits, p0, t_pos)
        holds = v0 + tid < nvec
        tmax = widen_bits(bits[0], fmt)
        for i in cutlass.range_constexpr(1, len(bits)):
            tmax = fmax_nan(tmax, widen_bits(bits[i], fmt))
        first = Uint32(POS_INF_BITS)
        for i in cutlass.range_constexpr(len(bits)):
            if const_expr(may_lead(cfg, i)):
                pos = regs.pos(i, cfg)
                mine = (pos >= 0) & (pos < k)
                if const_expr(i == len(bits) - 1):
                    mine = mine & tail_ok
                else:
                    mine = mine & (v0 + tid + (i // vec) * threads < nvec)
                wide = widen_bits(bits[i], fmt)
                first = fmin(first, Uint32(cutlass.select_(mine, wide, Uint32(POS_INF_BITS))))
        # The maximum of each group of g consecutive lanes, g the largest power of two
        # <= 32 with g * k <= the cluster's threads (gvr_reference.cluster_model.bracket_low):
        # k groups' maxima are k distinct scores, a far higher low end than k threads'.
        g = Int32(1)
        for d in cutlass.range_constexpr(1, 6):
            g = cutlass.select_(k * (1 << d) <= cfg.cluster * threads, Int32(1 << d), g)
        gmax = tmax
        for d in cutlass.range_constexpr(5):
            other = Uint32(cute.arch.shuffle_sync_bfly(Int32(gmax), offset=1 << d))
            gmax = Uint32(cutlass.select_((1 << d) < g, fmax_nan(gmax, other), gmax))
        lead_lane = (lane & (g - 1)) == 0
        tkey = order_key(tmax)
        sample_key = self._sample_key(bits, v0, lead, nvec)

        # ---- per warp: the reductions, to slot (rank, warp) of every CTA's cstat (DSMEM)
        valid = sample_key != Uint32(0)
        n_valid = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(valid)))
        crowd = warp_crowd(sample_key, CROWD_MIN)
        w_max = Uint32(cute.arch.warp_redux_sync(tkey, "umax"))
        w_first = Uint32(cute.arch.warp_redux_sync(order_key(first), "umin"))
        w_tmin = Uint32(cute.arch.warp_redux_sync(
            Uint32(cutlass.select_(holds & lead_lane, order_key(gmax), Uint32(KEY_MAX))), "umin"
        ))  # fmt: skip
        cute.arch.cluster_wait()
        if lane < cfg.cluster:
            at = sh.cstat.iterator + (rank * warps + warp_id) * 4
            packed = crowd_word(n_valid, crowd, fmt)
            store_async(at, lane, self._mbar(sh, _M_STATS), [w_max, w_first, w_tmin, packed])
        cute.arch.mbarrier_wait(self._mbar(sh, _M_STATS), 0)

        # ---- every warp reduces the cluster's words: uniform results in every CTA
        entries = cfg.cluster * warps
        max_key = Uint32(0)
        lo_key = Uint32(KEY_MAX)
        tmax_min = Uint32(KEY_MAX)
        s_valid = Int32(0)
        crowd_field = Uint32(0)
        for e0 in cutlass.range(0, entries, 32, unroll=1):
            e = e0 + lane
            mine = e < entries
            at = cutlass.select_(mine, e, Int32(0)) * 4
            max_key = umax(max_key, Uint32(cutlass.select_(mine, sh.cstat[at], Uint32(0))))
            lo_key = umin(lo_key, Uint32(cutlass.select_(mine, sh.cstat[at + 1], Uint32(KEY_MAX))))
            tmax_min = umin(
                tmax_min, Uint32(cutlass.select_(mine, sh.cstat[at + 2], Uint32(KEY_MAX)))
            )
            packed = Uint32(cutlass.select_(mine, sh.cstat[at + 3], Uint32(0)))
            s_valid = s_valid + Int32(packed & Uint32(0x3F))
            crowd_field = umax(crowd_field, packed >> Uint32(6))
        max_key = Uint32(cute.arch.warp_redux_sync(max_key, "umax"))
        lo_key = Uint32(cute.arch.warp_redux_sync(lo_key, "umin"))
        tmax_min = Uint32(cute.arch.warp_redux_sync(tmax_min, "umin"))
        s_valid = Int32(cute.arch.warp_redux_sync(s_valid, "add"))
        crowd_field = Uint32(cute.arch.warp_redux_sync(crowd_field, "umax"))
        # gvr_reference.cluster_model.bracket_low: groups of the cluster holding a score
        # (a CTA's holding threads are a prefix of its threads)
        holders = Int32(0)
        for r in cutlass.range_constexpr(cfg.cluster):
            rest = cutlass.min(cutlass.max(nvec - r * threads * cfg.vecs, Int32(0)), Int32(threads))
            holders = holders + (rest + g - 1) // g
        if (holders >= k) & (tmax_min > lo_key):
            lo_key = tmax_min
        ok, scale, bias = bracket_setup(lo_key, max_key, BRACKET_BINS)
        if ok & crowd_clear(crowd_field, scale, bias, fmt):
            code = self._bracket(sh, regs, win, out, values, rank, row, k, lo_key, scale, bias)
            if rank == _LEADER:
                self._record(paths, row, code)
        else:
            # Recomputed here rather than held across the exchange (register pressure at
            # 1024 threads, 64 registers).
            t_ok = (rank == cfg.cluster - 1) & (warp_id == 0) & (regs.tail_pos < n)
            keys = self._keys(regs, v0, nvec, t_ok)
            self._send_sample(sh, rank, self._sample_key(bits, v0, lead, nvec))
            if tid == 0:
                sh.ctl[_SVALID] = s_valid
                # the float32 key of the widened top, in the format's key space
                sh.ctl[Ctl.MAXKEY] = Int32(format_key_of(max_key, fmt))
            cluster_sync()
            self._sampled(sh, keys, win, out, values, paths, rank, row, k)

    @cute.jit
    def _slot_ok(self, j: cutlass.Constexpr, q: cutlass.Constexpr, v0: Int32, p0: Int32, nvec):
        """Whether vector slot ``(j, q)`` of this thread (first vector ``v0 + tid``, window
        position of slot 0 ``p0``) holds a window position: its vector is whole (``< nvec``)
        and its lane is not before the window start."""
        tid, _, _ = cute.arch.thread_idx()
        threads = self.cfg.threads
        vec = self.cfg.key_format.vec
        return (v0 + tid + j * threads < nvec) & (p0 + (j * vec * threads + q) >= 0)

    @cute.jit
    def _sample_key(self, bits, v0: Int32, lead: Int32, nvec: Int32) -> Uint32:
        """This thread's sample key (``gvr_reference.cluster_model.thread_sample``): slot
        ``(j, q)`` with ``j = tid % vecs`` and ``q = (tid // vecs) % vec``, 0 outside the
        window; in the format's key space."""
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        tid, _, _ = cute.arch.thread_idx()
        pick = sample_slot(cfg.vecs, bits, vec=vec)
        v_s = v0 + tid + (tid % cfg.vecs) * cfg.threads
        ok = (v_s < nvec) & (v_s * vec + (tid // cfg.vecs) % vec - lead >= 0)
        return Uint32(cutlass.select_(ok, order_key(pick, fmt), Uint32(0)))

    @cute.jit
    def _keys(self, regs, v0: Int32, nvec: Int32, tail_ok):
        """The held raw bits as a :class:`RegisterRow` of canonical order keys in the format's
        key space (0 outside the window), for the sampled path."""
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        keys = []
        for j in cutlass.range_constexpr(cfg.vecs):
            for q in cutlass.range_constexpr(vec):
                ok = self._slot_ok(j, q, v0, regs.p0, nvec)
                key = order_key(regs.keys[j * vec + q], fmt)
                keys.append(Uint32(cutlass.select_(ok, key, Uint32(0))))
        tail = order_key(regs.keys[vec * cfg.vecs], fmt)
        keys.append(Uint32(cutlass.select_(tail_ok, tail, Uint32(0))))
        return RegisterRow(keys, regs.p0, regs.tail_pos)

    def _mbar(self, sh, i: int):
        """Pointer to mbarrier ``i`` (``_M_STATS`` ... ``_M_GATHER``) of this CTA."""
        return cute.recast_ptr(sh.mbar.iterator + 2 * i, dtype=Int64)

    @cute.jit
    def _init_barriers(self, sh):
        """One thread: the row's four mbarriers (one arrival each) with the bytes each CTA
        receives in the first three (the reductions, the histogram copies and partial totals,
        the crossing); the leader's gather barrier gets its bytes once the crossing is known.
        Made visible to the cluster by ``mbarrier_init_fence`` and the start barrier."""
        cfg = self.cfg
        warps = cfg.threads // 32
        for i in cutlass.range_constexpr(4):
            cute.arch.mbarrier_init(self._mbar(sh, i), 1)
        cute.arch.mbarrier_init_fence()
        stats = 16 * cfg.cluster * warps
        merge = 4 * cfg.cluster * (cfg.slice_bins + warps)
        cute.arch.mbarrier_arrive_and_expect_tx(self._mbar(sh, _M_STATS), stats)
        cute.arch.mbarrier_arrive_and_expect_tx(self._mbar(sh, _M_MERGE), merge)
        cute.arch.mbarrier_arrive_and_expect_tx(self._mbar(sh, _M_CROSS), 16)

    @cute.jit
    def _bracket(self, sh, regs, win, out, values, rank, row, k, lo_key, scale, bias) -> Int32:
        """The bracket path over the cluster: the local counting pass, each slice of counts
        sent to its owner and every warp's total to every CTA, the crossing bin found by the
        owner of its slice and sent to every CTA, one emission pass. Every exchange is an
        asynchronous DSMEM store completing on the receiver's mbarrier; one relaxed cluster
        barrier before the CTAs leave. Returns the path code."""
        cfg = self.cfg
        fmt = cfg.key_format
        threads = cfg.threads
        warps = threads // 32
        slice_bins = cfg.slice_bins
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp_id = tid // 32
        bits = regs.keys
        nk = len(bits)

        # ---- count this CTA's scores (those below the bracket in the scratch words just
        # before the local histogram, one per lane: ``wsum``, placed there by the layout)
        base = hist_base(sh.bhist.iterator.toint())
        floor = spill_floor()
        for i in cutlass.range_constexpr(nk):
            count_bracket(widen_bits(bits[i], fmt), scale, bias, floor, base)
        if tid == 0:
            sh.ctl[Ctl.BIAS] = Int32(bias)
            sh.ctl[Ctl.SCALE] = Int32(scale)
        cute.arch.barrier()

        # ---- each thread's bins (one slice) to copy ``rank`` of their owner's slice; each
        # warp's total to every CTA
        per = BRACKET_BINS // threads
        b0 = tid * per
        words = [sh.bhist[b0 + j] for j in range(per)]
        merge = self._mbar(sh, _M_MERGE)
        store_async(
            sh.mcopy.iterator + (rank * slice_bins + b0 % slice_bins), b0 // slice_bins, merge,
            words,
        )  # fmt: skip
        own = Int32(0)
        for j in cutlass.range_constexpr(per):
            own = own + words[j]
        total = Int32(cute.arch.warp_redux_sync(own, "add"))
        if lane < cfg.cluster:
            store_async(sh.sparts.iterator + (rank * warps + warp_id), lane, merge, [total])
        cute.arch.mbarrier_wait(merge, 0)

        # ---- the slice totals (each from the partial totals of the warps whose bins lie in
        # it, one per lane, a warp sum), from the top slice down to the crossing slice
        wps = slice_bins // (32 * per)  # warps per slice; cluster * wps <= 32
        acc = Int32(0)
        owner = Int32(0)
        above_s = Int32(0)
        found = Int32(0)
        mine = lane < cfg.cluster * wps
        src = lane // wps
        for jj in cutlass.range_constexpr(cfg.cluster):
            s = cfg.cluster - 1 - jj
            at = cutlass.select_(mine, src * warps + s * wps + lane % wps, Int32(0))
            part = cutlass.select_(mine, sh.sparts[at], Int32(0))
            t_s = Int32(cute.arch.warp_redux_sync(part, "add"))
            hit = (found == 0) & (acc + t_s >= k)
            owner = cutlass.select_(hit, Int32(s), owner)
            above_s = cutlass.select_(hit, acc, above_s)
            found = found | cutlass.select_(hit, 1, 0)
            acc = acc + t_s

        # ---- the owner: its merged slice, the crossing bin in it, sent to every CTA
        if rank == owner:
            span = max(threads, slice_bins)
            per_s = span // threads
            for j in cutlass.range_constexpr(per_s):
                i = tid * per_s + j
                h = Int32(0)
                if i < slice_bins:
                    for src in cutlass.range_constexpr(cfg.cluster):
                        h = h + sh.mcopy[src * slice_bins + i]
                sh.xhist[i] = h
            cb_s, above_l, m_x = find_crossing_cta(
                sh.xhist, sh.wsum, sh.ctl, span, threads, k - above_s
            )
            if tid < cfg.cluster:
                cross = [owner * slice_bins + cb_s, above_s + above_l, m_x, Int32(0)]
                store_async(sh.xb.iterator, tid, self._mbar(sh, _M_CROSS), cross)
        cute.arch.mbarrier_wait(self._mbar(sh, _M_CROSS), 0)
        cb = sh.xb[0]
        above = sh.xb[1]
        m = sh.xb[2]
        # The emission recomputes every bin from the bracket read back from shared memory
        # (as the register family: no counting-pass bin stays live).
        bias = Uint32(sh.ctl[Ctl.BIAS])
        scale = Uint32(sh.ctl[Ctl.SCALE])
        need = k - above
        code = Int32(Path.BRACKET)
        if (m > cfg.capacity) & (m != need):
            # More keys in the crossing bin than the staging holds: the leader selects over
            # the row read from global memory, every key at or above the bracket's low end.
            code = Int32(Path.BRACKET_OVERFLOW)
            cute.arch.cluster_arrive_relaxed()
            if rank == _LEADER:
                select_and_emit(
                    cfg, sh, win, Source.ROW, out, values, row, k, format_key_of(lo_key, fmt),
                    Uint32(fmt.key_max), win.n,
                )  # fmt: skip
        else:
            gt, eq, n_gt, n_eq = bin_masks(bits, scale, bias, cb, fmt)
            # The leader's cluster-wide cursor (a word its own emission never uses).
            cursor = remote(sh.ctl.iterator + _GT_CURSOR, Int32(_LEADER))
            if m == need:
                # The whole crossing bin is in the answer: both runs from one cursor.
                slot_gt, slot_eq = packed_warp_slots(cursor, n_gt, n_eq, scope="cluster")
                cute.arch.cluster_arrive_relaxed()
                write_masked(cfg, out, values, row, regs, gt, slot_gt)
                if cute.arch.vote_any_sync(n_eq > 0):
                    write_masked(cfg, out, values, row, regs, eq, above + slot_eq)
            else:
                gather = self._mbar(sh, _M_GATHER)
                if (rank == _LEADER) & (tid == 0):
                    cute.arch.mbarrier_arrive_and_expect_tx(gather, 8 * m)
                slot_gt = Int32(0)
                if cute.arch.vote_any_sync(n_gt > 0):
                    slot_gt = warp_slots(cursor, n_gt, scope="cluster")
                if cute.arch.vote_any_sync(n_eq > 0):
                    slot = warp_slots(
                        remote(sh.ctl.iterator + Ctl.CNT, Int32(_LEADER)), n_eq, scope="cluster"
                    )

                    def put(at, key, pos):
                        store_async(sh.stage_bits.iterator + at, _LEADER, gather, [key])
                        store_async(sh.stage_idx.iterator + at, _LEADER, gather, [pos])

                    stage_masked(cfg, regs, eq, slot, put)
                cute.arch.cluster_arrive_relaxed()
                write_masked(cfg, out, values, row, regs, gt, slot_gt)
                if m <= RANK_MAX:
                    code = Int32(Path.BRACKET_RANK)
                else:
                    code = Int32(Path.BRACKET_NARROW)
                if rank == _LEADER:
                    cute.arch.mbarrier_wait(gather, 0)
                    if m <= RANK_MAX:
                        if warp_id == 0:
                            ea = EmitArgs(
                                out, values, row, k, k, Int32(0), Uint32(0), Uint32(KEY_MAX)
                            )
                            rank_crossing(cfg, sh, ea, win, m, above, need)
                    else:
                        narrow_crossing(cfg, sh, win, out, values, row, k, m, need, above)
        # No CTA leaves while a remote cursor atomic may still reach the leader.
        cute.arch.cluster_wait()
        return code

    @cute.jit
    def _record(self, paths, row: Int32, code: Int32):
        record_path(self.cfg, paths, row, code)
