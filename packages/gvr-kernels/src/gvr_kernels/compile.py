"""Tensor-free compilation of the kernel families.

Kernels compile from fake tensors whose dynamic extents are symbolic, with the TVM-FFI
environment stream (the caller's current torch stream, a capturing one included), so

- compiling needs no GPU (set ``CUTE_DSL_ARCH=sm_90a`` or ``sm_100a`` on a CPU machine),
- the compiled callable takes torch tensors and Python ints directly, with no per-call
  ``from_dlpack`` and no stream argument.

The argument order of every compiled streaming kernel:
``(logits, lens_a, lens_b, out, values, workspace, paths, k, next_n, cr_shift, parts)``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import cutlass.cute as cute
from cutlass import Float32, Int32, Uint32

from .config import StreamingConfig
from .streaming import StreamingTopK

__all__ = ["SUPPORTED_ARCHS", "compile_streaming", "target_arch"]

SUPPORTED_ARCHS = ("sm_90a", "sm_100a")


@contextlib.contextmanager
def target_arch(arch: str | None) -> Iterator[None]:
    """Compile for ``arch`` (e.g. ``"sm_90a"``) inside the block; ``None`` keeps the current
    target (the visible GPU, or ``CUTE_DSL_ARCH``)."""
    if arch is None:
        yield
        return
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"arch must be one of {SUPPORTED_ARCHS}, got {arch!r}")
    old = os.environ.get("CUTE_DSL_ARCH")
    os.environ["CUTE_DSL_ARCH"] = arch
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUTE_DSL_ARCH", None)
        else:
            os.environ["CUTE_DSL_ARCH"] = old


def _fake_args():
    rows = cute.sym_int()
    width = cute.sym_int()
    row_stride = cute.sym_int64(divisibility=4)
    kdim = cute.sym_int()
    logits = cute.runtime.make_fake_tensor(
        Float32, (rows, width), (row_stride, 1), assumed_align=16
    )
    lens_a = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
    lens_b = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
    out = cute.runtime.make_fake_compact_tensor(Int32, (rows, kdim), stride_order=(1, 0))
    values = cute.runtime.make_fake_compact_tensor(
        Float32, (cute.sym_int(), cute.sym_int()), stride_order=(1, 0)
    )
    workspace = cute.runtime.make_fake_compact_tensor(Uint32, (cute.sym_int(),), assumed_align=16)
    paths = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
    return logits, lens_a, lens_b, out, values, workspace, paths


def compile_streaming(config: StreamingConfig, arch: str | None = None):
    """Compile one streaming configuration.

    Args:
        config: the compile key.
        arch: ``"sm_90a"`` / ``"sm_100a"`` to cross-compile (no GPU needed), or ``None`` for
            the current target.

    Returns:
        The compiled TVM-FFI callable (``cute.compile`` result); it also supports
        ``export_to_c`` for ahead-of-time use.
    """
    with target_arch(arch):
        kernel = StreamingTopK(config)
        args = _fake_args()
        scalars = (Int32(1), Int32(1), Int32(0), Int32(1))
        stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
        return cute.compile(kernel, *args, *scalars, stream, options="--enable-tvm-ffi")
