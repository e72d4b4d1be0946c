"""The register-resident family: one CTA per row, the whole row held in registers.

``config`` holds the compile key (no CuTe DSL import); ``kernel`` the CuTe DSL kernel. The
family's registry entry is :data:`FAMILY`.
"""

from __future__ import annotations

from ..family import Family
from .config import RegisterConfig

__all__ = ["RegisterConfig", "FAMILY"]


FAMILY = Family(
    name="register",
    config_type=RegisterConfig,
    kernel="gvr_kernels.register.kernel:RegisterTopK",
)
