"""The streaming family: one or several CTAs per row, each row streamed once.

``config`` holds the compile key (no CuTe DSL import); ``kernel`` the CuTe DSL kernel. The
family's registry entry is :data:`FAMILY`.
"""

from __future__ import annotations

from ..family import Family
from .config import StreamingConfig

__all__ = ["StreamingConfig", "FAMILY"]


FAMILY = Family(
    name="streaming",
    config_type=StreamingConfig,
    kernel="gvr_kernels.streaming.kernel:StreamingTopK",
)
