"""What a kernel family declares to the registry (``gvr_kernels.registry``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from .abi import fake_kernel_args

__all__ = ["Family", "layout_bytes", "fits_device", "STAMP_WORDS"]

#: Words of the debug ``paths`` tensor each CTA of a ``stamp_phases`` launch owns (every family
#: that stamps its phases: ``device.shared.stamp_phase``).
STAMP_WORDS = 16


def layout_bytes(layout, align: int) -> int:
    """Bytes of a shared-memory layout of ``(name, dtype, count)`` arrays of 4-byte elements
    allocated in order, each aligned to ``align`` bytes (what ``device.shared.allocate_shared``
    allocates for it)."""
    total = 0
    for _, _, count in layout:
        total = -(-total // align) * align + 4 * count
    return total


def fits_device(config, spec) -> bool:
    """Whether a configuration's shared memory fits one CTA of ``spec`` and its residency
    (``resident_ctas`` CTAs) fits one SM."""
    return (
        config.smem_bytes <= spec.smem_per_block
        and config.resident_ctas * config.smem_bytes <= spec.smem_per_sm
    )


@dataclass(frozen=True)
class Family:
    """A kernel family's registry entry.

    Attributes:
        name: the family name (``config.family`` of its configurations).
        config_type: its compile key, a frozen dataclass with a readable ``name``; importing
            its module must not import the CuTe DSL.
        kernel: ``"module:Class"`` of the kernel class (a class built from a config, with a
            ``@cute.jit __call__`` taking :class:`~gvr_kernels.abi.KernelArgs` and the stream);
            imported only to compile.
        can_implement: ``can_implement(config, spec) -> bool``: whether the configuration fits
            a device (:class:`~gvr_kernels.spec.DeviceSpec`); default :func:`fits_device`.
        fake_args: ``fake_args(config) -> tuple``: the arguments ``cute.compile`` traces the
            kernel with (default: the common ABI's :func:`~gvr_kernels.abi.fake_kernel_args`
            for the configuration's logits ``dtype``).
    """

    name: str
    config_type: type
    kernel: str
    can_implement: Callable = fits_device
    fake_args: Callable = field(default=lambda config: fake_kernel_args(config.dtype))

    @property
    def kernel_module(self) -> str:
        """Import name of the module holding the kernel class."""
        return self.kernel.split(":")[0]

    def kernel_class(self) -> type:
        """Import and return the kernel class (imports the CuTe DSL)."""
        module, attr = self.kernel.split(":")
        return getattr(importlib.import_module(module), attr)
