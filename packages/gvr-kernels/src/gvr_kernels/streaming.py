"""The streaming self-sampling GVR top-K family: one or several CTAs per row.

Per row (algorithm and invariants in ``docs/kernels.md``; CPU model in
``gvr_reference.model``):

1. **Window.** The row's valid window ``[start, start + n)`` comes from device arrays (decode:
   ``kv_lens``/``next_n``/``compress_ratio``; prefill: ``row_starts``/``row_ends``). Rows with
   ``n <= k`` write the identity then ``-1``.
2. **Sample.** Whole 16-byte vectors at positions that depend only on ``n`` are read into shared
   memory as order keys (:func:`gvr_reference.ladder.row_plan`).
3. **Rung.** Radix narrowing over the sample gives a key ``T1`` with about ``aim`` scores of the
   row expected at or above it.
4. **Stream.** One pass over the row stages every survivor (key >= T) in shared memory,
   counting all of them even past the capacity.
5. **Select.** Radix narrowing over the staged survivors gives the exact rule "keys above
   ``thr``, plus ``need_eq`` keys equal to ``thr``" and one pass emits it.
6. **Fallbacks.** Too few survivors: a lower rung and a second pass (one CTA per row), then an
   exact radix selection over the whole row. Too many: the whole-row selection, restricted to
   keys at or above the rung.

With ``split``, a row is cut into ``parts`` contiguous chunks, one CTA each. Every CTA computes
the same sample and rung, streams its chunk, and appends its survivors to the row's slab in a
global workspace; the last CTA to arrive (a release/acquire counter) selects for the whole row
and restores the row's two counters to zero, so the next launch (or graph replay) finds them
clean (the slab is scratch: only its first ``total`` entries, written in this launch, are
read). No CTA ever waits for another, so no co-residency is assumed.

Supported: fp32 logits with unit inner stride, a row stride that is a multiple of 4 elements and
a 16-byte-aligned base; any ``1 <= k <= config.max_k``; rows up to ``2**26`` scores.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, const_expr
from gvr_reference.ladder import row_plan
from gvr_reference.model import Path

from .config import CTL_WORDS, HIST_BINS, WS_HEADER_WORDS, StreamingConfig
from .device import radix, warp
from .device.keys import KEY_MAX, NEG_FLT_MAX_BITS, order_key, stream_threshold, survives
from .device.memory import load_coherent, load_scalar, load_vec4, prefetch_l2, store_u32
from .device.ops import DEVICE_OPS

# Control words in shared memory (Int32 view).
_CNT = 0  # survivors staged by this CTA (counts past the capacity)
_B = 1  # crossing bin of the last radix level
_ABOVE = 2  # count above that bin
_COUNT_B = 3  # count in that bin
_GT = 4  # emission cursor for keys above the threshold
_EQ = 5  # emission cursor for keys equal to the threshold
_BCAST = 6  # block broadcast scratch
_LAST = 7  # split: this CTA arrived last
_TOTAL = 8  # split: survivors of the whole row
_MAXKEY = 9  # largest staged key (atomic max through the Uint32 view)

# Candidate sources of a radix level.
_SRC_SAMPLE = 0
_SRC_STAGE = 1
_SRC_ROW = 2

# Actions of the whole-row visitor.
_ACT_HIST = 0
_ACT_EMIT = 1


class StreamingTopK:
    """Exact top-K over rows of fp32 logits, streaming each row once (see module docstring).

    Launch arguments (all CUDA tensors, torch tensors through TVM-FFI):

    - ``logits``: fp32 ``(rows, width)``, strides ``(row_stride, 1)``, ``row_stride % 4 == 0``,
      16-byte-aligned base.
    - ``lens_a``, ``lens_b``: int32; decode: ``kv_lens (rows // next_n,)`` and unused;
      prefill: ``row_starts (rows,)`` and ``row_ends (rows,)``; full: both unused.
    - ``out``: int32 ``(rows, k)``, window-local indices, ``-1`` padding.
    - ``values``: fp32 ``(rows, k)`` when ``with_values`` (else any fp32 tensor, unused).
    - ``workspace``: uint32, at least ``rows * workspace_words_per_row`` words when ``split``
      (else unused); each row's 4 header words must be zero on entry and are zero again on
      exit.
    - ``paths``: int32 ``(rows,)`` path codes when ``record_paths`` (else unused).
    - ``k``, ``next_n``, ``cr_shift`` (``log2(compress_ratio)``), ``parts`` (CTAs per row; 1
      unless ``split``): int32 scalars.
    """

    def __init__(self, config: StreamingConfig):
        self.cfg = config
        self.threads = config.threads
        self.capacity = config.capacity
        self.sample_max = config.sample_max
        self.unroll = config.unroll
        self.params = config.ladder

    @staticmethod
    def can_implement(config: StreamingConfig, smem_per_block: int) -> bool:
        """Whether the configuration fits a device with ``smem_per_block`` bytes per CTA."""
        return config.smem_bytes <= smem_per_block

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
        stream: cuda.CUstream,
    ):
        rows = out.shape[0]
        self.kernel(
            logits, lens_a, lens_b, out, values, workspace, paths, k, next_n, cr_shift, parts
        ).launch(
            grid=[rows * parts, 1, 1],
            block=[self.threads, 1, 1],
            smem=self.cfg.smem_bytes,
            stream=stream,
            # The register budget follows the intended residency; the carveout is pinned to
            # the largest shared-memory share so the residency is not lost to a small L1 split.
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
    ):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        row = bid
        part = Int32(0)
        if const_expr(self.cfg.split):
            row = bid // parts
            part = bid - row * parts

        smem = cutlass.memory.SmemAllocator()
        hist = smem.allocate_tensor(Int32, cute.make_layout(HIST_BINS), byte_alignment=16)
        ctl = smem.allocate_tensor(Int32, cute.make_layout(CTL_WORDS), byte_alignment=16)
        sample = smem.allocate_tensor(Uint32, cute.make_layout(self.sample_max), byte_alignment=16)
        stage_bits = smem.allocate_tensor(
            Uint32, cute.make_layout(self.capacity), byte_alignment=16
        )
        stage_idx = smem.allocate_tensor(Int32, cute.make_layout(self.capacity), byte_alignment=16)
        sh = (hist, ctl, sample, stage_bits, stage_idx)

        # ---- 1. the row window
        width = logits.shape[1]
        n = width
        start = Int32(0)
        if const_expr(self.cfg.mode == "decode"):
            req = row // next_n
            t = lens_a[req] - next_n + (row - req * next_n) + 1
            n = cutlass.min(cutlass.max(t, Int32(0)) >> cr_shift, width)
        if const_expr(self.cfg.mode == "prefill"):
            s = cutlass.min(cutlass.max(lens_a[row], Int32(0)), width)
            e = cutlass.min(cutlass.max(lens_b[row], s), width)
            n = e - s
            start = s
        lead = start & Int32(3)
        # Element offset of the 16-byte-aligned address at or below the window start.
        row_off = Int64(row) * Int64(logits.stride[0]) + Int64(start - lead)
        base = logits.iterator + row_off

        if n <= k:
            if part == 0:
                self._short_row(out, values, base, lead, row, n, k)
                self._record(paths, row, Int32(Path.SHORT))
        else:
            if tid < HIST_BINS:
                hist[tid] = Int32(0)
            if tid < CTL_WORDS:
                ctl[tid] = Int32(0)
            cute.arch.barrier()
            self._long_row(sh, out, values, workspace, paths, base, lead, row, part, parts, n, k)

    # ------------------------------------------------------------------ row bodies
    @cute.jit
    def _short_row(self, out, values, base, lead: Int32, row: Int32, n: Int32, k: Int32):
        """``n <= k``: identity, then ``-1`` (values: the scores, then ``-FLT_MAX``)."""
        tid, _, _ = cute.arch.thread_idx()
        for j in cutlass.range(tid, k, self.threads):
            inside = j < n
            out[row, j] = cutlass.select_(inside, j, Int32(-1))
            if const_expr(self.cfg.with_values):
                bits = Uint32(NEG_FLT_MAX_BITS)
                if inside:
                    bits = load_scalar(base + (lead + j))
                store_u32(values.iterator + (Int64(row) * Int64(k) + Int64(j)), bits)

    @cute.jit
    def _long_row(self, sh, out, values, workspace, paths, base, lead, row, part, parts, n, k):
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        plan = row_plan(n, k, lead, self.params, DEVICE_OPS)
        nvec = plan.nvec

        # This CTA's contiguous chunk of vectors; the last part owns the scalar tail.
        v_begin = Int32(0)
        v_end = nvec
        own_tail = Boolean(True)
        if const_expr(self.cfg.split):
            chunk = (nvec + parts - 1) // parts
            v_begin = cutlass.min(part * chunk, nvec)
            v_end = cutlass.min(v_begin + chunk, nvec)
            own_tail = part == parts - 1

        # ---- 2-3. sample and first rung
        thr_key = Uint32(0)
        code = Int32(Path.UNSAMPLED)
        if not plan.unsampled:
            code = Int32(Path.FIRST)
            self._load_sample(sample, base, lead, plan)
            cute.arch.barrier()
            thr_key, _, _ = self._narrow(
                sh,
                _SRC_SAMPLE,
                False,
                True,
                plan.j1,
                Uint32(0),
                Uint32(KEY_MAX),
                Uint32(0),
                plan.sample_vecs * 4,
                base,
                lead,
                nvec,
                plan.tail_start,
                n,
            )

        # ---- 4. stream
        count = self._stream(sh, base, lead, v_begin, v_end, own_tail, plan.tail_start, n, thr_key)

        finish = Boolean(True)
        if const_expr(self.cfg.split):
            count, finish = self._split_meet(sh, workspace, row, parts, count, k)

        if finish:
            # ---- 6. fallbacks (single CTA per row: one retry rung)
            if const_expr(not self.cfg.split):
                if count < k and code == Int32(Path.FIRST):
                    thr2, _, _ = self._narrow(
                        sh,
                        _SRC_SAMPLE,
                        False,
                        True,
                        plan.j2,
                        Uint32(0),
                        Uint32(KEY_MAX),
                        Uint32(0),
                        plan.sample_vecs * 4,
                        base,
                        lead,
                        nvec,
                        plan.tail_start,
                        n,
                    )
                    if thr2 < thr_key:
                        thr_key = thr2
                        code = Int32(Path.RETRY)
                        cute.arch.barrier()
                        if tid == 0:
                            ctl[_CNT] = Int32(0)
                            ctl[_MAXKEY] = Int32(0)
                        cute.arch.barrier()
                        count = self._stream(
                            sh,
                            base,
                            lead,
                            Int32(0),
                            nvec,
                            Boolean(True),
                            plan.tail_start,
                            n,
                            thr_key,
                        )
            if count < k:
                code = Int32(Path.RESCUE_UNDERESTIMATE)
                thr_key = Uint32(0)
            if count > self.capacity:
                code = Int32(Path.RESCUE_OVERFLOW)
            if code >= Int32(Path.RESCUE_UNDERESTIMATE):
                self._select_and_emit(
                    sh,
                    _SRC_ROW,
                    out,
                    values,
                    row,
                    k,
                    thr_key,
                    Uint32(KEY_MAX),
                    count,
                    base,
                    lead,
                    nvec,
                    plan.tail_start,
                    n,
                )
            else:
                max_key = Uint32(ctl[_MAXKEY])
                self._select_and_emit(
                    sh,
                    _SRC_STAGE,
                    out,
                    values,
                    row,
                    k,
                    thr_key,
                    max_key,
                    count,
                    base,
                    lead,
                    nvec,
                    plan.tail_start,
                    n,
                )
            self._record(paths, row, code)

    @cute.jit
    def _record(self, paths, row: Int32, code: Int32):
        if const_expr(self.cfg.record_paths):
            tid, _, _ = cute.arch.thread_idx()
            if tid == 0:
                paths[row] = code

    # ------------------------------------------------------------------ sampling
    @cute.jit
    def _load_sample(self, sample, base, lead: Int32, plan):
        """Keys of the sampled vectors into shared memory; lanes before the window get key 0.

        Every thread issues all its sample loads before using any (addresses of missing
        vectors are clamped to vector 0 and their data discarded).
        """
        tid, _, _ = cute.arch.thread_idx()
        per_thread = self.sample_max // (4 * self.threads)
        regs = []
        for s in cutlass.range_constexpr(per_thread):
            t = s * self.threads + tid
            ok = t < plan.sample_vecs
            v = cutlass.select_(ok, t * plan.sample_step, Int32(0))
            regs.append(load_vec4(base + Int64(v) * Int64(4)))
        for s in cutlass.range_constexpr(per_thread):
            t = s * self.threads + tid
            if t < plan.sample_vecs:
                v = t * plan.sample_step
                for q in cutlass.range_constexpr(4):
                    key = order_key(regs[s][q])
                    key = cutlass.select_(v * 4 + q >= lead, key, Uint32(0))
                    sample[t * 4 + q] = key

    # ------------------------------------------------------------------ streaming pass
    @cute.jit
    def _stream(self, sh, base, lead, v_begin, v_end, own_tail, tail_start, n, thr_key):
        """Stage every score of this CTA's chunk with key >= ``thr_key``; returns the count.

        Slots come from one shared atomic per warp per tile; a slot at or past the capacity is
        counted but not written, so overflow is detected without writing out of bounds.
        """
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        warp_id = tid // 32
        lane = cute.arch.lane_idx()
        tile = self.threads * self.unroll
        raw_thr = stream_threshold(thr_key)
        # Lanes before the window start exist only in vector 0 (prefill rows, lead > 0).
        lane_ok = [Boolean(q >= lead) for q in range(4)]
        for tb in cutlass.range(v_begin, v_end, tile):
            regs = []
            oks = []
            vs = []
            for u in cutlass.range_constexpr(self.unroll):
                v = tb + u * self.threads + tid
                ok = v < v_end
                regs.append(load_vec4(base + Int64(cutlass.select_(ok, v, v_begin)) * Int64(4)))
                oks.append(ok)
                vs.append(v)
            if const_expr(self.cfg.prefetch):
                for u in cutlass.range_constexpr(self.unroll):
                    v = tb + tile + u * self.threads + tid
                    if v < v_end:
                        prefetch_l2(base + Int64(v) * Int64(4))
            self._stage_tile(sh, regs, oks, vs, lead, lane_ok, raw_thr)
        if own_tail:
            if warp_id == 0:
                t = tail_start + lane
                ok = t < n
                bits = load_scalar(base + (lead + cutlass.select_(ok, t, Int32(0))))
                sel = ok & survives(bits, raw_thr)
                self._stage_selected(sh, [(bits, t, sel)])
        cute.arch.barrier()
        return ctl[_CNT]

    @cute.jit
    def _stage_tile(self, sh, regs, oks, vs, lead: Int32, lane_ok, raw_thr: Uint32):
        """Test a tile's scores (the hot loop: a few integer operations per score), then stage
        the survivors."""
        elems = []
        for u in cutlass.range_constexpr(self.unroll):
            first = vs[u] == 0
            for q in cutlass.range_constexpr(4):
                valid = oks[u] & (lane_ok[q] | ~first)
                sel = valid & survives(regs[u][q], raw_thr)
                elems.append((regs[u][q], vs[u] * 4 + q - lead, sel))
        self._stage_selected(sh, elems)

    @cute.jit
    def _stage_selected(self, sh, elems):
        """Warp-aggregated staging of a per-thread list of ``(bits, pos, selected)``.

        Slots come from one shared atomic per warp; a slot at or past the capacity is counted
        but not written, so overflow is detected without writing out of bounds.
        """
        hist, ctl, sample, stage_bits, stage_idx = sh
        lane = cute.arch.lane_idx()
        cnt = Int32(0)
        for _bits, _pos, sel in elems:
            cnt = cnt + cutlass.select_(sel, Int32(1), Int32(0))
        if cute.arch.vote_any_sync(cnt > 0):
            incl = warp.inclusive_sum(cnt)
            total = warp.broadcast(incl, Int32(31))
            slot0 = Int32(0)
            if lane == 31:
                slot0 = cute.arch.atomic_add(ctl.iterator + _CNT, total)
            slot = warp.broadcast(slot0, Int32(31)) + incl - cnt
            top = Uint32(0)
            for i in cutlass.range_constexpr(len(elems)):
                bits, pos, sel = elems[i]
                if sel:
                    if slot < self.capacity:
                        stage_bits[slot] = bits
                        stage_idx[slot] = pos
                    slot = slot + 1
                    top = cutlass.max(top, order_key(bits))
            if cnt > 0:
                max_ptr = cute.recast_ptr(ctl.iterator + _MAXKEY, dtype=Uint32)
                cute.arch.atomic_max(max_ptr, top)

    # ------------------------------------------------------------------ split rows
    @cute.jit
    def _split_meet(self, sh, workspace, row: Int32, parts: Int32, count: Int32, k: Int32):
        """Publish this CTA's survivors to the row slab; the last CTA to arrive gathers them.

        Returns ``(total, finish)``: the row's survivor count and whether this CTA finishes
        the row (its staging then holds the whole slab when ``total <= capacity``).
        """
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        words = self.cfg.workspace_words_per_row
        ws_row = workspace.iterator + Int64(row) * Int64(words)
        slab_bits = ws_row + WS_HEADER_WORDS
        slab_idx = ws_row + (WS_HEADER_WORDS + self.capacity)

        if tid == 0:
            ctl[_BCAST] = Int32(cute.arch.atomic_add(ws_row, Uint32(count)))
        cute.arch.barrier()
        slab_base = ctl[_BCAST]
        kept = cutlass.min(count, Int32(self.capacity))
        for i in cutlass.range(tid, kept, self.threads):
            dst = slab_base + i
            if dst < self.capacity:
                cute.arch.store(slab_bits + dst, stage_bits[i])
                cute.arch.store(slab_idx + dst, Uint32(stage_idx[i]))
        # Every writer fences before the barrier, so the arrival below releases all of them.
        cute.arch.fence_acq_rel_gpu()
        cute.arch.barrier()
        if tid == 0:
            arrived = cute.arch.atomic_add(ws_row + 1, Uint32(1), sem="acq_rel", scope="gpu")
            last = Int32(arrived) == parts - 1
            ctl[_LAST] = cutlass.select_(last, Int32(1), Int32(0))
            if last:
                # Every other CTA has arrived: read the total and restore the zeros.
                total = cute.arch.atomic_exch(ws_row, Uint32(0), sem="acq_rel", scope="gpu")
                ctl[_TOTAL] = Int32(total)
                cute.arch.atomic_exch(ws_row + 1, Uint32(0), sem="relaxed", scope="gpu")
        cute.arch.barrier()
        finish = ctl[_LAST] == 1
        total = ctl[_TOTAL]
        if finish:
            cute.arch.fence_acq_rel_gpu()
            if total <= self.capacity:
                top = Uint32(0)
                for i in cutlass.range(tid, total, self.threads):
                    bits = load_coherent(slab_bits + i)
                    stage_bits[i] = bits
                    stage_idx[i] = Int32(load_coherent(slab_idx + i))
                    top = cutlass.max(top, order_key(bits))
                if tid < total:
                    max_ptr = cute.recast_ptr(ctl.iterator + _MAXKEY, dtype=Uint32)
                    cute.arch.atomic_max(max_ptr, top)
            cute.arch.barrier()
        return total, finish

    # ------------------------------------------------------------------ radix narrowing
    @cute.jit
    def _narrow(
        self,
        sh,
        src: cutlass.Constexpr,
        by_index: cutlass.Constexpr,
        threshold_mode: cutlass.Constexpr,
        target: Int32,
        lo: Uint32,
        hi: Uint32,
        eq_key: Uint32,
        count: Int32,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
    ):
        """Radix narrowing over a candidate source, 8 key bits per level.

        ``threshold_mode``: returns a rung ``T`` with ``target <= #(keys >= T) <= 2 * target``
        (or a single-key bin), as ``gvr_reference.model.narrow_threshold``.
        Otherwise returns ``(thr, need_eq, count_thr)``: the top-``target`` candidates are the
        keys above ``thr`` plus ``need_eq`` keys equal to it (``count_thr`` of them exist when
        the last level was a single key), as ``gvr_reference.model.select_rule``.

        ``by_index``: candidates are the entries whose key equals ``eq_key``, ranked by
        ``KEY_MAX - index`` (smallest index first), for the deterministic tie mode.
        """
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        warp_id = tid // 32
        lane = cute.arch.lane_idx()
        done = Boolean(False)
        above = Int32(0)
        need = target
        thr = Uint32(0)
        need_eq = Int32(0)
        count_thr = Int32(0)
        while not done:
            shift = radix.level_shift(lo, hi)
            self._histogram(
                sh, src, by_index, lo, hi, shift, eq_key, count, base, lead, nvec, tail_start, n
            )
            cute.arch.barrier()
            if warp_id == 0:
                goal = need
                if const_expr(threshold_mode):
                    goal = target - above
                b, ab, hb = radix.find_crossing(hist, goal)
                if lane == 0:
                    ctl[_B] = b
                    ctl[_ABOVE] = ab
                    ctl[_COUNT_B] = hb
            cute.arch.barrier()
            b = Uint32(ctl[_B])
            ab = ctl[_ABOVE]
            hb = ctl[_COUNT_B]
            lo_b = lo + (b << shift)
            top_bin = (hi - lo) >> shift
            hi_b = Uint32(
                cutlass.select_(b == top_bin, hi, lo_b + ((Uint32(1) << shift) - Uint32(1)))
            )
            if const_expr(threshold_mode):
                reached = above + ab + hb
                if shift == Uint32(0) or reached <= target * 2:
                    thr = lo_b
                    done = Boolean(True)
                else:
                    above = above + ab
                    lo = lo_b
                    hi = hi_b
            else:
                need = need - ab
                if shift == Uint32(0):
                    thr = lo_b
                    need_eq = need
                    count_thr = hb
                    done = Boolean(True)
                elif need == hb and lo_b > Uint32(0):
                    thr = lo_b - Uint32(1)
                    need_eq = Int32(0)
                    done = Boolean(True)
                else:
                    lo = lo_b
                    hi = hi_b
        return thr, need_eq, count_thr

    @cute.jit
    def _histogram(
        self,
        sh,
        src: cutlass.Constexpr,
        by_index: cutlass.Constexpr,
        lo,
        hi,
        shift,
        eq_key,
        count,
        base,
        lead,
        nvec,
        tail_start,
        n,
    ):
        """One radix level's histogram of the candidates with key in ``[lo, hi]``."""
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()

        if const_expr(src == _SRC_SAMPLE):
            for i in cutlass.range(tid, count, self.threads):
                self._count_key(hist, sample[i], Boolean(True), lo, hi, shift)
        if const_expr(src == _SRC_STAGE):
            for i in cutlass.range(tid, count, self.threads):
                self._count_entry(
                    hist,
                    by_index,
                    stage_bits[i],
                    stage_idx[i],
                    Boolean(True),
                    lo,
                    hi,
                    shift,
                    eq_key,
                )
        if const_expr(src == _SRC_ROW):
            emit_args = (None, None, Int32(0), Int32(0), Int32(0), Int32(0), Uint32(0), Uint32(0))
            self._row_loop(
                sh,
                _ACT_HIST,
                base,
                lead,
                nvec,
                tail_start,
                n,
                (by_index, lo, hi, shift, eq_key),
                emit_args,
            )

    @cute.jit
    def _count_key(self, hist, key: Uint32, keep: Boolean, lo: Uint32, hi: Uint32, shift: Uint32):
        if keep & (key >= lo) & (key <= hi):
            cute.arch.atomic_add(hist.iterator + Int32((key - lo) >> shift), Int32(1))

    @cute.jit
    def _count_entry(
        self,
        hist,
        by_index: cutlass.Constexpr,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
        lo: Uint32,
        hi: Uint32,
        shift: Uint32,
        eq_key: Uint32,
    ):
        key = order_key(bits)
        if const_expr(by_index):
            self._count_key(
                hist, Uint32(KEY_MAX) - Uint32(pos), ok & (key == eq_key), lo, hi, shift
            )
        else:
            self._count_key(hist, key, ok, lo, hi, shift)

    @cute.jit
    def _row_loop(
        self,
        sh,
        action: cutlass.Constexpr,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
        hist_args,
        emit_args,
    ):
        """Visit the whole row: tiles of ``unroll`` vectors per thread (warp-uniform trip
        count), then the scalar tail on warp 0, applying ``action`` to every ``(bits, pos, ok)``:
        ``_ACT_HIST`` counts a radix level (``hist_args``), ``_ACT_EMIT`` emits the selection
        (``emit_args``)."""
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        tile = self.threads * self.unroll
        for tb in cutlass.range(0, nvec, tile):
            regs = []
            oks = []
            vs = []
            for u in cutlass.range_constexpr(self.unroll):
                v = tb + u * self.threads + tid
                ok = v < nvec
                regs.append(load_vec4(base + Int64(cutlass.select_(ok, v, Int32(0))) * Int64(4)))
                oks.append(ok)
                vs.append(v)
            for u in cutlass.range_constexpr(self.unroll):
                for q in cutlass.range_constexpr(4):
                    pos = vs[u] * 4 + q - lead
                    self._act(
                        sh, action, regs[u][q], pos, oks[u] & (pos >= 0), hist_args, emit_args
                    )
        if tid // 32 == 0:
            t = tail_start + lane
            ok = t < n
            bits = load_scalar(base + (lead + cutlass.select_(ok, t, Int32(0))))
            self._act(sh, action, bits, t, ok, hist_args, emit_args)

    @cute.jit
    def _act(
        self,
        sh,
        action: cutlass.Constexpr,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
        hist_args,
        emit_args,
    ):
        hist, ctl, sample, stage_bits, stage_idx = sh
        if const_expr(action == _ACT_HIST):
            by_index, lo, hi, shift, eq_key = hist_args
            self._count_entry(hist, by_index, bits, pos, ok, lo, hi, shift, eq_key)
        else:
            out, values, row, k, n_gt, need_eq, thr, idx_max = emit_args
            self._emit_entry(ctl, out, values, row, k, n_gt, need_eq, thr, idx_max, bits, pos, ok)

    # ------------------------------------------------------------------ selection + emission
    @cute.jit
    def _select_and_emit(
        self,
        sh,
        src: cutlass.Constexpr,
        out,
        values,
        row: Int32,
        k: Int32,
        lo: Uint32,
        hi: Uint32,
        count: Int32,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
    ):
        """Exact selection over the staged survivors (``src`` stage) or the whole row, then
        one emission pass writing all ``k`` slots of the row."""
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        thr, need_eq, count_thr = self._narrow(
            sh, src, False, False, k, lo, hi, Uint32(0), count, base, lead, nvec, tail_start, n
        )
        idx_max = Uint32(KEY_MAX)
        if const_expr(self.cfg.deterministic):
            if need_eq > 0 and need_eq < count_thr:
                thr_i, need_i, _ = self._narrow(
                    sh,
                    src,
                    True,
                    False,
                    need_eq,
                    Uint32(0),
                    Uint32(KEY_MAX),
                    thr,
                    count,
                    base,
                    lead,
                    nvec,
                    tail_start,
                    n,
                )
                idx_max = Uint32(KEY_MAX) - thr_i - Uint32(cutlass.select_(need_i == 0, 1, 0))
        if tid == 0:
            ctl[_GT] = Int32(0)
            ctl[_EQ] = Int32(0)
        cute.arch.barrier()
        n_gt = k - need_eq

        if const_expr(src == _SRC_STAGE):
            for ib in cutlass.range(0, count, self.threads):
                i = ib + tid
                ok = i < count
                j = cutlass.select_(ok, i, Int32(0))
                self._emit_entry(
                    ctl,
                    out,
                    values,
                    row,
                    k,
                    n_gt,
                    need_eq,
                    thr,
                    idx_max,
                    stage_bits[j],
                    stage_idx[j],
                    ok,
                )
        if const_expr(src == _SRC_ROW):
            self._row_loop(
                sh,
                _ACT_EMIT,
                base,
                lead,
                nvec,
                tail_start,
                n,
                (False, Uint32(0), Uint32(0), Uint32(0), Uint32(0)),
                (out, values, row, k, n_gt, need_eq, thr, idx_max),
            )
        cute.arch.barrier()

    @cute.jit
    def _emit_entry(
        self,
        ctl,
        out,
        values,
        row: Int32,
        k: Int32,
        n_gt: Int32,
        need_eq: Int32,
        thr: Uint32,
        idx_max: Uint32,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
    ):
        key = order_key(bits)
        self._emit_one(
            ctl,
            out,
            values,
            row,
            k,
            n_gt,
            need_eq,
            bits,
            pos,
            ok & (key > thr),
            ok & (key == thr) & (Uint32(pos) <= idx_max),
        )

    @cute.jit
    def _emit_one(
        self,
        ctl,
        out,
        values,
        row: Int32,
        k: Int32,
        n_gt: Int32,
        need_eq: Int32,
        bits: Uint32,
        pos: Int32,
        is_gt: Boolean,
        is_eq: Boolean,
    ):
        """Warp-aggregated emission: keys above the threshold fill slots ``[0, n_gt)``, the
        first ``need_eq`` equal keys fill ``[n_gt, k)``."""
        lane = cute.arch.lane_idx()
        below = cute.arch.lanemask_lt()
        ballot_gt = cute.arch.vote_ballot_sync(is_gt)
        if ballot_gt != Uint32(0):
            base_gt = Int32(0)
            if lane == 0:
                base_gt = cute.arch.atomic_add(ctl.iterator + _GT, Int32(cute.arch.popc(ballot_gt)))
            slot = warp.broadcast(base_gt, Int32(0)) + Int32(cute.arch.popc(ballot_gt & below))
            if is_gt:
                self._write(out, values, row, k, slot, pos, bits)
        ballot_eq = cute.arch.vote_ballot_sync(is_eq)
        if ballot_eq != Uint32(0):
            base_eq = Int32(0)
            if lane == 0:
                base_eq = cute.arch.atomic_add(ctl.iterator + _EQ, Int32(cute.arch.popc(ballot_eq)))
            slot = warp.broadcast(base_eq, Int32(0)) + Int32(cute.arch.popc(ballot_eq & below))
            if is_eq & (slot < need_eq):
                self._write(out, values, row, k, n_gt + slot, pos, bits)

    @cute.jit
    def _write(self, out, values, row: Int32, k: Int32, slot: Int32, pos: Int32, bits: Uint32):
        out[row, slot] = pos
        if const_expr(self.cfg.with_values):
            store_u32(values.iterator + (Int64(row) * Int64(k) + Int64(slot)), bits)
