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

__all__ = ["Launch", "Dummies", "kernel_view", "padded_copy", "prime"]


@dataclass(frozen=True)
class Dummies:
    """Per-device stand-ins for unused kernel arguments (allocated once, never written).

    Attributes:
        i32: int32 ``[1]`` (unused ``lens_a``/``lens_b``, and ``paths``).
        values: float32 ``[1, 1]`` (``values`` of a configuration without values).
        workspace: uint32 ``[4]``, 16-byte aligned (``workspace`` of a single-CTA launch).
        arg_i32, arg_values, arg_workspace: the same three as the kernel call takes them
            (``CudaRuntime.kernel_arg``: converted once to TVM-FFI tensors, so a hot call
            does not convert them again; the torch tensors themselves elsewhere).
    """

    i32: torch.Tensor
    values: torch.Tensor
    workspace: torch.Tensor
    arg_i32: object
    arg_values: object
    arg_workspace: object

    @classmethod
    def allocate(cls, device, kernel_arg=None) -> Dummies:
        i32 = torch.zeros(1, dtype=torch.int32, device=device)
        values = torch.zeros((1, 1), dtype=torch.float32, device=device)
        workspace = torch.zeros(4, dtype=torch.int32, device=device).view(torch.uint32)
        conv = kernel_arg if kernel_arg is not None else (lambda t: t)
        return cls(i32, values, workspace, conv(i32), conv(values), conv(workspace))


@dataclass(frozen=True)
class Launch:
    """A launch key resolved to a kernel.

    Attributes:
        fn: the TVM-FFI callable, arguments ``gvr_kernels.abi.KernelArgs``.
        route: the static route (configuration, ``parts``, ``workspace_words``, grid).
        arch: the compile target.
        parts: CTAs per row (``route.parts``, kept flat for the hot path).
        workspace_words: uint32 words of zeroed workspace the launch needs (0: none).
        dummies: the device's stand-in tensors.
    """

    fn: Callable
    route: Route
    arch: str
    parts: int
    workspace_words: int
    dummies: Dummies

    @property
    def config(self):
        """The compile configuration (``route.config``)."""
        return self.route.config


def kernel_view(logits: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor | None, str]:
    """A view of ``logits`` the kernels can read in place.

    Returns:
        ``(view, "")`` when the layout works as is (or after re-striding a single row or a
        single column, which costs nothing), else ``(None, reason)`` with ``reason`` one of
        ``"inner stride"``, ``"row stride"``, ``"alignment"``: then only a copy will do
        (:func:`padded_copy`).
    """
    s0, s1 = logits.stride()
    if s1 != 1 and width > 1:
        return None, "inner stride"
    if s0 & 3 and rows > 1:
        return None, "row stride"
    if logits.data_ptr() & 15:
        return None, "alignment"
    if s1 != 1 or s0 & 3:
        # One row (any row stride) or one column (any inner stride): the other stride is never
        # used to address an element, so a multiple of 4 is as good as the original.
        pitch = s0 if rows > 1 else (width + 3) & ~3
        logits = logits.as_strided((rows, width), (pitch, 1))
    if logits.requires_grad:
        logits = logits.detach()
    return logits, ""


def padded_copy(logits: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """Copy ``logits`` into a fresh float32 buffer with a row stride of ``width`` rounded up to
    4 and a 16-byte-aligned base (torch's allocator aligns far beyond that); bfloat16 and
    float16 rows are widened exactly on the way."""
    pitch = (width + 3) & ~3
    buf = torch.empty((rows, pitch), dtype=torch.float32, device=logits.device)
    view = buf[:, :width]
    view.copy_(logits.detach())
    return view


def prime(launch: Launch, device) -> None:
    """Run the launch's kernel once on a one-row input whose every row is short, so the module
    is loaded and its first-launch setup is done before any CUDA-graph capture."""
    cfg = launch.config
    d = launch.dummies
    # k = 1, one column: decode and prefill rows are empty (lengths 0), a full row has n = k.
    logits = torch.zeros((1, 4), dtype=torch.float32, device=device)[:, :1]
    zeros = torch.zeros(1, dtype=torch.int32, device=device)
    out = torch.empty((1, 1), dtype=torch.int32, device=device)
    values = torch.empty((1, 1), dtype=torch.float32, device=device) if cfg.with_values else None
    args = KernelArgs(
        logits=logits,
        lens_a=zeros,
        lens_b=zeros,
        out=out,
        values=d.values if values is None else values,
        workspace=d.workspace,
        paths=d.i32,
        k=1,
        next_n=1,
        cr_shift=0,
        parts=1,
    )
    launch.fn(*args)
