"""What routing and compilation need to know about a GPU: :class:`DeviceSpec`.

Nothing in the kernels or the router hard-codes a device: SM count, shared memory per block,
the largest cluster and the L2 size come from a ``DeviceSpec``, read once per device from the
driver (:func:`spec_from_properties`) or taken from the presets below for compile-only work.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DeviceSpec",
    "H200",
    "B200",
    "PORTABLE_CLUSTER_SIZE",
    "NONPORTABLE_CLUSTER_SIZE",
    "arch_of",
    "spec_from_properties",
]

#: Thread-block cluster size every sm_90 / sm_100 part supports (16 is non-portable).
PORTABLE_CLUSTER_SIZE = 8
#: The non-portable cluster size of Hopper: all 16 CTAs in one GPC (CUDA C++ Programming
#: Guide, "Thread Block Clusters"). One 16 x 512 cluster CTA takes a whole SM, so it needs a
#: GPC with 16 free SMs: the full 132-SM Hopper parts (H100 SXM, H200) have them, checked on an
#: H200 (``benchmarks/results/h200/tune_cluster.log`` run 5); other parts keep the portable 8.
NONPORTABLE_CLUSTER_SIZE = 16
#: SMs of the Hopper parts that schedule a 16-CTA cluster (:data:`NONPORTABLE_CLUSTER_SIZE`).
_FULL_HOPPER_SMS = 132


@dataclass(frozen=True)
class DeviceSpec:
    """What routing needs to know about a GPU.

    Attributes:
        name: device name (informational).
        arch: compile target, ``"sm_90a"`` (Hopper) or ``"sm_100a"`` (Blackwell).
        sm_count: streaming multiprocessors.
        smem_per_block: largest dynamic shared memory one CTA may opt into (bytes).
        smem_per_sm: shared memory per multiprocessor (bytes).
        max_cluster_size: largest thread-block cluster the launch may use.
        l2_bytes: L2 cache size (bytes).
    """

    name: str
    arch: str
    sm_count: int
    smem_per_block: int
    smem_per_sm: int
    max_cluster_size: int = PORTABLE_CLUSTER_SIZE
    l2_bytes: int = 50 * 1024 * 1024


#: NVIDIA H200 SXM (values from the CUDA device attributes of an H200).
H200 = DeviceSpec("NVIDIA H200", "sm_90a", 132, 232448, 233472, 16, 60 * 1024 * 1024)
#: NVIDIA B200 (148 SMs; datasheet values).
B200 = DeviceSpec("NVIDIA B200", "sm_100a", 148, 232448, 233472, 8, 126 * 1024 * 1024)


def arch_of(major: int, minor: int) -> str:
    """The compile target of a compute capability: ``"sm_90a"`` for 9.0, ``"sm_10Xa"`` for 10.X.

    Raises:
        RuntimeError: the device is neither Hopper (9.0) nor Blackwell (10.x); the kernels
            use sm_90 instructions (run such tensors on the CPU instead).
    """
    if (major, minor) == (9, 0) or major == 10:
        return f"sm_{major}{minor}a"
    raise RuntimeError(
        f"GVR kernels need a Hopper (sm_90) or Blackwell (sm_10x) GPU, this device is "
        f"sm_{major}{minor}; move the tensors to the CPU to use the CPU engine"
    )


def spec_from_properties(props) -> DeviceSpec:
    """A :class:`DeviceSpec` from ``torch.cuda.get_device_properties(i)`` (or any object with
    the same attributes: ``name``, ``major``, ``minor``, ``multi_processor_count``,
    ``shared_memory_per_block_optin``, ``shared_memory_per_multiprocessor``,
    ``L2_cache_size``). ``max_cluster_size`` is :data:`NONPORTABLE_CLUSTER_SIZE` on the
    132-SM Hopper parts, else :data:`PORTABLE_CLUSTER_SIZE`."""
    arch = arch_of(int(props.major), int(props.minor))
    sms = int(props.multi_processor_count)
    full_hopper = arch == "sm_90a" and sms >= _FULL_HOPPER_SMS
    return DeviceSpec(
        name=str(props.name),
        arch=arch,
        sm_count=sms,
        smem_per_block=int(props.shared_memory_per_block_optin),
        smem_per_sm=int(props.shared_memory_per_multiprocessor),
        max_cluster_size=NONPORTABLE_CLUSTER_SIZE if full_hopper else PORTABLE_CLUSTER_SIZE,
        l2_bytes=int(props.L2_cache_size),
    )
