"""The streaming family: one or several CTAs per row, each row streamed once.

``config`` holds the compile key (no CuTe DSL import); ``kernel`` the CuTe DSL kernel. The
family's registry entry is :data:`FAMILY`.
"""

from __future__ import annotations

from ..family import Family, fits_device
from .config import StreamingConfig

__all__ = ["StreamingConfig", "FAMILY"]


def can_implement(config: StreamingConfig, spec) -> bool:
    """Whether ``spec`` runs the configuration: its shared memory fits (``resident_ctas`` CTAs
    an SM) and a cluster split's cluster is no larger than the device schedules."""
    return fits_device(config, spec) and config.cluster <= spec.max_cluster_size


FAMILY = Family(
    name="streaming",
    config_type=StreamingConfig,
    kernel="gvr_kernels.streaming.kernel:StreamingTopK",
    can_implement=can_implement,
)
