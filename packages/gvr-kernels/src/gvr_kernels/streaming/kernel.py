"""The streaming self-sampling GVR top-K family: one or several CTAs per row.

Per row (algorithm and invariants in ``docs/kernels.md``; CPU model in
``gvr_reference.model``):

1. **Window.** The row's valid window ``[start, start + n)`` comes from device arrays (decode:
   ``kv_lens``/``next_n``/``compress_ratio``; prefill: ``row_starts``/``row_ends``). Rows with
   ``n <= k`` write the identity then ``-1``.
2. **Sample.** Runs of four whole 16-byte vectors at positions that depend only on ``n`` are
   read into shared memory as order keys (:func:`gvr_reference.ladder.row_plan`,
   :func:`gvr_reference.ladder.sample_vector`).
3. **Rung.** One linear level over the sample's value range (float32 rows; ``device.rung``),
   or radix narrowing over the sample, gives a key ``T1`` with about ``aim`` scores of the row
   expected at or above it.
4. **Stream.** One pass over the row stages every survivor (key >= T) in shared memory,
   counting all of them even past the capacity; the test is one IEEE compare per score
   against :func:`gvr_reference.keys.stream_bound` (one per pair of 16-bit scores).
5. **Select.** Radix narrowing over the staged survivors gives the exact rule "keys above
   ``thr``, plus ``need_eq`` keys equal to ``thr``" and one pass emits it.
6. **Fallbacks.** Too few survivors: a lower rung and a second pass (one CTA per row), then an
   exact radix selection over the whole row. Too many: the whole-row selection, restricted to
   keys at or above the rung.
7. **Crowded rung** (the sample narrowing ended on one key holding a crowd of the sample): the
   pass stages the keys *above* it; with fewer than ``k`` of them, they and the first
   ``k - count`` keys equal to the rung (an in-order scan of the row that stops once it has
   them) are the answer (``Path.TIE``); no tie class is ever staged.

With ``l2_hints`` the sample's lines are marked evict-last in L2 and the pass reads with
evict-first, so the sampled sectors the pass reads again come from L2 even when the launch's
rows do not fit it: one DRAM read per score (the hints change no result).

With ``split``, a row is cut into ``parts`` contiguous chunks, one CTA each (``ragged``: the
launch's CTAs go to the rows by their lengths, in-kernel, ``gvr_reference.ragged``). Every CTA
computes the same sample and rung, streams its chunk, and appends its survivors to the row's
slab in a global workspace; one 64-bit counter a row holds the survivors reserved (low half)
and the arrivals (high half), and one atomic a CTA reserves its entries and arrives, so the
last CTA to arrive reads the row's total with its arrival, selects for the whole row and
stores the counter back to zero. No CTA fences: each slab entry is one 64-bit word with a
valid bit, which the last CTA waits for on the entries reserved in this launch and clears
once read, so the next launch (or graph replay) finds the header zero and every valid bit
clear. Only the last CTA of a row waits, and only for entries whose writers have already
arrived, so no co-residency is assumed.

With ``cluster`` (a cluster split), a row's CTAs form one thread-block cluster and meet
through distributed shared memory instead (:meth:`StreamingTopK._cluster_meet`): the counts and
the survivor bins summed in every CTA, the keys above the crossing bin written by the CTA
that holds them, the rest gathered to the leader, which finishes the row; no workspace.

The shared-memory arrays come from ``StreamingConfig.shared_layout`` (allocated by
:func:`allocate_shared`); the phases (sampling, narrowing, emission, tile loading) are the free
functions of ``gvr_kernels.device``.

Supported: fp32 logits with unit inner stride, a row stride that is a multiple of 4 elements and
a 16-byte-aligned base; with ``config.dtype`` bf16 or fp16, 16-bit logits with unit inner
stride, a row stride that is a multiple of 8 elements and a 16-byte-aligned base (vectors of 8
scores, 16-bit order keys: the same phases on keys of ``[0, 0xFFFF]``, so the sample and the
selection need two radix levels at most); any ``1 <= k <= config.max_k``; rows up to ``2**26``
scores.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, Uint64, const_expr
from gvr_reference.blockskip import BLOCK, GATE_64THS, SKIPPED
from gvr_reference.bracket import KEY_FLT_MAX
from gvr_reference.ladder import row_plan
from gvr_reference.model import SPLIT_BINS_MIN_K, Path, crowd_min_ties
from gvr_reference.ragged import MIN_PART, UNIT

from ..device import radix, shared
from ..device.cluster import arrive_own_shared, cluster_sync, remote, store_remote
from ..device.keys import (
    KEY_MAX,
    above_bound,
    bound_reaches,
    bound_word,
    order_key,
    stream_bound,
    stream_threshold,
    survives,
    top_aligned,
)
from ..device.layout import Ctl, EmitArgs, Goal, Rank, Source, Window
from ..device.linear import bin_setup as linear_bin_setup
from ..device.linear import clear as linear_clear
from ..device.linear import count_key as linear_count_key
from ..device.linear import select_staged
from ..device.linear import serves as linear_serves
from ..device.memory import (
    l2_policy,
    load_entry,
    load_scalar,
    load_score,
    load_vec4_if,
    store_entry,
)
from ..device.ops import DEVICE_OPS
from ..device.rung import sample_rung
from ..device.sampling import load_sample
from ..device.select import (
    emit_rule,
    emit_ties_in_order,
    narrow,
    select_and_emit,
    write_slot,
)
from ..device.shared import record_path, stamp_phase
from ..device.staging import packed_warp_slots, selection_masks, stage_selected, warp_slots
from ..device.tiles import load_tile, prefetch_vectors
from ..device.warp import inclusive_sum
from ..device.window import row_window, window_column, write_short_row
from .config import (
    CTL_WORDS,
    HIST_BINS,
    SKIP_MASK_WORDS,
    SLAB_VALID,
    SMEM_ALIGN,
    STAMPS,
    WS_HEADER_WORDS,
    StreamingConfig,
)

__all__ = ["StreamingTopK", "allocate_shared", "GATHER_GROUP", "SLAB_LOADS"]

#: Entries a thread of a cluster split CTA handles a round: the staged keys it sends to its
#: leader, or those the leader received and moves in its staging.
GATHER_GROUP = 4
#: Slab entries a thread of a workspace split's finishing CTA keeps in flight (a pass over
#: the slab is bound by the L2 round trips of its loads; at K = 2048 a 1024-thread CTA
#: reads about six entries a thread, one round).
SLAB_LOADS = 8


@cute.jit
def allocate_shared(cfg: cutlass.Constexpr):
    """The CTA's shared arrays (``cfg.shared_layout()``) and their allocator."""
    return shared.allocate_shared(cfg.shared_layout(), SMEM_ALIGN)


def _half_of(word, high: int):
    """A trace-time function giving the 16-bit score in the low (``high == 0``) or high half
    of a loaded word, zero-extended."""

    def value():
        return word >> Uint32(16) if high else word & Uint32(0xFFFF)

    return value


class StreamingTopK:
    """Exact top-K over rows of fp32 (or, by ``config.dtype``, bf16 / fp16) logits, streaming
    each row once (see module docstring).

    Launch arguments: the common kernel ABI (``gvr_kernels.abi.KernelArgs``), all CUDA tensors
    (torch tensors through TVM-FFI) and int32 scalars:

    - ``logits``: fp32 ``(rows, width)``, strides ``(row_stride, 1)``, ``row_stride % 4 == 0``,
      16-byte-aligned base (16-bit ``dtype``: bf16 / fp16, ``row_stride % 8 == 0``).
    - ``lens_a``, ``lens_b``: int32; decode: ``kv_lens (rows // next_n,)`` and unused;
      prefill: ``row_starts (rows,)`` and ``row_ends (rows,)``; full: both unused.
    - ``out``: int32 ``(rows, k)``, window-local indices, ``-1`` padding.
    - ``values``: ``(rows, k)`` in the logits dtype when ``with_values`` (else any tensor of
      that dtype, unused); ``-FLT_MAX`` (the dtype's most negative finite value) beside
      ``-1``.
    - ``workspace``: uint32, at least ``rows * workspace_words_per_row`` words when ``split``
      (``ragged``: ``min(rows, parts)`` row slots; else unused); each slot's
      ``WS_HEADER_WORDS`` header words (the counter and two pad words) must be zero on entry,
      and every slab entry's valid bit (:data:`~.config.SLAB_VALID`) clear; both hold again
      on exit (a zeroed workspace stays usable).
    - ``paths``: int32 ``(rows,)`` path codes when ``record_paths`` (else unused).
    - ``k``, ``next_n``, ``cr_shift`` (``log2(compress_ratio)``), ``parts`` (CTAs per row; 1
      unless ``split``; ``ragged``: the launch's CTAs beyond one per row, shared out by length,
      so the grid is ``rows + parts``).
    """

    def __init__(self, config: StreamingConfig):
        self.cfg = config
        self.params = config.ladder

    # ------------------------------------------------------------------ host launcher
    @cute.jit
    def __call__(
        self,
        logits: cute.Tensor,  # (rows, width) : (row_stride, 1), fp32
        lens_a: cute.Tensor,  # (?,) int32
        lens_b: cute.Tensor,  # (?,) int32
        out: cute.Tensor,  # (rows, k) int32
        values: cute.Tensor,  # (rows, k) fp32
        workspace: cute.Tensor,  # (?,) uint32
        paths: cute.Tensor,  # (?,) int32
        k: Int32,
        next_n: Int32,
        cr_shift: Int32,
        parts: Int32,
        block_max: cute.Tensor,  # (rows, ceil(width / 32)) fp32
        stream: cuda.CUstream,
    ):
        rows = out.shape[0]
        grid = rows * parts
        if const_expr(self.cfg.ragged):
            grid = rows + parts
        launch = self.kernel(
            logits,
            lens_a,
            lens_b,
            out,
            values,
            workspace,
            paths,
            k,
            next_n,
            cr_shift,
            parts,
            block_max,
        )
        # The register budget follows the intended residency; the carveout is pinned to the
        # largest shared-memory share so the residency is not lost to a small L1 split.
        if const_expr(self.cfg.cluster):
            # (``parts`` is the cluster size: the grid holds whole clusters)
            launch.launch(
                grid=[rows * self.cfg.cluster, 1, 1],
                block=[self.cfg.threads, 1, 1],
                cluster=[self.cfg.cluster, 1, 1],
                smem=self.cfg.smem_bytes,
                stream=stream,
                min_blocks_per_mp=self.cfg.resident_ctas,
                preferred_smem_carveout=100,
            )
        else:
            launch.launch(
                grid=[grid, 1, 1],
                block=[self.cfg.threads, 1, 1],
                smem=self.cfg.smem_bytes,
                stream=stream,
                min_blocks_per_mp=self.cfg.resident_ctas,
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
        block_max: cute.Tensor,
    ):
        cfg = self.cfg
        bid, _, _ = cute.arch.block_idx()
        row = bid
        part = Int32(0)
        if const_expr(cfg.cluster):
            parts = Int32(cfg.cluster)  # (part: the CTA's rank in its cluster)
        if const_expr(cfg.split and not cfg.ragged):
            row = bid // parts
            part = bid - row * parts

        sh, _ = allocate_shared(cfg)
        self._stamp(paths, "entry")

        if const_expr(cfg.ragged):
            row, part, row_parts = self._assign(
                sh, logits, lens_a, lens_b, out.shape[0], next_n, cr_shift, parts
            )
            if row >= 0:
                self._row(
                    sh, logits, lens_a, lens_b, out, values, workspace, paths, k, next_n,
                    cr_shift, row, part, row_parts, block_max,
                )  # fmt: skip
        else:
            self._row(
                sh, logits, lens_a, lens_b, out, values, workspace, paths, k, next_n, cr_shift,
                row, part, parts, block_max,
            )  # fmt: skip

    @cute.jit
    def _row(
        self, sh, logits, lens_a, lens_b, out, values, workspace, paths, k, next_n, cr_shift,
        row, part, parts, block_max,
    ):  # fmt: skip
        """Row ``row`` (or, split, its part ``part`` of ``parts``)."""
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        # ---- 1. the row window
        n, lead, base = row_window(
            cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift, cfg.key_format
        )

        if n <= k:
            if part == 0:
                write_short_row(cfg, out, values, base, lead, row, n, k)
                self._record(paths, row, Int32(Path.SHORT), parts)
        else:
            if tid < HIST_BINS:
                sh.hist[tid] = Int32(0)
            if tid < CTL_WORDS:
                sh.ctl[tid] = Int32(0)
            if const_expr(cfg.cluster):
                # The words the cluster's CTAs add to (zero before any can: the first cluster
                # barrier, waited for in _cluster_meet, follows every CTA's arrival here).
                if tid < HIST_BINS:
                    sh.mhist[tid] = Int32(0)
                if tid == 0:
                    sh.ctl[Ctl.XTOTAL] = Int32(0)
                    sh.ctl[Ctl.XCUR] = Int32(0)
                    sh.ctl[Ctl.XOWN] = Int32(0)
                arrive_own_shared()
            cute.arch.barrier()
            self._stamp(paths, "window")
            c0 = Int32(0)
            if const_expr(cfg.block_skip):
                c0 = window_column(cfg.mode, logits, lens_a, row, lead)
            self._long_row(
                sh, out, values, workspace, paths, base, lead, row, part, parts, n, k, block_max,
                c0,
            )  # fmt: skip

    # ------------------------------------------------------------------ ragged split
    @cute.jit
    def _assign(self, sh, logits, lens_a, lens_b, rows: Int32, next_n, cr_shift, extra: Int32):
        """``(row, part, row_parts)`` of this CTA in a ragged split launch of
        ``rows + extra`` CTAs (``gvr_reference.ragged``; row ``-1``: no work, the last CTAs of
        the grid). Thread ``t`` measures row ``t``; two CTA-wide scans (the units, then the
        parts packed as ``split << 16 | single``) and three barriers. A split row meets in
        workspace row slot ``ctl[RSLOT]``: its row when ``rows <= extra``, else half its first
        CTA (the split rows' first CTAs are at least two apart and below ``2 * extra``, so the
        slots are distinct and below ``extra``; ``gvr_reference.ragged.ragged_slots``).
        Launches of more than ``threads`` rows or of 32,768 CTAs or more run one CTA per row.
        Leaves ``ctl[RROW]`` / ``ctl[RPARTS]`` / ``ctl[RSLOT]`` set for the rest of the row
        (read again after the pass)."""
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = tid // 32
        n_warps = cfg.threads // 32
        grid = rows + extra
        row = cutlass.select_(bid < rows, bid, Int32(-1))
        part = Int32(0)
        row_parts = Int32(1)
        if (rows <= cfg.threads) & (grid < Int32(1 << 15)):
            units = Int32(0)
            if tid < rows:
                n, _, _ = row_window(
                    cfg.mode, logits, lens_a, lens_b, tid, next_n, cr_shift, cfg.key_format
                )
                units = (n + (UNIT - 1)) // UNIT
            if tid == 0:
                sh.ctl[Ctl.RROW] = Int32(-1)
            upto = inclusive_sum(units)
            if lane == 31:
                sh.hist[warp] = upto
            cute.arch.barrier()
            # Only the threads that measure a row compute (the 64-bit division is a long
            # instruction sequence: every warp of the CTA issuing it cost about a microsecond).
            mine = Int32(1)
            packed = Int32(0)
            if tid < rows:
                total = Int32(0)
                for w in cutlass.range_constexpr(n_warps):
                    total = total + sh.hist[w]
                # One CTA a row, plus its share of the CTAs beyond one per row by length, at
                # most one CTA per MIN_PART scores.
                share = Int64(units) * Int64(extra) // Int64(cutlass.max(total, Int32(1)))
                mine = Int32(1) + Int32(share)
                mine = cutlass.min(mine, cutlass.max(Int32(1), units // Int32(MIN_PART // UNIT)))
                packed = cutlass.select_(mine > 1, mine << 16, Int32(1))
            upto = inclusive_sum(packed)
            if lane == 31:
                sh.hist[n_warps + warp] = upto
            cute.arch.barrier()
            if tid < rows:
                before = upto - packed
                whole = Int32(0)
                for w in cutlass.range_constexpr(n_warps):
                    h = sh.hist[n_warps + w]
                    before = before + cutlass.select_(w < warp, h, Int32(0))
                    whole = whole + h
                first = before >> 16  # split rows: CTAs [first, first + mine)
                single_at = (whole >> 16) + (before & Int32(0xFFFF))  # single rows: after them
                hit = bid == single_at
                at = Int32(0)
                if mine > 1:
                    hit = (bid >= first) & (bid < first + mine)
                    at = bid - first
                if hit:
                    sh.ctl[Ctl.RROW] = tid
                    sh.ctl[Ctl.RPART] = at
                    sh.ctl[Ctl.RPARTS] = mine
                    sh.ctl[Ctl.RSLOT] = cutlass.select_(rows <= extra, tid, first >> 1)
            cute.arch.barrier()
            row = sh.ctl[Ctl.RROW]
            part = sh.ctl[Ctl.RPART]
            row_parts = sh.ctl[Ctl.RPARTS]
        else:
            if tid == 0:
                sh.ctl[Ctl.RROW] = row
                sh.ctl[Ctl.RPARTS] = Int32(1)
                sh.ctl[Ctl.RSLOT] = Int32(0)
        return row, part, row_parts

    # ------------------------------------------------------------------ row bodies
    @cute.jit
    def _long_row(
        self, sh, out, values, workspace, paths, base, lead, row, part, parts, n, k, block_max,
        c0,
    ):  # fmt: skip
        cfg = self.cfg
        fmt = cfg.key_format
        key_max = Uint32(fmt.key_max)
        tid, _, _ = cute.arch.thread_idx()
        plan = row_plan(n, k, lead, self.params, DEVICE_OPS)
        nvec = plan.nvec
        win = Window(base, lead, nvec, plan.tail_start, n)

        # This CTA's contiguous chunk of vectors; the last part owns the scalar tail.
        v_begin = Int32(0)
        v_end = nvec
        own_tail = Boolean(True)
        if const_expr(cfg.split):
            chunk = (nvec + parts - 1) // parts
            v_begin = cutlass.min(part * chunk, nvec)
            v_end = cutlass.min(v_begin + chunk, nvec)
            own_tail = part == parts - 1

        # A chunk of at most ``preload`` vectors a thread is loaded now, beside the sample,
        # and held in registers across the sample and the rung: the pass then only tests and
        # stages it (a longer chunk, a row past the envelope, streams as usual).
        # (Vectors past the chunk load vector 0, which every row holds: a last CTA's chunk
        # may be empty, at the row's end.)
        pre = None
        if const_expr(cfg.preload > 0):
            pre = load_tile(cfg.threads, cfg.preload, base, v_begin, v_end, Int32(0), fmt)
        if const_expr(cfg.prefetch > 0):
            # The chunk's first tiles are asked of L2 now: their DRAM read overlaps the sample
            # and the narrowing.
            if tid == 0:
                prefetch_vectors(
                    base, v_begin, v_begin + cfg.prefetch * cfg.threads * cfg.unroll, v_end, fmt
                )

        # ---- 2-3. sample and first rung
        thr_key = Uint32(0)
        code = Int32(Path.UNSAMPLED)
        n_sample = plan.sample_vecs * fmt.vec
        if not plan.unsampled:
            code = Int32(Path.FIRST)
            runmax = None
            if const_expr(cfg.block_skip):
                runmax = sh.runmax
            # With l2_hints the sampled lines stay in L2 until the pass reads them again.
            policy = l2_policy("evict_last") if const_expr(cfg.l2_hints) else None
            # The sample's largest key (float32: and its smallest) spans the rung's linear
            # level; a cluster split row's survivor bins span up to the largest (_cluster_meet).
            smax = None
            slow = None
            if const_expr(cfg.split or fmt.bits == 32):
                smax = cute.recast_ptr(sh.ctl.iterator + Ctl.SMAX, dtype=Uint32)
            if const_expr(fmt.bits == 32):
                slow = cute.recast_ptr(sh.ctl.iterator + Ctl.SLOW, dtype=Uint32)
            load_sample(
                cfg.threads, cfg.sample_max, sh.sample, base, lead, plan, fmt, runmax, policy,
                smax, slow,
            )  # fmt: skip
            cute.arch.barrier()
            self._stamp(paths, "sample")
            thr_key, ties, _ = sample_rung(
                cfg, sh, win, plan.j1, plan.reach1, n_sample, ~Uint32(sh.ctl[Ctl.SLOW]),
                Uint32(sh.ctl[Ctl.SMAX]),
            )  # fmt: skip
            # A crowded single key (gvr_reference.model.crowded_rung): stage only the keys
            # above it (its ties are found later by the in-order scan). ``code == TIE`` marks
            # a crowded rung until the row's path is known.
            min_ties = crowd_min_ties(n, n_sample, cfg.capacity, fmt.bits, DEVICE_OPS)
            if (ties >= min_ties) & (thr_key < key_max):
                code = Int32(Path.TIE)
            self._stamp(paths, "rung")

        # ---- 4. stream (a crowded rung: the keys above it). The path code and the rung wait
        # in shared memory: the pass is where registers are scarcest.
        crowd = Uint32(cutlass.select_(code == Int32(Path.TIE), 1, 0))
        skip = Boolean(False)
        if const_expr(cfg.block_skip):
            if not plan.unsampled:
                skip = self._skip_mask(
                    sh, block_max, row, c0, v_begin, v_end, thr_key + crowd, n_sample
                )
            if skip:
                code = code | Int32(SKIPPED)
        if tid == 0:
            sh.ctl[Ctl.CODE] = code
            sh.ctl[Ctl.THR] = Int32(thr_key)
            sh.ctl[Ctl.N] = n
        skip_arg = None  # (a configuration without block skip traces no mask test)
        if const_expr(cfg.block_skip):
            skip_arg = skip
        count = self._stream(
            sh, base, lead, v_begin, v_end, own_tail, plan.tail_start, n, thr_key + crowd,
            asked=True, skip=skip_arg, c0=c0, pre=pre,
        )  # fmt: skip
        self._stamp(paths, "stream")
        code = sh.ctl[Ctl.CODE]
        skipped = Int32(0)
        if const_expr(cfg.block_skip):
            skipped = code & Int32(SKIPPED)
            code = code ^ skipped
        thr_key = Uint32(sh.ctl[Ctl.THR])
        n = sh.ctl[Ctl.N]
        plan = row_plan(n, k, lead, self.params, DEVICE_OPS)
        nvec = plan.nvec
        n_sample = plan.sample_vecs * fmt.vec
        win = Window(base, lead, nvec, plan.tail_start, n)
        if const_expr(cfg.ragged):
            row = sh.ctl[Ctl.RROW]
            parts = sh.ctl[Ctl.RPARTS]
            slot = sh.ctl[Ctl.RSLOT]
        elif const_expr(cfg.split):
            bid, _, _ = cute.arch.block_idx()
            row = bid // parts
            slot = row

        finish = Boolean(True)
        # A cluster split row whose rung came from its sample (every CTA alike) meets on the
        # survivor bins from K = SPLIT_BINS_MIN_K on (gvr_reference.model.split_bins);
        # ``staged_bin``: the leader emitted the ``above`` keys above the crossing bin and
        # staged the bin's keys (all at least ``bin_lo``). A workspace split's last CTA gathers
        # the slab and selects by the linear level (device.linear) instead, which measured
        # faster (benchmarks/results/h100/ab_linear.log).
        staged_bin = Boolean(False)
        above = Int32(0)
        bin_lo = Uint32(0)
        # Lowest key of the selection ranges: a crowded pass staged the keys above the rung.
        lo_sel = thr_key + Uint32(cutlass.select_(code == Int32(Path.TIE), 1, 0))
        # ``counted``: a workspace split's finishing CTA counted the linear level's histogram
        # over [lo_sel, the sample's largest key] as it gathered the slab (_split_meet).
        counted = Boolean(False)
        if const_expr(cfg.ragged):
            # A row of one CTA runs as on one CTA per row (the retry rung included).
            if parts > 1:
                count, finish, counted = self._split_meet(
                    sh, workspace, paths, count, parts, slot, lo_sel
                )
            else:
                self._staged_max(sh, count)
        elif const_expr(cfg.cluster):
            binned = (code == Int32(Path.FIRST)) & (k >= SPLIT_BINS_MIN_K)
            count, finish, staged_bin, above, bin_lo = self._cluster_meet(
                sh, paths, out, values, row, part, count, k, thr_key, binned
            )
        elif const_expr(cfg.split):
            count, finish, counted = self._split_meet(
                sh, workspace, paths, count, parts, slot, lo_sel
            )

        if finish & staged_bin:
            # The crossing bin's keys are staged: the rule among them for the slots left.
            m = sh.ctl[Ctl.CNT]
            max_key = Uint32(sh.ctl[Ctl.MAXKEY])
            thr_x, need_eq, count_thr = narrow(
                cfg, sh, win, Source.STAGE, Rank.BY_KEY, Goal.SELECT, k - above, bin_lo, max_key,
                Uint32(0), m,
            )  # fmt: skip
            emit_rule(
                cfg, sh, win, Source.STAGE, out, values, row, k, thr_x, need_eq, count_thr, m,
                gt_start=above,
            )  # fmt: skip
            self._record(paths, row, code | skipped, parts)
            self._stamp(paths, "finish")
        elif finish:
            crowded = code == Int32(Path.TIE)
            if crowded:
                code = Int32(Path.FIRST)
            if crowded & (count < k):
                # Every staged key is above the rung; the k - count first keys equal to it
                # complete the answer (gvr_reference.model.Path.TIE), if the row has them.
                need_eq = k - count
                emit_rule(
                    cfg, sh, win, Source.STAGE, out, values, row, k, thr_key, need_eq, Int32(0),
                    count,
                )  # fmt: skip
                ea = EmitArgs(out, values, row, k, count, need_eq, thr_key, Uint32(KEY_MAX))
                if emit_ties_in_order(cfg, sh, win, ea) >= need_eq:
                    code = Int32(Path.TIE)
            if code != Int32(Path.TIE):
                # ---- 6. fallbacks (single CTA per row: one retry rung)
                if const_expr(not cfg.split):
                    count, thr_key, lo_sel, code = self._retry(
                        sh, win, plan, base, lead, n, k, count, thr_key, lo_sel, code
                    )
                elif const_expr(cfg.ragged):
                    if parts == 1:
                        count, thr_key, lo_sel, code = self._retry(
                            sh, win, plan, base, lead, n, k, count, thr_key, lo_sel, code
                        )
                if count < k:
                    code = Int32(Path.RESCUE_UNDERESTIMATE)
                    lo_sel = Uint32(0)
                if count > cfg.capacity:
                    code = Int32(Path.RESCUE_OVERFLOW)
                if code >= Int32(Path.RESCUE_UNDERESTIMATE):
                    select_and_emit(
                        cfg, sh, win, Source.ROW, out, values, row, k, lo_sel, key_max, count
                    )
                else:
                    max_key = Uint32(sh.ctl[Ctl.MAXKEY])
                    # (a split row's histogram may be counted already, up to the sample's top)
                    hist_top = Uint32(sh.ctl[Ctl.SMAX]) if const_expr(cfg.split) else None
                    select_staged(
                        cfg, sh, win, out, values, row, k, lo_sel, max_key, count, paths, STAMPS,
                        counted if const_expr(cfg.split) else None, hist_top,
                    )  # fmt: skip
            self._record(paths, row, code | skipped, parts)
            self._stamp(paths, "finish")

    @cute.jit
    def _retry(self, sh, win, plan, base, lead, n, k, count, thr_key, lo_sel, code):
        """A row on one CTA whose first rung left fewer than ``k`` survivors: the retry rung
        and a second pass when it is lower. Returns ``(count, thr_key, lo_sel, code)``."""
        cfg = self.cfg
        fmt = cfg.key_format
        key_max = Uint32(fmt.key_max)
        tid, _, _ = cute.arch.thread_idx()
        n_sample = plan.sample_vecs * fmt.vec
        if count < k and code == Int32(Path.FIRST):
            thr2, _, _ = narrow(
                cfg, sh, win, Source.SAMPLE, Rank.BY_KEY, Goal.RUNG, plan.j2, Uint32(0), key_max,
                Uint32(0), n_sample,
            )  # fmt: skip
            if thr2 < thr_key:
                cute.arch.barrier()
                if tid == 0:
                    sh.ctl[Ctl.CNT] = Int32(0)
                    sh.ctl[Ctl.MAXKEY] = Int32(0)
                    sh.ctl[Ctl.THR] = Int32(thr2)
                    sh.ctl[Ctl.CODE] = Int32(Path.RETRY)
                cute.arch.barrier()
                count = self._stream(
                    sh, base, lead, Int32(0), plan.nvec, Boolean(True), plan.tail_start, n, thr2
                )
                if const_expr(cfg.split):
                    self._staged_max(sh, count)  # (a ragged row of one CTA)
                # The rung and the path code waited in shared memory across the pass.
                thr_key = Uint32(sh.ctl[Ctl.THR])
                lo_sel = thr_key
                code = sh.ctl[Ctl.CODE]
        return count, thr_key, lo_sel, code

    @cute.jit
    def _stamp(self, paths, phase: cutlass.Constexpr):
        """Phase boundary ``phase`` of :data:`~.config.STAMPS` (``device.shared.stamp_phase``)."""
        stamp_phase(self.cfg, paths, STAMPS, phase)

    @cute.jit
    def _record(self, paths, row: Int32, code: Int32, parts: Int32):
        """The row's path code; a ragged split also records its CTAs: ``code | parts << 8``."""
        if const_expr(self.cfg.ragged):
            code = code | (parts << 8)
        record_path(self.cfg, paths, row, code)

    # ------------------------------------------------------------------ streaming pass
    @cute.jit
    def _stream(
        self, sh, base, lead, v_begin, v_end, own_tail, tail_start, n, thr_key,
        asked: cutlass.Constexpr = False, skip=None, c0=None, pre=None,
    ):  # fmt: skip
        """Stage every score of this CTA's chunk with key >= ``thr_key``; returns the count.

        Slots come from one shared atomic per warp per tile; every survivor is counted, but
        none is written past the capacity (``stage_selected``), so an overflow is detected
        without writing out of bounds. A single-CTA row's pass ends with the staged maximum
        key in ``ctl[Ctl.MAXKEY]``.

        ``pre`` (``preload`` configurations): the chunk's first vectors, loaded before the
        sample (:func:`~..device.tiles.load_tile` from ``v_begin``); a chunk they cover is
        staged from them with no load.

        ``skip`` (block-skip configurations): the live-block mask ``sh.skip`` holds this
        chunk's blocks (:meth:`_skip_mask`, for ``thr_key``); a vector of a dead block is not
        loaded, and a warp whose vectors of a tile are all dead skips the tile. ``c0``: the
        physical column of vector 0.
        """
        cfg = self.cfg
        fmt = cfg.key_format
        tid, _, _ = cute.arch.thread_idx()
        warp_id = tid // 32
        lane = cute.arch.lane_idx()
        tile = cfg.threads * cfg.unroll
        raw_thr = stream_threshold(thr_key, fmt)
        # The 0-3 scalar tail scores first (staging is unordered): the row length and the
        # tail start are then dead during the tiles.
        if own_tail:
            if warp_id == 0:
                t = tail_start + lane
                ok = t < n
                bits = load_score(base + (lead + cutlass.select_(ok, t, Int32(0))), fmt)
                sel = ok & survives(top_aligned(bits, fmt), raw_thr, fmt)
                stage_selected(cfg.capacity, sh, [(bits, t, sel)])
        v_first = v_begin
        if const_expr(cfg.mode == "prefill"):
            # Vector 0 straddles a misaligned window start (lead > 0): its lanes inside the
            # window, positions [0, vec - lead), are tested as scalars by warp 0 and the tiles
            # start at vector 1, so the hot loop tests no lane against the start.
            if (v_begin == 0) & (lead > 0) & (v_end > 0):
                if warp_id == 0:
                    ok = lane < fmt.vec - lead
                    at = base + (lead + cutlass.select_(ok, lane, Int32(0)))
                    bits = load_score(at, fmt)
                    sel = ok & survives(top_aligned(bits, fmt), raw_thr, fmt)
                    stage_selected(cfg.capacity, sh, [(bits, lane, sel)])
                v_first = Int32(1)
        ahead = cfg.prefetch * tile
        if const_expr(cfg.prefetch > 0 and not asked):
            # L2 holds ``prefetch`` tiles ahead of the tile being loaded (``asked``: the first
            # ones were asked before the sample).
            if tid == 0:
                prefetch_vectors(base, v_first, v_first + ahead, v_end, fmt)
        # Whole tiles first, with no range test; then the one partial tile, tested.
        bound = stream_bound(thr_key, fmt)
        v_whole = v_first + (cutlass.max(v_end - v_first, Int32(0)) // tile) * tile
        if const_expr(pre is not None):
            if v_end - v_first <= cfg.threads * cfg.preload:
                regs, oks, vs = pre
                self._stage_tile(sh, regs, oks, vs, lead, bound)
            else:
                self._dense_tiles(sh, base, lead, v_first, v_whole, v_end, bound)
        elif const_expr(skip is None):
            self._dense_tiles(sh, base, lead, v_first, v_whole, v_end, bound)
        else:
            if skip:
                j0 = (c0 + v_begin * fmt.vec) >> Int32(5)
                for tb in cutlass.range(v_first, v_whole, tile):
                    self._skip_tile(sh, base, tb, v_end, c0, j0, lead, bound, False)
                if v_whole < v_end:
                    self._skip_tile(sh, base, v_whole, v_end, c0, j0, lead, bound, True)
            else:
                self._dense_tiles(sh, base, lead, v_first, v_whole, v_end, bound)
        cute.arch.barrier()
        count = sh.ctl[Ctl.CNT]
        if const_expr(not cfg.split):
            self._staged_max(sh, count)
        return count

    @cute.jit
    def _dense_tiles(
        self, sh, base, lead: Int32, v_first: Int32, v_whole: Int32, v_end: Int32, bound: Uint32
    ):
        """Every tile of vectors ``[v_first, v_end)``: the whole ones untested, then the
        partial one."""
        cfg = self.cfg
        fmt = cfg.key_format
        tid, _, _ = cute.arch.thread_idx()
        tile = cfg.threads * cfg.unroll
        ahead = cfg.prefetch * tile
        policy = l2_policy("evict_first") if const_expr(cfg.l2_hints) else None
        for tb in cutlass.range(v_first, v_whole, tile):
            if const_expr(cfg.prefetch > 0):
                if tid == 0:
                    prefetch_vectors(base, tb + ahead, tb + ahead + tile, v_end, fmt)
            regs, oks, vs = load_tile(
                cfg.threads, cfg.unroll, base, tb, v_end, v_first, fmt, checked=False, policy=policy
            )
            self._stage_tile(sh, regs, None, vs, lead, bound)
        if v_whole < v_end:
            regs, oks, vs = load_tile(
                cfg.threads, cfg.unroll, base, v_whole, v_end, v_first, fmt, policy=policy
            )
            self._stage_tile(sh, regs, oks, vs, lead, bound)

    @cute.jit
    def _skip_tile(
        self, sh, base, tb: Int32, v_end: Int32, c0: Int32, j0: Int32, lead: Int32,
        bound: Uint32, checked: cutlass.Constexpr,
    ):  # fmt: skip
        """One tile of a block-skip pass: each vector's block bit from the live-block mask
        (``BLOCK`` columns a block, so a 16-byte vector lies in one block); a warp with no
        live vector in the tile loads nothing, the others load only live vectors (a
        predicated load: a dead lane issues no request) and stage as the dense pass does."""
        cfg = self.cfg
        fmt = cfg.key_format
        tid, _, _ = cute.arch.thread_idx()
        lives = []
        vs = []
        anyone = Boolean(False)
        for u in cutlass.range_constexpr(cfg.unroll):
            v = tb + u * cfg.threads + tid
            b = ((c0 + v * fmt.vec) >> Int32(5)) - j0
            ok = Boolean(True)
            if const_expr(checked):
                ok = v < v_end
                b = cutlass.select_(ok, b, Int32(0))
            word = Uint32(sh.skip[b >> Int32(5)])
            live = ok & (((word >> Uint32(b & Int32(31))) & Uint32(1)) != Uint32(0))
            lives.append(live)
            vs.append(v)
            anyone = anyone | live
        if cute.arch.vote_any_sync(anyone):
            regs = []
            for u in cutlass.range_constexpr(cfg.unroll):
                at = (base + Int64(vs[u]) * Int64(fmt.vec)).toint()
                regs.append(load_vec4_if(at, Uint32(cutlass.select_(lives[u], 1, 0))))
            self._stage_tile(sh, regs, lives, vs, lead, bound)

    @cute.jit
    def _skip_mask(
        self, sh, block_max, row: Int32, c0: Int32, v_begin: Int32, v_end: Int32,
        thr: Uint32, n_sample: Int32,
    ):  # fmt: skip
        """Whether this CTA's pass over vectors ``[v_begin, v_end)`` skips blocks, and if so
        the live-block mask ``sh.skip`` (``gvr_reference.blockskip.kernel_skips``).

        The gate: the sampled runs (``4 * vec`` consecutive scores, their largest keys in
        ``sh.runmax``) holding a key ``>= thr`` are at most ``GATE_64THS / 64`` of the runs,
        and the chunk's blocks fit the mask. Every warp counts the runs itself (ballots over
        the run maxima), so the gate needs no barrier; the CTAs of a row open it alike (the
        sample is the row's) unless only some of their chunks fit the mask. Then bit
        ``j - j0`` is set for every block ``j`` of the chunk whose bound reaches ``thr``
        (``device.keys.bound_reaches``): a block whose
        bound is below ``thr`` holds no score ``>= thr`` while the contract holds, so the
        pass stages the same survivors. One CTA barrier, when it skips."""
        cfg = self.cfg
        fmt = cfg.key_format
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        runs = n_sample // (4 * fmt.vec)
        hits = Int32(0)
        for i in cutlass.range_constexpr(-(-(cfg.sample_max // (4 * fmt.vec)) // 32)):
            r = i * 32 + lane
            slot = cutlass.max(cutlass.min(r, runs - 1), Int32(0))
            hit = (r < runs) & (sh.runmax[slot] >= thr)
            hits = hits + Int32(cute.arch.popc(cute.arch.vote_ballot_sync(hit)))
        j0 = (c0 + v_begin * fmt.vec) >> Int32(5)
        nb = ((c0 + v_end * fmt.vec + Int32(BLOCK - 1)) >> Int32(5)) - j0
        skip = (runs > 0) & (v_end > v_begin) & (nb <= Int32(32 * SKIP_MASK_WORDS))
        skip = skip & (hits * 64 <= runs * GATE_64THS[cfg.dtype])
        if skip:
            word = bound_word(thr, fmt)
            at = block_max.iterator + (Int64(row) * Int64(block_max.stride[0]) + Int64(j0))
            group = 8
            for i0 in cutlass.range(0, nb, cfg.threads * group):
                bits = []
                for g in cutlass.range_constexpr(group):
                    i = i0 + g * cfg.threads + tid
                    bits.append(load_scalar(at + cutlass.select_(i < nb, i, Int32(0))))
                for g in cutlass.range_constexpr(group):
                    i = i0 + g * cfg.threads + tid
                    live = (i < nb) & bound_reaches(bits[g], word)
                    mask = cute.arch.vote_ballot_sync(live)
                    if (lane == 0) & (i < nb):
                        sh.skip[i >> Int32(5)] = Uint32(mask)
            cute.arch.barrier()
        return skip

    @cute.jit
    def _stage_tile(self, sh, regs, oks, vs, lead: Int32, bound: Uint32):
        """Test a tile's scores (the hot loop: one IEEE compare per float32 score, one per
        pair of 16-bit scores, :func:`~..device.keys.above_bound`), then stage the survivors.
        ``regs``: the tile's vectors a thread (``unroll`` of them, or the ``preload`` held
        since the sample). ``oks``: per vector, whether it lies in the chunk (None: the whole
        tile does). Every lane of a tile's vectors lies inside the window (the vector that
        straddles a misaligned start is tested before the tiles)."""
        cfg = self.cfg
        fmt = cfg.key_format
        elems = []
        for u in cutlass.range_constexpr(len(regs)):
            sels = above_bound(regs[u], bound, fmt)
            for q in cutlass.range_constexpr(fmt.vec):
                sel = sels[q]
                if const_expr(oks is not None):
                    sel = sel & oks[u]
                if const_expr(fmt.bits == 16):
                    # the 16-bit bits, extracted only for a survivor
                    value = _half_of(regs[u][q // 2], q % 2)
                else:
                    value = regs[u][q]
                elems.append((value, vs[u] * fmt.vec + q - lead, sel))
        stage_selected(cfg.capacity, sh, elems)

    @cute.jit
    def _staged_max(self, sh, count: Int32):
        """``ctl[Ctl.MAXKEY]`` = the largest order key staged (when the staging holds every
        survivor), from one read of the staging after the pass: the hot loop keeps no running
        maximum. Ends with a CTA barrier."""
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        top = Uint32(0)
        if count <= cfg.capacity:
            for i in cutlass.range(tid, count, cfg.threads):
                top = cutlass.max(top, order_key(sh.stage_bits[i], cfg.key_format))
        top = Uint32(cute.arch.warp_redux_sync(top, "umax"))
        if cute.arch.lane_idx() == 0:
            cute.arch.atomic_max(cute.recast_ptr(sh.ctl.iterator + Ctl.MAXKEY, dtype=Uint32), top)
        cute.arch.barrier()

    # ------------------------------------------------------------------ split rows
    @cute.jit
    def _split_meet(
        self, sh, workspace, paths, count: Int32, parts: Int32, slot: Int32, lo_sel: Uint32,
    ):  # fmt: skip
        """Publish this CTA's survivors to the row slab (workspace row slot ``slot``); the last
        CTA to arrive gathers the whole slab into its staging when it fits (``ctl[Ctl.CNT]``
        entries, the largest key in ``ctl[Ctl.MAXKEY]``) and selects among them
        (:func:`~gvr_kernels.device.linear.select_staged`).

        One atomic a CTA both reserves its entries and arrives: the header's low half counts
        the survivors reserved, its high half the CTAs, so the CTA that finds every other one
        there finishes the row, with the row's total. A slab entry is one 64-bit word, the
        score's bits and its position with :data:`SLAB_VALID` set, stored and loaded whole
        (relaxed, GPU scope); no CTA fences. The last CTA waits on each entry's valid bit
        instead: every entry it reads was reserved, so is being written, by a CTA that has
        already arrived (so no co-residency is assumed), and every valid bit is clear between
        launches, since it clears each written entry once read
        (:data:`~.config.WS_SLAB_ENTRIES`).

        Where the linear level serves (:func:`~gvr_kernels.device.linear.serves`), the last
        CTA counts its histogram as it gathers, over ``[lo_sel, the sample's largest key]``
        (every CTA of the row drew the same sample), the keys above in the top bin, unless a
        gathered key is not a finite value's.

        Returns ``(total, finish, counted)``: the row's survivor count, whether this CTA
        finishes the row, and whether its histogram is counted (``select_staged``'s
        ``counted``, with the sample's largest key as ``top``).
        """
        cfg = self.cfg
        ctl = sh.ctl
        tid, _, _ = cute.arch.thread_idx()
        words = cfg.workspace_words_per_row
        ws_row = workspace.iterator + Int64(slot) * Int64(words)
        slab = ws_row + WS_HEADER_WORDS
        kept = cutlass.min(count, Int32(cfg.capacity))
        bins = linear_serves(cfg)

        # Header words 0-1 as one 64-bit counter: the fill (survivors reserved) in the low
        # half, the arrivals in the high half; the last CTA clears both with one store (no
        # CTA of this launch touches the header after its own arrival).
        header = cute.recast_ptr(ws_row, dtype=Uint64)
        if tid == 0:
            before = cute.arch.atomic_add(header, Uint64(count) | Uint64(1 << 32))
            fill = Int32(before & Uint64(0xFFFFFFFF))
            last = Int32(before >> Uint64(32)) == parts - 1
            ctl[Ctl.BCAST] = fill
            ctl[Ctl.LAST] = cutlass.select_(last, Int32(1), Int32(0))
            if last:
                ctl[Ctl.TOTAL] = fill + count
                cute.arch.store(header, Uint64(0))
        cute.arch.barrier()
        self._stamp(paths, "arrive")
        slab_base = ctl[Ctl.BCAST]
        for i in cutlass.range(tid, kept, cfg.threads):
            dst = slab_base + i
            if dst < cfg.capacity:
                pos = Uint32(sh.stage_idx[i]) | Uint32(SLAB_VALID)
                entry = Uint64(Uint32(sh.stage_bits[i])) | (Uint64(pos) << Uint64(32))
                store_entry(slab + Int64(2) * Int64(dst), entry)
        finish = ctl[Ctl.LAST] == 1
        total = ctl[Ctl.TOTAL]
        counted = Boolean(False)
        if finish:
            if const_expr(bins):
                # (the sample buffer is dead: a split row takes no retry rung)
                linear_clear(cfg, sh)
            # (the staging is read above before the gather overwrites it)
            cute.arch.barrier()
            self._stamp(paths, "publish")
            # Every entry written in this launch is read (and cleared); they go to the
            # staging when the row's survivors all fit.
            written = cutlass.min(total, Int32(cfg.capacity))
            fits = total <= cfg.capacity
            top = Uint32(0)
            scale = Uint32(0)
            bias = Uint32(0)
            if const_expr(bins):
                counted, scale, bias = linear_bin_setup(lo_sel, Uint32(ctl[Ctl.SMAX]))
                counted = counted & fits
            group = SLAB_LOADS
            for ib in cutlass.range(tid, written, cfg.threads * group):
                entries = []
                for g in cutlass.range_constexpr(group):
                    i = ib + g * cfg.threads
                    entry = Uint64(0)
                    if i < written:
                        entry = load_entry(slab + Int64(2) * Int64(i))
                    entries.append(entry)
                for g in cutlass.range_constexpr(group):
                    i = ib + g * cfg.threads
                    if i < written:
                        entry = entries[g]
                        while (Uint32(entry >> Uint64(32)) & Uint32(SLAB_VALID)) == Uint32(0):
                            entry = load_entry(slab + Int64(2) * Int64(i))
                        store_entry(slab + Int64(2) * Int64(i), Uint64(0))
                        if fits:
                            bits = Uint32(entry & Uint64(0xFFFFFFFF))
                            pos = Uint32(entry >> Uint64(32)) & ~Uint32(SLAB_VALID)
                            sh.stage_bits[i] = bits
                            sh.stage_idx[i] = Int32(pos)
                            top = cutlass.max(top, order_key(bits, cfg.key_format))
                            if const_expr(bins):
                                if counted:
                                    linear_count_key(sh, bits, scale, bias)
            if fits & (tid < total):
                max_ptr = cute.recast_ptr(ctl.iterator + Ctl.MAXKEY, dtype=Uint32)
                cute.arch.atomic_max(max_ptr, top)
            cute.arch.barrier()
            if const_expr(bins):
                # An infinity or a NaN gathered: no bracket (select_staged recounts, and
                # finds none either).
                counted = counted & (Uint32(ctl[Ctl.MAXKEY]) <= Uint32(KEY_FLT_MAX))
            self._stamp(paths, "gather")
        return total, finish, counted

    @cute.jit
    def _cluster_meet(self, sh, paths, out, values, row, rank, count, k, thr_key, binned):
        """A cluster split row's meeting through distributed shared memory (``cluster``):
        every CTA holds its own survivors (``count``, of which the staging kept at most the
        capacity) and the row's rung; the leader (rank 0) finishes the row.

        1. Meeting on the survivor bins (``binned``: the rung came from the row's sample, K at
           least ``SPLIT_BINS_MIN_K``), each CTA counts its survivors' bins
           (:meth:`_survivor_bin`: ``min((key - T) >> shift, 255)``, ``shift`` one radix level
           of the rung to the sample's largest key). Every CTA adds its count to every
           CTA's ``ctl[XTOTAL]`` and its bin counts to every CTA's ``mhist``; one cluster
           barrier. Every CTA then holds
           the row's total and histogram, so every decision below is the cluster's.
        2. A row of ``[k, capacity]`` survivors meeting on its bins: every CTA finds the
           crossing bin and emits its survivors above it (output slots from the leader's
           cursor, one remote atomic a warp). The bin's survivors (every survivor of any
           other row of at most ``capacity``) go to the leader's staging: the other CTAs
           send theirs to its top, slot ``capacity - 1 - s`` for the ``s``-th sent, while
           the leader packs its own bin's at the bottom (keeping every survivor, its own
           already are), ``c0`` of them; a row of more survivors takes no step (the leader
           selects from the row).
        3. One cluster barrier: every send has landed; the other CTAs are done. The leader
           moves the ``R`` entries it received down to follow its own (``ctl[CNT] = c0 + R``,
           the largest key in ``ctl[MAXKEY]``).

        Exact and in bounds: the leader's kept survivors and the entries sent to it are
        disjoint parts of the row's, at most ``total <= capacity``, so the top region (the
        last ``R`` slots) never meets the leader's unread entries (the first ``kept``); the
        packing and the move write, round by round after a barrier, only below every entry
        not yet read (a slot is at most the count read before it). The conditions are a
        workspace split's of the same capacity, so every path equals :meth:`_split_meet`'s
        (``gvr_reference.model``). Returns ``(total, finish, staged_bin, above, bin_lo)``: the
        row's survivor count, whether this CTA finishes the row, whether the leader staged the
        crossing bin only (then the ``above`` survivors above the bin fill output slots
        ``[0, above)``, and every staged key is at least ``bin_lo``).
        """
        cfg = self.cfg
        fmt = cfg.key_format
        ctl = sh.ctl
        cap = cfg.capacity
        tid, _, _ = cute.arch.thread_idx()
        leader = Int32(0)
        is_leader = rank == leader
        kept = cutlass.min(count, Int32(cap))

        shift = Uint32(0)
        if binned:
            smax = Uint32(ctl[Ctl.SMAX])
            shift = radix.level_shift(thr_key, cutlass.max(smax, thr_key))
            for i in cutlass.range(tid, kept, cfg.threads):
                b = self._survivor_bin(order_key(sh.stage_bits[i], fmt), thr_key, shift)
                cute.arch.atomic_add(sh.hist.iterator + b, Int32(1))
            cute.arch.barrier()
        self._stamp(paths, "reserve")
        # Every CTA of the cluster has zeroed its words (the arrival at the row's start).
        cute.arch.cluster_wait()
        if binned:
            if tid < HIST_BINS:
                h = sh.hist[tid]
                if h != Int32(0):
                    for d in cutlass.range_constexpr(cfg.cluster):
                        cute.arch.atomic_add(
                            remote(sh.mhist.iterator + tid, Int32(d)), h, scope="cluster"
                        )
                    sh.hist[tid] = Int32(0)  # (zero again for the leader's radix levels)
        if tid == 0:
            for d in cutlass.range_constexpr(cfg.cluster):
                cute.arch.atomic_add(
                    remote(ctl.iterator + Ctl.XTOTAL, Int32(d)), count, scope="cluster"
                )
        cluster_sync()
        self._stamp(paths, "publish")
        total = ctl[Ctl.XTOTAL]
        staged_bin = binned & (total >= k) & (total <= cap)
        send_all = (~staged_bin) & (total <= cap)
        above = Int32(0)
        bin_lo = Uint32(0)
        cross = Uint32(0)
        if staged_bin:
            if tid < 32:
                b, ab, _hb = radix.find_crossing(sh.mhist, k)
                if tid == 0:
                    ctl[Ctl.B] = b
                    ctl[Ctl.ABOVE] = ab
            cute.arch.barrier()
            self._stamp(paths, "cross")
            cross = Uint32(ctl[Ctl.B])
            above = ctl[Ctl.ABOVE]
            bin_lo = thr_key + (cross << shift)
        top = Uint32(0)  # (the leader: the largest key it keeps)
        if staged_bin | send_all:
            ea = EmitArgs(out, values, row, k, Int32(0), Int32(0), Uint32(0), Uint32(KEY_MAX))
            cursors = remote(ctl.iterator + Ctl.XCUR, leader)
            group = GATHER_GROUP
            # Warp-uniform trip count (slots come from warp-wide atomics; the leader's
            # rounds end at a barrier).
            for ib in cutlass.range(0, kept, cfg.threads * group):
                up_l = []
                send_l = []
                for g in cutlass.range_constexpr(group):
                    i = ib + g * cfg.threads + tid
                    ok = i < kept
                    # (no read past the entries: the leader's packing may be writing below)
                    bits = Uint32(0)
                    pos = Int32(0)
                    if ok:
                        bits = sh.stage_bits[i]
                        pos = sh.stage_idx[i]
                    up = Boolean(False)
                    send = ok
                    if staged_bin:
                        b = Uint32(self._survivor_bin(order_key(bits, fmt), thr_key, shift))
                        up = ok & (b > cross)
                        send = ok & (b == cross)
                    up_l.append((bits, pos, up))
                    send_l.append((bits, pos, send))
                if is_leader:
                    if staged_bin:
                        self._share(sh, ea, cursors, up_l, [], leader)
                        cute.arch.barrier()  # (every entry of the round read before it packs)
                        top = cutlass.max(top, self._pack(sh, send_l))
                    else:  # (it keeps every entry, where it is)
                        for bits, _pos, send in send_l:
                            key = order_key(bits, fmt)
                            top = cutlass.max(top, Uint32(cutlass.select_(send, key, Uint32(0))))
                else:
                    self._share(sh, ea, cursors, up_l, send_l, leader)
        if is_leader & send_all:
            if tid == 0:
                ctl[Ctl.XOWN] = kept
        # Every send has landed; no CTA touches another's shared memory after this.
        cluster_sync()
        finish = is_leader
        if finish & (staged_bin | send_all):
            own = ctl[Ctl.XOWN]
            got = Int32(Uint32(ctl[Ctl.XCUR]) >> Uint32(16))
            group = GATHER_GROUP
            for ub in cutlass.range(0, got, cfg.threads * group):
                moved = []
                for g in cutlass.range_constexpr(group):
                    u = ub + g * cfg.threads + tid
                    ok = u < got
                    bits = Uint32(0)
                    pos = Int32(0)
                    if ok:
                        bits = sh.stage_bits[(cap - got) + u]
                        pos = sh.stage_idx[(cap - got) + u]
                    moved.append((bits, pos, u, ok))
                cute.arch.barrier()  # (every source of the round read before any write)
                for bits, pos, u, ok in moved:
                    if ok:
                        sh.stage_bits[own + u] = bits
                        sh.stage_idx[own + u] = pos
                        top = cutlass.max(top, order_key(bits, fmt))
            # (the staged count; with every survivor staged it is the row's total, where a
            # workspace split's last CTA leaves its own pass count: no reader follows)
            if tid == 0:
                ctl[Ctl.CNT] = own + got
                ctl[Ctl.MAXKEY] = Int32(0)
            cute.arch.barrier()
            top = Uint32(cute.arch.warp_redux_sync(top, "umax"))
            if cute.arch.lane_idx() == 0:
                cute.arch.atomic_max(cute.recast_ptr(ctl.iterator + Ctl.MAXKEY, dtype=Uint32), top)
            cute.arch.barrier()
        self._stamp(paths, "gather")
        return total, finish, staged_bin, above, bin_lo

    @cute.jit
    def _share(self, sh, ea, cursors, up_l, send_l, leader: Int32):
        """A cluster split CTA's lists of ``(bits, pos, take)``: the keys above the crossing
        bin to the output (``up_l``) and the entries it sends to the top of the leader's
        staging (``send_l``), slots from the leader's two cursors (``cursors``, packed: both
        counts stay below ``2**16``) with one remote atomic a warp (called by all 32
        lanes)."""
        cfg = self.cfg
        cap = cfg.capacity
        up_masks, n_up, any_up = selection_masks([e[2] for e in up_l])
        send_masks = []
        n_send = Int32(0)
        any_send = Uint32(0)
        if const_expr(len(send_l) > 0):
            send_masks, n_send, any_send = selection_masks([e[2] for e in send_l])
        if cute.arch.vote_any_sync((any_up | any_send) != Uint32(0)):
            at_up, at_send = packed_warp_slots(cursors, n_up, n_send, scope="cluster")
            for i in cutlass.range_constexpr(len(up_l)):
                bits, pos, _take = up_l[i]
                if (up_masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                    write_slot(cfg, ea, at_up, pos, bits)
                    at_up = at_up + 1
            for i in cutlass.range_constexpr(len(send_l)):
                bits, pos, _take = send_l[i]
                if (send_masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                    at = (cap - 1) - at_send
                    store_remote(sh.stage_bits.iterator + at, leader, bits)
                    store_remote(sh.stage_idx.iterator + at, leader, Uint32(pos))
                    at_send = at_send + 1

    @cute.jit
    def _pack(self, sh, keep_l) -> Uint32:
        """The leader's own entries it keeps (a list of ``(bits, pos, take)`` read before a
        barrier), packed to the bottom of its staging from the cursor ``ctl[XOWN]`` (one
        shared atomic a warp): every slot is below every entry not yet read. Returns the
        largest key this thread packed (0: none)."""
        fmt = self.cfg.key_format
        top = Uint32(0)
        masks, cnt, anyone = selection_masks([e[2] for e in keep_l])
        if cute.arch.vote_any_sync(anyone != Uint32(0)):
            slot = warp_slots(sh.ctl.iterator + Ctl.XOWN, cnt)
            for i in cutlass.range_constexpr(len(keep_l)):
                bits, pos, _take = keep_l[i]
                if (masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                    sh.stage_bits[slot] = bits
                    sh.stage_idx[slot] = pos
                    top = cutlass.max(top, order_key(bits, fmt))
                    slot = slot + 1
        return top

    @cute.jit
    def _survivor_bin(self, key: Uint32, thr_key: Uint32, shift: Uint32) -> Int32:
        """The survivor bin of a key at or above the rung: ``(key - thr_key) >> shift``,
        keys past the sample's largest saturating into bin 255. Non-decreasing in the key,
        and computed alike by every CTA (integer operations only), so the finishing CTA's
        pass over the slab puts each survivor in the bin that counted it."""
        return Int32(cutlass.min((key - thr_key) >> shift, Uint32(HIST_BINS - 1)))

    @cute.jit
    def _emit_above(self, ctl, ea, elems):
        """Emission of a thread's list of ``(bits, pos, take)`` (the keys above the crossing
        bin): output slots from the cursor ``ctl[Ctl.GT]``, one shared atomic a warp for the
        whole list (called by all 32 lanes)."""
        masks, cnt, anyone = selection_masks([e[2] for e in elems])
        if cute.arch.vote_any_sync(anyone != Uint32(0)):
            slot = warp_slots(ctl.iterator + Ctl.GT, cnt)
            for i in cutlass.range_constexpr(len(elems)):
                bits, pos, _take = elems[i]
                if (masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                    write_slot(self.cfg, ea, slot, pos, bits)
                    slot = slot + 1
