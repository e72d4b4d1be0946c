"""The cluster-register family: one thread-block cluster per row, the row in the registers of
its CTAs, the sample and the survivors exchanged through distributed shared memory.

``config`` holds the compile key (no CuTe DSL import); ``kernel`` the CuTe DSL kernel. The
family's registry entry is :data:`FAMILY`.
"""

from __future__ import annotations

from ..family import Family, fits_device
from .config import ClusterConfig

__all__ = ["ClusterConfig", "FAMILY"]


def can_implement(config: ClusterConfig, spec) -> bool:
    """Whether ``spec`` runs the configuration: its shared memory fits a CTA and the cluster
    is no larger than the device's portable cluster size."""
    return fits_device(config, spec) and config.cluster <= spec.max_cluster_size


FAMILY = Family(
    name="cluster",
    config_type=ClusterConfig,
    kernel="gvr_kernels.cluster.kernel:ClusterTopK",
    can_implement=can_implement,
)
