"""The register-resident family: one CTA per row, the whole row held in registers.

``config`` holds the compile key (no CuTe DSL import); ``kernel`` the CuTe DSL kernel. The
family's registry entry is :data:`FAMILY`.
"""

from __future__ import annotations

from ..family import Family
from .config import RegisterConfig

__all__ = ["RegisterConfig", "FAMILY"]


def _can_implement(config: RegisterConfig, spec) -> bool:
    """The CTA's shared memory fits, at its residency."""
    return (
        config.smem_bytes <= spec.smem_per_block
        and config.resident * config.smem_bytes <= spec.smem_per_sm
    )


FAMILY = Family(
    name="register",
    config_type=RegisterConfig,
    kernel="gvr_kernels.register.kernel:RegisterTopK",
    can_implement=_can_implement,
)
