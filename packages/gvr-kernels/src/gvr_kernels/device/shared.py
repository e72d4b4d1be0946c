"""Allocation of a CTA's shared memory from a family's declared layout."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from ..family import STAMP_WORDS
from .layout import shared_arrays

__all__ = ["allocate_shared", "shared_usage", "ctl_u32", "record_path", "stamp_phase"]

_DTYPES = {"i32": Int32, "u32": Uint32}


@cute.jit
def allocate_shared(layout: cutlass.Constexpr, align: cutlass.Constexpr):
    """Allocate the arrays of ``layout`` (``(name, dtype, count)`` triples, dtype ``"i32"`` or
    ``"u32"``), in order, each aligned to ``align`` bytes.

    Returns:
        ``(arrays, allocator)``: the arrays (:func:`~.layout.shared_arrays`) and the
        allocator, whose total usage the layout's byte count must equal
        (:func:`shared_usage`).
    """
    smem = cutlass.memory.SmemAllocator()
    # A comprehension, not a loop statement: the DSL turns loop statements into staged loops.
    arrays = {
        name: smem.allocate_tensor(_DTYPES[dtype], cute.make_layout(count), byte_alignment=align)
        for name, dtype, count in layout
    }
    return shared_arrays(**arrays), smem


@cute.jit
def shared_usage(allocator) -> Int32:
    """Bytes of shared memory the allocator handed out (a compile-time constant)."""
    return allocator.calculate_total_usage()


def ctl_u32(ctl, word: int):
    """Control word ``word``'s Uint32 view (for unsigned atomics on ``ctl``)."""
    return cute.recast_ptr(ctl.iterator + word, dtype=Uint32)


@cute.jit
def record_path(cfg: cutlass.Constexpr, paths, row: Int32, code: Int32):
    """Thread 0 writes the row's path code (``gvr_reference.model.Path``) to ``paths[row]``
    when the configuration records paths (``cfg.record_paths``); nothing otherwise."""
    if cutlass.const_expr(cfg.record_paths):
        tid, _, _ = cute.arch.thread_idx()
        if tid == 0:
            paths[row] = code


@cute.jit
def stamp_phase(cfg: cutlass.Constexpr, paths, names: cutlass.Constexpr, phase: cutlass.Constexpr):
    """With ``cfg.stamp_phases`` (a profiling build): thread 0 writes ``%globaltimer`` (ns,
    its low 31 bits) to word ``STAMP_WORDS * cta + names.index(phase)`` of ``paths``, the
    boundary ``phase`` of a family's ``STAMPS`` (``tools/time_split_phases.py``,
    ``tools/time_register_phases.py``). Nothing otherwise."""
    if cutlass.const_expr(cfg.stamp_phases):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        word = bid * STAMP_WORDS + names.index(phase)
        if tid == 0:
            paths[word] = Int32(Int64(cute.arch.globaltimer()) & Int64(0x7FFFFFFF))
