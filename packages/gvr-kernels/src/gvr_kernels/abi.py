"""The kernel launch interface shared by every family: argument order, names and fake tensors.

Every compiled GVR kernel takes the same arguments, in the order of :class:`KernelArgs`; a
family ignores the ones it does not use (the dispatcher passes small per-device dummies for
those). Call sites build a ``KernelArgs`` and call ``fn(*args)``; compilation builds the fake
form with :func:`fake_kernel_args`. No call site spells the order itself.

The stream is not an argument: kernels compile with the TVM-FFI environment stream, so the
caller's current torch stream (a capturing one included) is used.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["KernelArgs", "fake_kernel_args"]


class KernelArgs(NamedTuple):
    """Arguments of a compiled GVR kernel, in launch order.

    Attributes:
        logits: fp32 ``(rows, width)``, strides ``(row_stride, 1)``, ``row_stride % 4 == 0``,
            16-byte-aligned base; for a configuration of a 16-bit ``dtype``, bf16 / fp16 with
            ``row_stride % 8 == 0``.
        lens_a: int32; decode: ``kv_lens (rows // next_n,)``; prefill: ``row_starts (rows,)``;
            full: unused.
        lens_b: int32; prefill: ``row_ends (rows,)``; otherwise unused.
        out: int32 ``(rows, k)``: window-local indices, ``-1`` padding.
        values: ``(rows, k)`` in the logits dtype when the configuration writes values (else
            unused).
        workspace: uint32 words of zeroed workspace when the route needs one (else unused).
        paths: int32 ``(rows,)`` per-row path codes when the configuration records them.
        k: top-K size.
        next_n: decode rows per request.
        cr_shift: ``log2(compress_ratio)``.
        parts: CTAs per row (1 unless the route splits rows); for a ragged split
            (``StreamingConfig.ragged``) the launch's CTAs beyond one per row.
        block_max: float32 ``(rows, >= ceil(width / 32))`` with unit inner stride: each
            entry at least every score of its 32 columns of the logits row
            (``gvr_reference.blockskip``), read by block-skip configurations (else unused).
    """

    logits: Any
    lens_a: Any
    lens_b: Any
    out: Any
    values: Any
    workspace: Any
    paths: Any
    k: int
    next_n: int
    cr_shift: int
    parts: int
    block_max: Any


def fake_kernel_args(dtype: str = "float32") -> tuple:
    """The fake tensors and scalars ``cute.compile`` traces a kernel with (symbolic extents,
    row-major strides, 16-byte alignment where the kernels rely on it), then the TVM-FFI
    environment stream. Needs the CuTe DSL, no GPU.

    ``dtype``: the logits format (``"float32"``, ``"bfloat16"``, ``"float16"``); 16-bit logits
    have a row stride that is a multiple of 8 elements, and their values tensor has the same
    format."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Uint32

    scores = {"float32": Float32, "bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
    score = scores[dtype]
    rows = cute.sym_int()
    width = cute.sym_int()
    row_stride = cute.sym_int64(divisibility=16 // (score.width // 8))
    kdim = cute.sym_int()
    tensors = KernelArgs(
        logits=cute.runtime.make_fake_tensor(
            score, (rows, width), (row_stride, 1), assumed_align=16
        ),
        lens_a=cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),)),
        lens_b=cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),)),
        out=cute.runtime.make_fake_compact_tensor(Int32, (rows, kdim), stride_order=(1, 0)),
        values=cute.runtime.make_fake_compact_tensor(
            score, (cute.sym_int(), cute.sym_int()), stride_order=(1, 0)
        ),
        workspace=cute.runtime.make_fake_compact_tensor(
            Uint32, (cute.sym_int(),), assumed_align=16
        ),
        paths=cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),)),
        k=Int32(1),
        next_n=Int32(1),
        cr_shift=Int32(0),
        parts=Int32(1),
        block_max=cute.runtime.make_fake_tensor(
            Float32, (cute.sym_int(), cute.sym_int()), (cute.sym_int64(), 1), assumed_align=4
        ),
    )
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return (*tensors, stream)
