"""The register-resident GVR top-K family: one CTA per row, the whole row held in registers.

Per row (decisions and their CPU model: ``gvr_reference.register_model``):

1. **Window** as in the streaming family; rows with ``n <= k`` write the identity then ``-1``.
2. **Load.** Each thread issues its ``vecs`` 16-byte loads (vector ``tid + j * threads``) and
   warp 0 the 0-3 tail scores, all before any is used: the row is read once, in one round
   trip. Keys of slots outside the window are 0, which no selection range contains.
3. **Sample and rung.** One slot per thread, spread over the whole row, goes to shared memory;
   a radix narrowing over it gives the rung ``T`` (skipped for rows with ``n <= 2 aim``).
4. **Stage** the keys ``>= T`` with their positions (warp-aggregated slots, every one counted
   even past the capacity), so the selection walks a few thousand candidates instead of the
   whole row.
5. **Select** by radix narrowing over the staged keys in ``[T, max key]`` and **emit** them;
   value bits are read back only for the selected scores, when values are written. When the
   staging cannot serve (the rung above the K-th key, more keys than the capacity, or no
   rung) the registers themselves are the candidates: no path reads the row twice.

A row whose vectors do not fit the CTA (an envelope below the row) is selected exactly by the
streaming family's whole-row radix selection, reading from global memory.

Barriers on the critical path of a sampled row: 1 (shared words zeroed, loads in flight) + 1
(keys, max key and sample published) + 2 per rung level (histogram, crossing) + 1 (staging)
+ 2 per selection level + 1 (cursors zeroed) + 1 (emission done); a row of ``n <= 2 aim``
skips the rung and the staging.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, const_expr
from gvr_reference.model import Path
from gvr_reference.register_model import register_plan

from ..device import shared
from ..device.keys import KEY_MAX, order_key
from ..device.layout import Ctl, Goal, Rank, RegisterRow, Source, Window
from ..device.memory import load_scalar, load_vec4
from ..device.ops import DEVICE_OPS
from ..device.select import emit_rule, narrow, select_and_emit
from ..device.staging import stage_selected
from ..device.window import row_window, write_short_row
from .config import CTL_WORDS, HIST_BINS, SMEM_ALIGN, RegisterConfig

__all__ = ["RegisterTopK", "allocate_shared"]

#: Control word counting the valid sample keys (free in this family: no staging counter).
_SVALID = Ctl.TOTAL


@cute.jit
def allocate_shared(cfg: cutlass.Constexpr):
    """The CTA's shared arrays (``cfg.shared_layout()``) and their allocator."""
    return shared.allocate_shared(cfg.shared_layout(), SMEM_ALIGN)


class RegisterTopK:
    """Exact top-K over rows of fp32 logits held in registers (see the module docstring).

    Launch arguments: the common kernel ABI (``gvr_kernels.abi.KernelArgs``); ``workspace``
    and ``parts`` are unused (one CTA per row). Supported: as the streaming family (fp32, unit
    inner stride, row stride a multiple of 4, 16-byte-aligned base), ``1 <= k <= 2048``, any
    row length (rows longer than ``config.max_n`` are read from memory).
    """

    def __init__(self, config: RegisterConfig):
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
        row, _, _ = cute.arch.block_idx()
        sh, _ = allocate_shared(cfg)

        n, lead, base = row_window(cfg.mode, logits, lens_a, lens_b, row, next_n, cr_shift)

        if n <= k:
            write_short_row(cfg, out, values, base, lead, row, n, k)
            self._record(paths, row, Int32(Path.SHORT))
        else:
            nvec = (lead + n) >> 2
            win = Window(base, lead, nvec, cutlass.max(nvec * 4 - lead, Int32(0)), n)
            if (nvec >= 1) & (nvec <= cfg.threads * cfg.vecs):
                self._held_row(sh, out, values, paths, win, row, k)
            else:
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
    def _held_row(self, sh, out, values, paths, win, row: Int32, k: Int32):
        cfg = self.cfg
        threads = cfg.threads
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp_id = tid // 32
        base, lead, nvec, tail_start, n = win

        # ---- load: every vector and the tail in flight before any is used
        raw = []
        for j in cutlass.range_constexpr(cfg.vecs):
            v = tid + j * threads
            raw.append(load_vec4(base + Int64(cutlass.select_(v < nvec, v, Int32(0))) * Int64(4)))
        t_pos = tail_start + lane
        tail_ok = (warp_id == 0) & (t_pos < n)
        tail_bits = load_scalar(base + (lead + cutlass.select_(tail_ok, t_pos, Int32(0))))
        self._zero_shared(sh)
        cute.arch.barrier()

        # ---- keys (0 outside the window), the max key, the sample
        p0 = tid * 4 - lead
        keys = []
        for j in cutlass.range_constexpr(cfg.vecs):
            v_ok = tid + j * threads < nvec
            for q in cutlass.range_constexpr(4):
                ok = v_ok & (p0 + (j * 4 * threads + q) >= 0)
                keys.append(Uint32(cutlass.select_(ok, order_key(raw[j][q]), Uint32(0))))
        keys.append(Uint32(cutlass.select_(tail_ok, order_key(tail_bits), Uint32(0))))
        regs = RegisterRow(keys, p0, t_pos)

        top = keys[0]
        for i in cutlass.range_constexpr(1, len(keys)):
            top = cutlass.max(top, keys[i])
        top = Uint32(cute.arch.warp_redux_sync(top, "umax"))
        # The sample slot of this thread: vector j = tid % vecs, lane q = (tid // vecs) % 4.
        sample_key = Uint32(0)
        for j in cutlass.range_constexpr(cfg.vecs):
            for q in cutlass.range_constexpr(4):
                pick = (tid % cfg.vecs == j) & ((tid // cfg.vecs) % 4 == q)
                sample_key = Uint32(cutlass.select_(pick, keys[j * 4 + q], sample_key))
        sh.sample[tid] = sample_key
        n_valid = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(sample_key != Uint32(0))))
        if lane == 0:
            cute.arch.atomic_max(cute.recast_ptr(sh.ctl.iterator + Ctl.MAXKEY, dtype=Uint32), top)
            cute.arch.atomic_add(sh.ctl.iterator + _SVALID, n_valid)
        cute.arch.barrier()
        max_key = Uint32(sh.ctl[Ctl.MAXKEY])
        plan = register_plan(n, k, sh.ctl[_SVALID], cfg.aim_mult, DEVICE_OPS)

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
                Uint32(KEY_MAX),
                Uint32(0),
                Int32(threads),
            )
            # A crowded single key (gvr_reference.model.crowded_rung): stage the keys above
            # it and count the keys equal to it.
            crowded = (ties >= 2) & (thr < Uint32(KEY_MAX))
            lo = thr + Uint32(cutlass.select_(crowded, 1, 0))
            stage_selected(
                cfg.capacity,
                sh,
                [(keys[i], regs.pos(i, threads), keys[i] >= lo) for i in range(len(keys))],
                keys_given=True,
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
        if const_expr(self.cfg.record_paths):
            tid, _, _ = cute.arch.thread_idx()
            if tid == 0:
                paths[row] = code
