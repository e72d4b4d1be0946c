"""Distributed shared memory (DSMEM) between the CTAs of a thread-block cluster.

A pointer into this CTA's shared memory is mapped to the same offset in CTA ``rank`` of the
cluster (``mapa``); stores and atomics through it are ``st.shared::cluster`` and
``atom.shared::cluster``. Remote writes become visible to the owner at the next cluster
barrier (:func:`cluster_sync`: arrive with release, wait with acquire semantics).

A release at cluster scope compiles to a GPU-scope ``MEMBAR.ALL.GPU`` on sm_90a, which waits
for every memory access the thread has in flight, loads included. A CTA's arrival at the start
of a row, where only its own shared words (and mbarriers) must be seen by the cluster, takes
:func:`arrive_own_shared` instead: a release restricted to this CTA's shared memory, then a
relaxed arrival, so the row's loads stay in flight across it.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from .staging import selection_masks, warp_slots

__all__ = [
    "remote",
    "store_remote",
    "store_async",
    "cluster_sync",
    "arrive_own_shared",
    "gather_selected",
]


@cute.jit
def remote(ptr, rank: Int32):
    """``ptr`` (this CTA's shared memory) mapped into CTA ``rank`` of the cluster."""
    return cute.arch.map_dsmem_ptr(ptr, rank)


@dsl_user_op
def _st_cluster(addr: Int32, value: Uint32, *, loc=None, ip=None) -> None:
    """``st.shared::cluster.u32`` at a 32-bit shared::cluster address (the DSL's generic
    store does not take DSMEM pointers)."""
    operands = [Int32(addr).ir_value(loc=loc, ip=ip), Uint32(value).ir_value(loc=loc, ip=ip)]
    llvm.inline_asm(
        None,
        operands,
        "st.shared::cluster.u32 [$0], $1;",
        "r,r,~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@cute.jit
def store_remote(ptr, rank: Int32, value):
    """Store the 32-bit ``value`` at ``ptr``'s offset in the shared memory of CTA ``rank``."""
    _st_cluster(remote(ptr, rank).toint(), Uint32(value))


@dsl_user_op
def _st_async(addr: Int32, mbar: Int32, words, *, loc=None, ip=None) -> None:
    """``st.async.shared::cluster.mbarrier::complete_tx::bytes`` of 1, 2 or 4 32-bit words at
    a shared::cluster address, completing their bytes on the mbarrier at ``mbar`` (a
    shared::cluster address in the same CTA)."""
    n = len(words)
    vec = {1: "b32", 2: "v2.b32", 4: "v4.b32"}[n]
    regs = ", ".join(f"${i + 1}" for i in range(n))
    data = regs if n == 1 else "{" + regs + "}"
    operands = [Int32(addr).ir_value(loc=loc, ip=ip)]
    operands += [Uint32(w).ir_value(loc=loc, ip=ip) for w in words]
    operands.append(Int32(mbar).ir_value(loc=loc, ip=ip))
    llvm.inline_asm(
        None,
        operands,
        f"st.async.shared::cluster.mbarrier::complete_tx::bytes.{vec} [$0], {data}, [${n + 1}];",
        ",".join(["r"] * (n + 2)) + ",~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@cute.jit
def store_async(ptr, rank: Int32, mbar, words):
    """Store ``words`` (1, 2 or 4 32-bit values, ``ptr`` aligned to their size) at ``ptr``'s
    offset in CTA ``rank``'s shared memory, asynchronously: their bytes complete a
    transaction on that CTA's copy of the mbarrier ``mbar`` (a pointer into this CTA's shared
    memory), whose waiters then see them; no fence and no cluster barrier."""
    _st_async(remote(ptr, rank).toint(), remote(mbar, rank).toint(), words)


@dsl_user_op
def _release_own_shared(*, loc=None, ip=None) -> None:
    """``fence.release.sync_restrict::shared::cta.cluster``: this thread's writes to its own
    CTA's shared memory are ordered, at cluster scope, before its later writes and arrivals
    (PTX ISA 8.6, sm_90; ``MEMBAR.ALL.CTA`` and ``FENCE.VIEW.ASYNC.S`` on sm_90a)."""
    llvm.inline_asm(
        None,
        [],
        "fence.release.sync_restrict::shared::cta.cluster;",
        "~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@cute.jit
def arrive_own_shared():
    """Arrive at the cluster barrier once this thread's writes to its own CTA's shared memory
    (and mbarrier initialisations, after ``mbarrier_init_fence``) are released to the cluster:
    the restricted release then a relaxed arrival (PTX's release pattern), whose waiters'
    acquire then orders their remote writes after those. Unlike :func:`cluster_sync`'s
    arrival it orders nothing else, so global loads in flight are not waited for."""
    _release_own_shared()
    cute.arch.cluster_arrive_relaxed()


@cute.jit
def cluster_sync():
    """Every thread of the cluster arrives (release) and waits (acquire)."""
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()


@cute.jit
def gather_selected(capacity: cutlass.Constexpr, sh, leader: Int32, cnt_word: int, elems):
    """Append a per-thread list of ``(key, pos, selected)`` to CTA ``leader``'s staging
    (``sh.stage_bits`` / ``sh.stage_idx`` at the same offsets there), counting them in its
    ``ctl[cnt_word]``: slots from one remote atomic per warp; every candidate is counted, but
    a lane whose run of slots would end past ``capacity`` writes none of it (the count then
    exceeds the capacity and the leader never reads the staging)."""
    masks, cnt, anyone = selection_masks([e[2] for e in elems])
    if cute.arch.vote_any_sync(anyone != Uint32(0)):
        slot = warp_slots(remote(sh.ctl.iterator + cnt_word, leader), cnt, scope="cluster")
        fits = slot + cnt <= capacity
        for w in cutlass.range_constexpr(len(masks)):
            masks[w] = Uint32(cutlass.select_(fits, masks[w], Uint32(0)))
        bits = remote(sh.stage_bits.iterator, leader).toint()
        idx = remote(sh.stage_idx.iterator, leader).toint()
        for i in cutlass.range_constexpr(len(elems)):
            key, pos, _sel = elems[i]
            if (masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                _st_cluster(bits + slot * 4, Uint32(key))
                _st_cluster(idx + slot * 4, Uint32(pos))
                slot = slot + 1
