"""Global-memory access helpers with pinned instruction shapes.

The streaming pass reads each score once with 16-byte read-only loads that do not allocate in
L1 (``ld.global.nc.L1::no_allocate.v4``); spelling the instruction in PTX keeps the load shape
fixed across DSL versions (a compiler rewrite of 128-bit loads into 64-bit pairs once cost
spills upstream). Workspace traffic between CTAs uses 64-bit relaxed GPU-scope loads and
stores (:func:`store_entry`, :func:`load_entry`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, Uint64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .keys import F32


@cute.jit
def load_vec4(ptr: cute.Pointer, policy=None):
    """Four consecutive fp32 scores as raw uint32 bits from a 16-byte-aligned global address;
    with ``policy`` (an L2 cache policy from :func:`l2_policy`), the line takes its eviction
    priority (``.L2::cache_hint``)."""
    if const_expr(policy is None):
        return cute.arch.inline_ptx(
            "ld.global.nc.L1::no_allocate.v4.u32 { {$w0}, {$w1}, {$w2}, {$w3} }, [{$r0}];",
            write_only_types=[Uint32, Uint32, Uint32, Uint32],
            read_only_args=[ptr],
        )
    else:
        return _load_vec4_hinted(ptr.toint(), policy)


def _vec4_asm(asm: str, operands, constraints: str, loc, ip):
    """Four uint32 words from one inline-PTX statement whose outputs are ``$0-$3`` (the
    operands follow them as ``$4, ...``)."""
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.i32()] * 4),
        operands,
        asm,
        "=r,=r,=r,=r," + constraints,
        has_side_effects=False,
        loc=loc,
        ip=ip,
    )
    return [Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def _load_vec4_hinted(addr: Int64, policy: Int64, *, loc=None, ip=None):
    operands = [Int64(addr).ir_value(loc=loc, ip=ip), Int64(policy).ir_value(loc=loc, ip=ip)]
    asm = "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {$0, $1, $2, $3}, [$4], $5;"
    return _vec4_asm(asm, operands, "l,l", loc, ip)


@dsl_user_op
def l2_policy(priority: str, *, loc=None, ip=None) -> Int64:
    """An L2 cache policy giving every line it touches the eviction priority ``priority``
    (``"evict_first"``, ``"evict_last"`` or ``"evict_normal"``): ``createpolicy.fractional``
    (PTX ISA 7.4, sm_80+), for loads with ``.L2::cache_hint``."""
    res = llvm.inline_asm(
        T.i64(),
        [],
        f"createpolicy.fractional.L2::{priority}.b64 $0, 1.0;",
        "=l",
        has_side_effects=False,
        loc=loc,
        ip=ip,
    )
    return Int64(res)


@dsl_user_op
def load_vec4_if(addr: Int64, flag: Uint32, *, loc=None, ip=None):
    """:func:`load_vec4` when ``flag != 0``, else four zeros and no memory access (one
    predicated load: a lane whose flag is clear issues no request). ``addr``: the 16-byte
    aligned global byte address (``pointer.toint()``)."""
    operands = [Int64(addr).ir_value(loc=loc, ip=ip), Uint32(flag).ir_value(loc=loc, ip=ip)]
    asm = (
        "{ .reg .pred p; setp.ne.u32 p, $5, 0; mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; "
        "mov.b32 $3, 0; @p ld.global.nc.L1::no_allocate.v4.u32 {$0, $1, $2, $3}, [$4]; }"
    )
    return _vec4_asm(asm, operands, "l,r", loc, ip)


@cute.jit
def load_scalar(ptr: cute.Pointer) -> Uint32:
    """One fp32 score as raw uint32 bits (read-only path)."""
    return cute.arch.inline_ptx(
        "ld.global.nc.u32 {$w0}, [{$r0}];",
        write_only_types=[Uint32],
        read_only_args=[ptr],
    )


@cute.jit
def store_entry(ptr: cute.Pointer, value: Uint64):
    """One 64-bit word (8-byte aligned) to global memory, relaxed at GPU scope: a scalar
    access, so a reader at GPU scope sees all of it or none of it (PTX ISA, memory
    consistency model: single-copy atomicity of naturally aligned scalar accesses)."""
    cute.arch.inline_ptx("st.relaxed.gpu.global.b64 [{$r0}], {$r1};", read_only_args=[ptr, value])


@cute.jit
def load_entry(ptr: cute.Pointer) -> Uint64:
    """One 64-bit word (8-byte aligned) from global memory, relaxed at GPU scope (sees the
    whole of a :func:`store_entry` or none of it)."""
    return cute.arch.inline_ptx(
        "ld.relaxed.gpu.global.b64 {$w0}, [{$r0}];",
        write_only_types=[Uint64],
        read_only_args=[ptr],
    )


@cute.jit
def store_u32(ptr: cute.Pointer, value: Uint32):
    """Store raw 32 bits to global memory (used for fp32 values given as bits)."""
    cute.arch.inline_ptx("st.global.u32 [{$r0}], {$r1};", read_only_args=[ptr, value])


@cute.jit
def prefetch_l2_bulk(ptr: cute.Pointer, nbytes: Uint32):
    """Ask L2 to fetch ``nbytes`` contiguous bytes from ``ptr`` with one bulk asynchronous
    prefetch (``cp.async.bulk.prefetch.L2``, sm_90+; PTX ISA 8.0): no register holds the data
    and nothing waits for it. ``ptr`` and ``nbytes`` must be multiples of 16 bytes and the
    range inside the allocation."""
    cute.arch.inline_ptx(
        "cp.async.bulk.prefetch.L2.global [{$r0}], {$r1};", read_only_args=[ptr, nbytes]
    )


@cute.jit
def load_score(ptr: cute.Pointer, fmt: cutlass.Constexpr = F32) -> Uint32:
    """One score of format ``fmt`` as raw bits (16-bit scores zero-extended), read-only path."""
    if const_expr(fmt.bits == 32):
        return load_scalar(ptr)
    else:
        return cute.arch.inline_ptx(
            "ld.global.nc.u16 {$w0}, [{$r0}];",
            write_only_types=[Uint32],
            read_only_args=[ptr],
        )


@cute.jit
def store_score(ptr: cute.Pointer, bits: Uint32, fmt: cutlass.Constexpr = F32):
    """Store one score of format ``fmt`` given as raw bits (the low 16 bits for 16-bit
    scores)."""
    if const_expr(fmt.bits == 32):
        store_u32(ptr, bits)
    else:
        cute.arch.inline_ptx("st.global.u16 [{$r0}], {$r1};", read_only_args=[ptr, bits])


@dsl_user_op
def store_u32_if(
    addr: Int64, value: Uint32, flag: Uint32, width: int = 32, *, loc=None, ip=None
) -> None:
    """``st.global.u32 [addr], value`` when ``flag != 0``: one predicated store, no branch
    (``addr``: a global byte address, as ``pointer.toint()`` gives it); ``width=16`` stores
    the low 16 bits (``st.global.u16``, a 16-bit score's raw bits)."""
    operands = [
        Int64(addr).ir_value(loc=loc, ip=ip),
        Uint32(value).ir_value(loc=loc, ip=ip),
        Uint32(flag).ir_value(loc=loc, ip=ip),
    ]
    llvm.inline_asm(
        None,
        operands,
        f"{{ .reg .pred p; setp.ne.u32 p, $2, 0; @p st.global.u{width} [$0], $1; }}",
        "l,r,r,~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def count_shared(addr: Int32, *, loc=None, ip=None) -> None:
    """``red.shared.add.u32 [addr], 1`` (``addr``: a shared-window byte address,
    ``pointer.toint()``)."""
    llvm.inline_asm(
        None,
        [Int32(addr).ir_value(loc=loc, ip=ip)],
        "red.shared.add.u32 [$0], 1;",
        "r,~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def count_shared_if(addr: Int32, flag, *, loc=None, ip=None) -> None:
    """``red.shared.add.u32 [addr], 1`` when ``flag`` (a predicated reduction: lanes whose
    flag is false issue no shared-memory access; no branch)."""
    operands = [Int32(addr).ir_value(loc=loc, ip=ip), Int32(flag).ir_value(loc=loc, ip=ip)]
    llvm.inline_asm(
        None,
        operands,
        "{ .reg .pred p; setp.ne.s32 p, $1, 0; @p red.shared.add.u32 [$0], 1; }",
        "r,r,~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )
