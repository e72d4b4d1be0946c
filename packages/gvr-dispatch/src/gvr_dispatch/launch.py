"""A resolved launch and how the logits are presented to it.

:class:`Launch` is everything an eager call needs after its launch key is known: the compiled
callable, the route (CTAs per row, workspace size) and the device's dummy tensors for the
arguments a configuration does not use. The dispatcher keeps one per launch key, so a warm call
is validation, one dict lookup and the TVM-FFI call.

:func:`kernel_view` gives the kernels a logits view they can address: the tensor itself when
its layout allows, a re-strided view of a single row (whose row stride is irrelevant), or
``None`` when only a copy into an aligned, padded buffer will do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from gvr_kernels.abi import KernelArgs
from gvr_kernels.routing import Route

__all__ = ["Launch", "Dummies", "kernel_view", "padded_copy", "prime", "VEC"]


#: Scores per 16-byte vector by logits dtype: a kernel row stride is a multiple of it.
VEC = {torch.float32: 4, torch.bfloat16: 8, torch.float16: 8}


@dataclass(frozen=True)
class Dummies:
    """Per-device stand-ins for unused kernel arguments (allocated once, never written).

    Attributes:
        i32: int32 ``[1]`` (unused ``lens_a``/``lens_b``, and ``paths``).
        values: float32 ``[1, 1]`` (``values`` of a configuration without values).
        values16: ``{dtype: [1, 1]}`` the same for bfloat16 and float16 configurations.
        workspace: uint32 ``[4]``, 16-byte aligned (``workspace`` of a single-CTA launch).
        arg_i32, arg_values, arg_workspace: the same three as the kernel call takes them
            (``CudaRuntime.kernel_arg``: converted once to TVM-FFI tensors, so a hot call
            does not convert them again; the torch tensors themselves elsewhere).
        arg_values16: ``values16`` as the kernel call takes them.
    """

    i32: torch.Tensor
    values: torch.Tensor
    workspace: torch.Tensor
    arg_i32: object
    arg_values: object
    arg_workspace: object
    values16: dict
    arg_values16: dict

    @classmethod
    def allocate(cls, device, kernel_arg=None) -> Dummies:
        i32 = torch.zeros(1, dtype=torch.int32, device=device)
        values = torch.zeros((1, 1), dtype=torch.float32, device=device)
        workspace = torch.zeros(4, dtype=torch.int32, device=device).view(torch.uint32)
        conv = kernel_arg if kernel_arg is not None else (lambda t: t)
        v16 = {dt: torch.zeros((1, 1), dtype=dt, device=device) for dt in VEC if dt.itemsize == 2}
        return cls(
            i32, values, workspace, conv(i32), conv(values), conv(workspace), v16,
            {dt: conv(t) for dt, t in v16.items()},
        )  # fmt: skip

    def values_of(self, dtype: torch.dtype) -> torch.Tensor:
        """The unused-``values`` stand-in of a ``dtype`` configuration."""
        return self.values if dtype is torch.float32 else self.values16[dtype]

    def arg_values_of(self, dtype: torch.dtype):
        """:meth:`values_of` as the kernel call takes it."""
        return self.arg_values if dtype is torch.float32 else self.arg_values16[dtype]


@dataclass(frozen=True)
class Launch:
    """A launch key resolved to a kernel.

    Attributes:
        fn: the TVM-FFI callable, arguments ``gvr_kernels.abi.KernelArgs``.
        route: the static route (configuration, ``parts``, ``workspace_words``, grid).
        arch: the compile target.
        parts: the kernels' ``parts`` argument (``route.parts``, kept flat for the hot path).
        workspace_words: uint32 words of zeroed workspace the launch needs (0: none).
        dummies: the device's stand-in tensors.
        dummy_values: the stand-in ``values`` argument of the launch's logits dtype, as the
            kernel call takes it.
    """

    fn: Callable
    route: Route
    arch: str
    parts: int
    workspace_words: int
    dummies: Dummies
    dummy_values: object = None

    @property
    def config(self):
        """The compile configuration (``route.config``)."""
        return self.route.config


def kernel_view(logits: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor | None, str]:
    """A view of ``logits`` the kernels can read in place (a row stride that is a multiple of
    :data:`VEC` elements, unit inner stride, a 16-byte-aligned base).

    Returns:
        ``(view, "")`` when the layout works as is (or after re-striding a single row or a
        single column, which costs nothing), else ``(None, reason)`` with ``reason`` one of
        ``"inner stride"``, ``"row stride"``, ``"alignment"``: then only a copy will do
        (:func:`padded_copy`).
    """
    s0, s1 = logits.stride()
    vmask = VEC[logits.dtype] - 1
    if s1 != 1 and width > 1:
        return None, "inner stride"
    if s0 & vmask and rows > 1:
        return None, "row stride"
    if logits.data_ptr() & 15:
        return None, "alignment"
    if s1 != 1 or s0 & vmask:
        # One row (any row stride) or one column (any inner stride): the other stride is never
        # used to address an element, so a multiple of the vector width is as good.
        pitch = s0 if rows > 1 else (width + vmask) & ~vmask
        logits = logits.as_strided((rows, width), (pitch, 1))
    if logits.requires_grad:
        logits = logits.detach()
    return logits, ""


def padded_copy(
    logits: torch.Tensor, rows: int, width: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Copy ``logits`` into a fresh ``dtype`` buffer with a row stride of ``width`` rounded up
    to :data:`VEC` elements and a 16-byte-aligned base (torch's allocator aligns far beyond
    that); with the default float32, bfloat16 and float16 rows are widened exactly on the
    way."""
    vmask = VEC[dtype] - 1
    pitch = (width + vmask) & ~vmask
    buf = torch.empty((rows, pitch), dtype=dtype, device=logits.device)
    view = buf[:, :width]
    view.copy_(logits.detach())
    return view


def prime(launch: Launch, device) -> None:
    """Run the launch's kernel once on a one-row input whose every row is short, so the module
    is loaded and its first-launch setup is done before any CUDA-graph capture."""
    cfg = launch.config
    d = launch.dummies
    dtype = getattr(torch, getattr(cfg, "dtype", "float32"))
    # k = 1, one column: decode and prefill rows are empty (lengths 0), a full row has n = k.
    logits = torch.zeros((1, 8), dtype=dtype, device=device)[:, :1]
    zeros = torch.zeros(1, dtype=torch.int32, device=device)
    out = torch.empty((1, 1), dtype=torch.int32, device=device)
    values = torch.empty((1, 1), dtype=dtype, device=device) if cfg.with_values else None
    args = KernelArgs(
        logits=logits,
        lens_a=zeros,
        lens_b=zeros,
        out=out,
        values=d.values_of(dtype) if values is None else values,
        workspace=d.workspace,
        paths=d.i32,
        k=1,
        next_n=1,
        cr_shift=0,
        parts=1,
        block_max=d.values,
    )
    launch.fn(*args)
