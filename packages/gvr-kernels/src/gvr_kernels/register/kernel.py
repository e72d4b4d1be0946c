"""The register-resident GVR top-K family: one CTA per row, the whole row held in registers.

Per row (decisions and their CPU model: ``gvr_reference.register_model``):

1. **Window** as in the streaming family; rows with ``n <= k`` write the identity then ``-1``.
2. **Load.** Each thread issues its ``vecs`` 16-byte loads (vector ``tid + j * threads``) and
   warp 0 the tail scores (fewer than a vector's), all before any is used: the row is read
   once, in one round trip. With ``early_loads`` (decode rows, 128 registers a thread) the
   vectors are addressed within the logits width (``device.window.load_limit``) and go out
   before the row's ``kv_lens`` entry arrives. Slots outside the window hold ``-inf`` bits
   on the bracket path and key 0 on the sampled path, which no selection range contains.
   Per-warp reductions of the row's ends (and the sample count and crowd test) go to shared
   words; one barrier, then every warp reduces the warps' words itself.
3. **Bracket** (configurations built with ``bracket=True``). The scores stay float32 bits.
   The row's largest score and the bracket's low key (the smallest of window positions
   ``[0, k)``, or the smallest per-thread maximum when that is higher and ``k`` threads hold
   a score) map every held score to one of 2048 bins by one IEEE fused multiply-add
   (``device.bracket``; scores below the bracket land in scratch words) in one branch-free
   counting pass of four instructions a score; the CTA finds the crossing bin for ``k``;
   one emission pass writes every score of a higher bin with predicated stores (slots for
   both bit masks from one packed atomic per warp); the crossing bin is written whole,
   ranked by warp 0 (at most 32 keys), narrowed from the staging, or (more keys than the
   staging holds) selected from the registers.
   Rows whose ends are not finite (a NaN or an infinity at the top), whose scale overflows
   or cannot place the ends (``device.bracket.bracket_setup``), or whose sample shows a
   crowd of one key take the sampled path. 16-bit scores are held
   as raw bits and binned as their exact float32 widening (``device.keys.widen_bits``).
4. **Sample and rung.** One slot per thread, spread over the whole row, goes to shared memory;
   a radix narrowing over it gives the rung ``T`` (skipped for rows with ``n <= 2 aim``).
   This step and every radix selection work in the logits format's key space (16 bits for
   bfloat16 / float16 rows: two levels decide any key).
5. **Stage** the keys ``>= T`` with their positions (warp-aggregated slots, every one counted
   even past the capacity), so the selection walks a few thousand candidates instead of the
   whole row.
6. **Select** by radix narrowing over the staged keys in ``[T, max key]`` and **emit** them;
   value bits are read back only for the selected scores, when values are written. When the
   staging cannot serve (the rung above the K-th key, more keys than the capacity, or no
   rung) the registers themselves are the candidates: no path reads the row twice.

A row whose vectors do not fit the CTA (an envelope below the row) is selected exactly by the
streaming family's whole-row radix selection, reading from global memory.

Barriers on the critical path: a bracket row 1 (the ends, shared words zeroed meanwhile) + 1
(histogram) + 2 (crossing), + 1 (staging) when the crossing bin is ranked or narrowed (+ 1
for its key range, 2 per level and 2 for the emission when narrowed, more for the
deterministic tie narrowing); a sampled row 1 + 2 per rung level + 1 (staging) + 2 per
selection level + 1 (cursors zeroed) + 1 (emission done); a row of ``n <= 2 aim`` skips the
rung, and the staging too where a thread holds fewer than ``STAGED_UNSAMPLED_SLOTS`` scores
(else it is staged whole, + 1, and selected from the staging when it fits).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32, const_expr
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
from ..device.keys import KEY_MAX, format_key_of, order_key, widen_bits
from ..device.layout import Ctl, EmitArgs, Goal, Rank, RegisterRow, Source, Window
from ..device.ops import DEVICE_OPS, umax
from ..device.sampling import sample_slot, thread_sample_key
from ..device.select import (
    emit_rule,
    narrow,
    select_and_emit,
)
from ..device.shared import record_path, stamp_phase
from ..device.staging import packed_warp_slots, stage_selected
from ..device.window import held_vectors, issue_vectors, load_limit, row_window, write_short_row
from .config import (
    CTL_WORDS,
    HIST_BINS,
    SMEM_ALIGN,
    STAGED_UNSAMPLED_SLOTS,
    STAMPS,
    RegisterConfig,
)

__all__ = ["RegisterTopK", "allocate_shared"]


@cute.jit
def allocate_shared(cfg: cutlass.Constexpr):
    """The CTA's shared arrays (``cfg.shared_layout()``) and their allocator."""
    return shared.allocate_shared(cfg.shared_layout(), SMEM_ALIGN)


class RegisterTopK:
    """Exact top-K over rows of float32, bfloat16 or float16 logits (``config.dtype``) held
    in registers (see the module docstring).

    Launch arguments: the common kernel ABI (``gvr_kernels.abi.KernelArgs``); ``workspace``
    and ``parts`` are unused (one CTA per row). Supported: as the streaming family (unit inner
    stride, row stride a multiple of a 16-byte vector's scores, 16-byte-aligned base; values
    in the logits dtype), ``1 <= k <= 2048``, any row length (rows longer than
    ``config.max_n`` are read from memory).
    """

    def __init__(self, config: RegisterConfig):
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
            grid=[rows, 1, 1],
            block=[self.cfg.threads, 1, 1],
            smem=self.cfg.smem_bytes,
            stream=stream,
            min_blocks_per_mp=self.cfg.resident,
            # Set explicitly: a carveout derived by the DSL needs a device query when
            # min_blocks_per_mp > 1 (and the family needs only a few KB of shared memory).
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
        row, _, _ = cute.arch.block_idx()
        sh, _ = allocate_shared(cfg)
        self._stamp(paths, "entry")

        n, lead, base = row_window(cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift, fmt)
        nvec = (lead + n) >> Int32(fmt.vec.bit_length() - 1)
        raw = None
        if const_expr(cfg.early_loads):
            # The row's vectors go out before any branch on its length, addressed within the
            # logits width: they do not wait for kv_lens.
            lim = load_limit(cfg.mode, logits, nvec, fmt)
            raw = issue_vectors(base, Int32(0), lim, cfg.threads, cfg.vecs, fmt)

        if n <= k:
            write_short_row(cfg, out, values, base, lead, row, n, k)
            self._record(paths, row, Int32(Path.SHORT))
        else:
            win = Window(base, lead, nvec, cutlass.max(nvec * fmt.vec - lead, Int32(0)), n)
            if (nvec >= 1) & (nvec <= cfg.threads * cfg.vecs):
                self._held_row(sh, out, values, paths, win, row, k, raw)
            else:
                self._zero_shared(sh)
                cute.arch.barrier()
                select_and_emit(
                    cfg, sh, win, Source.ROW, out, values, row, k, Uint32(0),
                    Uint32(fmt.key_max), n,
                )  # fmt: skip
                self._record(paths, row, Int32(Path.WHOLE_ROW))
        self._stamp(paths, "finish")

    # ------------------------------------------------------------------ row bodies
    @cute.jit
    def _zero_shared(self, sh):
        tid, _, _ = cute.arch.thread_idx()
        for i in cutlass.range_constexpr(HIST_BINS // self.cfg.threads):
            sh.hist[tid + i * self.cfg.threads] = Int32(0)
        if tid < CTL_WORDS:
            sh.ctl[tid] = Int32(0)

    @cute.jit
    def _held_row(self, sh, out, values, paths, win, row: Int32, k: Int32, raw):
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        threads = cfg.threads
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp_id = tid // 32
        base, lead, nvec, tail_start, n = win

        # ---- load: every vector and the tail in flight before any is used (with
        # ``early_loads`` the vectors already are: ``raw``, and warp 0 reads the tail scores
        # only where the row has any)
        t_pos = tail_start + lane
        tail_ok = (warp_id == 0) & (t_pos < n)
        raw, tail_bits = held_vectors(win, Int32(0), t_pos, tail_ok, raw, threads, cfg.vecs, fmt)
        self._zero_shared(sh)

        p0 = tid * vec - lead
        regs = None
        tkey = Uint32(0)
        first = Uint32(POS_INF_BITS)
        if const_expr(cfg.bracket):
            # ---- the held scores as raw bits, -inf outside the window; per thread the
            # largest (NaN-propagating) and the smallest of window positions [0, k) it holds,
            # as float32 bits of the widened scores
            neg_inf = Uint32(fmt.sign | fmt.inf_bits)
            bits = []
            for j in cutlass.range_constexpr(cfg.vecs):
                for q in cutlass.range_constexpr(vec):
                    ok = self._slot_ok(j, q, p0, nvec)
                    bits.append(Uint32(cutlass.select_(ok, raw[j][q], neg_inf)))
            bits.append(Uint32(cutlass.select_(tail_ok, tail_bits, neg_inf)))
            regs = RegisterRow(bits, p0, t_pos)
            tmax = widen_bits(bits[0], fmt)
            for i in cutlass.range_constexpr(1, len(bits)):
                tmax = fmax_nan(tmax, widen_bits(bits[i], fmt))
            for i in cutlass.range_constexpr(len(bits)):
                if const_expr(may_lead(cfg, i)):
                    pos = regs.pos(i, cfg)
                    mine = (pos >= 0) & (pos < k)
                    if const_expr(i == len(bits) - 1):
                        mine = mine & tail_ok
                    else:
                        mine = mine & (tid + (i // vec) * threads < nvec)
                    wide = widen_bits(bits[i], fmt)
                    first = fmin(first, Uint32(cutlass.select_(mine, wide, Uint32(POS_INF_BITS))))
            tkey = order_key(tmax)
            sample_key = self._sample_key(bits, p0, nvec)
        else:
            # ---- the held scores as canonical order keys, 0 outside the window
            keys = []
            for j in cutlass.range_constexpr(cfg.vecs):
                for q in cutlass.range_constexpr(vec):
                    ok = self._slot_ok(j, q, p0, nvec)
                    key = order_key(raw[j][q], fmt)
                    keys.append(Uint32(cutlass.select_(ok, key, Uint32(0))))
            keys.append(Uint32(cutlass.select_(tail_ok, order_key(tail_bits, fmt), Uint32(0))))
            regs = RegisterRow(keys, p0, t_pos)
            tkey = keys[0]
            for i in cutlass.range_constexpr(1, len(keys)):
                tkey = umax(tkey, keys[i])
            sample_key = thread_sample_key(cfg.vecs, keys, vec)
        self._stamp(paths, "load")
        # ---- per warp: the reductions, to shared memory (one word each per warp, no
        # atomics), then one barrier.
        sh.sample[tid] = sample_key
        valid = sample_key != Uint32(0)
        n_valid = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(valid)))
        crowd = Uint32(0)
        if const_expr(cfg.bracket):
            # gvr_reference.register_model.crowd_key: the largest valid key this warp's
            # sample holds CROWD_MIN times or more.
            crowd = warp_crowd(sample_key, CROWD_MIN)
        w_max = Uint32(cute.arch.warp_redux_sync(tkey, "umax"))
        if lane == 0:
            sh.wstat[warp_id * 4 + 0] = w_max
            sh.wstat[warp_id * 4 + 3] = crowd_word(n_valid, crowd, fmt)
        if const_expr(cfg.bracket):
            w_first = Uint32(cute.arch.warp_redux_sync(order_key(first), "umin"))
            # Over the threads that hold a score (tid < nvec): each maximum is a distinct
            # score, so with at least k such threads the smallest of them bounds k keys too.
            w_tmin = Uint32(cute.arch.warp_redux_sync(
                Uint32(cutlass.select_(tid < nvec, tkey, Uint32(KEY_MAX))), "umin"
            ))  # fmt: skip
            if lane == 0:
                sh.wstat[warp_id * 4 + 1] = w_first
                sh.wstat[warp_id * 4 + 2] = w_tmin
        cute.arch.barrier()
        # Every warp reduces the warps' words (lane w reads warp w's): uniform results.
        mine = lane < threads // 32
        at = cutlass.select_(mine, lane, Int32(0)) * 4
        max_key = Uint32(cute.arch.warp_redux_sync(
            Uint32(cutlass.select_(mine, sh.wstat[at], Uint32(0))), "umax"
        ))  # fmt: skip
        packed = Uint32(cutlass.select_(mine, sh.wstat[at + 3], Uint32(0)))
        s_valid = Int32(cute.arch.warp_redux_sync(Int32(packed & Uint32(0x3F)), "add"))
        if const_expr(cfg.bracket):
            lo_key = Uint32(cute.arch.warp_redux_sync(
                Uint32(cutlass.select_(mine, sh.wstat[at + 1], Uint32(KEY_MAX))), "umin"
            ))  # fmt: skip
            tmax_min = Uint32(cute.arch.warp_redux_sync(
                Uint32(cutlass.select_(mine, sh.wstat[at + 2], Uint32(KEY_MAX))), "umin"
            ))  # fmt: skip
            crowd_field = Uint32(cute.arch.warp_redux_sync(packed >> Uint32(6), "umax"))
            # gvr_reference.register_model.bracket_low
            if (cutlass.min(nvec, Int32(threads)) >= k) & (tmax_min > lo_key):
                lo_key = tmax_min
            ok, scale, bias = bracket_setup(lo_key, max_key, HIST_BINS)
            self._stamp(paths, "reduce")
            if ok & crowd_clear(crowd_field, scale, bias, fmt):
                code = self._bracket(
                    sh, regs, win, out, values, paths, row, k, lo_key, max_key, scale, bias
                )
                self._record(paths, row, code)
            else:
                # The ends are float32 keys of the widened scores; the sampled path selects
                # in the format's key space.
                self._sampled(
                    sh, self._keys(regs, nvec, tail_ok), win, out, values, paths, row, k,
                    format_key_of(max_key, cfg.key_format), s_valid,
                )  # fmt: skip
        else:
            self._stamp(paths, "reduce")
            self._sampled(sh, regs, win, out, values, paths, row, k, max_key, s_valid)

    @cute.jit
    def _slot_ok(self, j: cutlass.Constexpr, q: cutlass.Constexpr, p0: Int32, nvec: Int32):
        """Whether vector slot ``(j, q)`` holds a window position: its vector is whole
        (``< nvec``) and, for vector 0, its lane is not before the window start."""
        tid, _, _ = cute.arch.thread_idx()
        ok = tid + j * self.cfg.threads < nvec
        if const_expr(j == 0):
            ok = ok & (p0 + q >= 0)
        return ok

    @cute.jit
    def _keys(self, regs, nvec: Int32, tail_ok):
        """The held raw scores as a :class:`RegisterRow` of canonical order keys in the
        format's key space (0 outside the window), for the sampled path and the register
        selections."""
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        keys = []
        for j in cutlass.range_constexpr(cfg.vecs):
            for q in cutlass.range_constexpr(vec):
                ok = self._slot_ok(j, q, regs.p0, nvec)
                key = order_key(regs.keys[j * vec + q], fmt)
                keys.append(Uint32(cutlass.select_(ok, key, Uint32(0))))
        tail = order_key(regs.keys[vec * cfg.vecs], fmt)
        keys.append(Uint32(cutlass.select_(tail_ok, tail, Uint32(0))))
        return RegisterRow(keys, regs.p0, regs.tail_pos)

    @cute.jit
    def _sample_key(self, bits, p0: Int32, nvec: Int32) -> Uint32:
        """This thread's sample key (``gvr_reference.register_model.thread_sample``): slot
        ``(j, q)`` with ``j = tid % vecs`` and ``q = (tid // vecs) % vec``, 0 outside the
        window; in the format's key space."""
        cfg = self.cfg
        fmt = cfg.key_format
        vec = fmt.vec
        tid, _, _ = cute.arch.thread_idx()
        pick = sample_slot(cfg.vecs, bits, vec=vec)
        j_s = tid % cfg.vecs
        v_s = tid + j_s * cfg.threads
        # window position v_s * vec + q - lead, with lead = tid * vec - p0
        ok = (v_s < nvec) & (v_s * vec + (tid // cfg.vecs) % vec - (tid * vec - p0) >= 0)
        return Uint32(cutlass.select_(ok, order_key(pick, fmt), Uint32(0)))

    @cute.jit
    def _bracket(
        self, sh, regs, win, out, values, paths, row, k, lo_key, max_key, scale, bias
    ) -> Int32:
        """The bracket histogram path (``gvr_reference.register_model``, steps 1-2): one
        counting pass, the crossing search, one emission pass."""
        cfg = self.cfg
        fmt = cfg.key_format
        threads = cfg.threads
        tid, _, _ = cute.arch.thread_idx()
        bits = regs.keys
        nk = len(bits)

        # Scores below the bracket are counted in the scratch words just before the
        # histogram, one per lane (``wsum``: the layout puts it there). A predicated
        # reduction instead measured 0.2-0.5 us slower per row (H200 decode grid,
        # n = 4,096 and 16,384).
        base = hist_base(sh.hist.iterator.toint())
        floor = spill_floor()
        for i in cutlass.range_constexpr(nk):
            count_bracket(widen_bits(bits[i], fmt), scale, bias, floor, base)
        if tid == 0:
            sh.ctl[Ctl.BIAS] = Int32(bias)
            sh.ctl[Ctl.SCALE] = Int32(scale)
        cute.arch.barrier()
        self._stamp(paths, "count")
        cb, above, m = find_crossing_cta(sh.hist, sh.wsum, sh.ctl, HIST_BINS, threads, k)
        self._stamp(paths, "crossing")
        # The emission recomputes every bin from the bracket read back from shared memory:
        # the same values, so the same bins, but no register holds a counting pass's bin
        # across the crossing search (at four vectors a thread that would spill).
        bias = Uint32(sh.ctl[Ctl.BIAS])
        scale = Uint32(sh.ctl[Ctl.SCALE])
        need = k - above
        whole = m == need
        code = Int32(Path.BRACKET)
        if (m > cfg.capacity) & (m != need):
            # More keys in the bin than the staging holds: the registers are the candidates
            # over every key at or above the bracket's low end (the whole answer).
            code = Int32(Path.BRACKET_OVERFLOW)
            keys = self._keys(regs, win.nvec, (tid // 32 == 0) & (regs.tail_pos < win.n))
            self._select_registers(
                sh, keys, win, out, values, row, k, format_key_of(lo_key, fmt),
                format_key_of(max_key, fmt),
            )  # fmt: skip
        else:
            # One pass: the keys of higher bins to output slots [0, above); the crossing bin
            # to slots [above, k) when all of it is needed, else to the staging.
            gt, eq, n_gt, n_eq = bin_masks(bits, scale, bias, cb, fmt)
            slot_gt, slot_eq = packed_warp_slots(sh.ctl.iterator + Ctl.GT, n_gt, n_eq)
            ea = EmitArgs(out, values, row, k, k, Int32(0), Uint32(0), Uint32(KEY_MAX))
            write_masked(cfg, out, values, row, regs, gt, slot_gt)
            if whole:
                if cute.arch.vote_any_sync(n_eq > 0):
                    write_masked(cfg, out, values, row, regs, eq, above + slot_eq)
                self._stamp(paths, "stage")
            else:
                if cute.arch.vote_any_sync(n_eq > 0):

                    def put(slot, key, pos):
                        sh.stage_bits[slot] = key
                        sh.stage_idx[slot] = pos

                    stage_masked(cfg, regs, eq, slot_eq, put)
                cute.arch.barrier()
                self._stamp(paths, "stage")
                if m <= RANK_MAX:
                    code = Int32(Path.BRACKET_RANK)
                    if tid // 32 == 0:
                        rank_crossing(cfg, sh, ea, win, m, above, need)
                else:
                    code = Int32(Path.BRACKET_NARROW)
                    narrow_crossing(cfg, sh, win, out, values, row, k, m, need, above)
        return code

    @cute.jit
    def _sampled(
        self, sh, regs, win, out, values, paths, row: Int32, k: Int32, max_key: Uint32,
        s_valid: Int32,
    ):  # fmt: skip
        """The sampled path, for rows the bracket cannot serve (``register_model`` step 3);
        ``regs`` holds canonical keys (in the format's key space, as ``max_key``), ``s_valid``
        the row's valid sample keys."""
        cfg = self.cfg
        key_max = Uint32(cfg.key_format.key_max)
        threads = cfg.threads
        lane = cute.arch.lane_idx()
        keys = regs.keys
        plan = register_plan(win.n, k, s_valid, cfg.aim_mult, DEVICE_OPS, cfg.dense_min)
        # ---- rung, then the keys at or above it staged (all of them counted)
        code = Int32(Path.UNSAMPLED)
        if not plan.unsampled:
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
                Int32(threads),
            )
            # A crowded single key (gvr_reference.model.crowded_rung): stage the keys above
            # it and count the keys equal to it.
            crowded = (ties >= 2) & (thr < key_max)
            lo = thr + Uint32(cutlass.select_(crowded, 1, 0))
            stage_selected(
                cfg.capacity,
                sh,
                [(keys[i], regs.pos(i, cfg), keys[i] >= lo) for i in range(len(keys))],
            )
            if crowded:
                mine = Int32(0)
                for i in cutlass.range_constexpr(len(keys)):
                    mine = mine + cutlass.select_(keys[i] == thr, 1, 0)
                mine = Int32(cute.arch.warp_redux_sync(mine, "add"))
                if lane == 0:
                    cute.arch.atomic_add(sh.ctl.iterator + Ctl.EQCNT, mine)
            cute.arch.barrier()
            count = sh.ctl[Ctl.CNT]
            eq = sh.ctl[Ctl.EQCNT]
            if count > cfg.capacity:
                code = Int32(Path.RESCUE_OVERFLOW)
                self._select_registers(sh, regs, win, out, values, row, k, lo, max_key)
            elif count >= k:
                code = Int32(Path.FIRST)
                select_and_emit(
                    cfg, sh, win, Source.STAGE, out, values, row, k, lo, max_key, count,
                    values_from=win,
                )  # fmt: skip
            elif count + eq >= k:
                # Crowded: every key above the rung, then k - count keys equal to it; the
                # rule is known, so one emission pass over the registers writes it.
                code = Int32(Path.TIE)
                emit_rule(
                    cfg, sh, regs, Source.REGS, out, values, row, k, thr, k - count, eq,
                    Int32(0), values_from=win,
                )  # fmt: skip
            else:
                code = Int32(Path.RESCUE_UNDERESTIMATE)
                self._select_registers(sh, regs, win, out, values, row, k, Uint32(1), max_key)
        elif const_expr(len(keys) >= STAGED_UNSAMPLED_SLOTS):
            # An unsampled row (at most 2 aim scores) of a CTA with many register slots a
            # thread: its keys are staged (a few a thread) and the radix levels walk the
            # staging instead of every slot at each level; a row longer than the staging
            # selects from the registers (the same answer and path either way).
            stage_selected(
                cfg.capacity,
                sh,
                [(keys[i], regs.pos(i, cfg), keys[i] >= Uint32(1)) for i in range(len(keys))],
            )
            cute.arch.barrier()
            count = sh.ctl[Ctl.CNT]
            if count <= cfg.capacity:
                select_and_emit(
                    cfg, sh, win, Source.STAGE, out, values, row, k, Uint32(1), max_key, count,
                    values_from=win,
                )  # fmt: skip
            else:
                self._select_registers(sh, regs, win, out, values, row, k, Uint32(1), max_key)
        else:
            self._select_registers(sh, regs, win, out, values, row, k, Uint32(1), max_key)
        self._record(paths, row, code)

    @cute.jit
    def _select_registers(self, sh, regs, win, out, values, row, k, lo: Uint32, hi: Uint32):
        """Selection and emission with the registers themselves as the candidates."""
        select_and_emit(
            self.cfg, sh, regs, Source.REGS, out, values, row, k, lo, hi, Int32(0),
            values_from=win,
        )  # fmt: skip

    @cute.jit
    def _record(self, paths, row: Int32, code: Int32):
        record_path(self.cfg, paths, row, code)

    @cute.jit
    def _stamp(self, paths, phase: cutlass.Constexpr):
        """Phase boundary ``phase`` of :data:`~.config.STAMPS` (``device.shared.stamp_phase``)."""
        stamp_phase(self.cfg, paths, STAMPS, phase)
