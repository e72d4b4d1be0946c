"""Routing math: which kernel configuration and grid serve a call, as pure functions.

Two time scales, as the decode loop under CUDA graphs needs them:

- :func:`route_static` decides what may be frozen when a graph is captured: the family, its
  compile configuration, the grid (CTAs per row), the workspace. It depends only on the
  device (:class:`DeviceSpec`) and capture-stable quantities: row count, the length envelope
  ``n_env`` (the longest row a launch may see), K and the call mode.
- :func:`route_dynamic` is what each row recomputes in-kernel from its own length: the ladder
  (:func:`gvr_reference.ladder.row_plan`). It is exposed for analysis and tests.

Nothing here hard-codes a device: SM count, shared memory per block and L2 come from the
``DeviceSpec`` the dispatcher reads once per device from the driver. The constants below
(``SPLIT_MIN_N``, ``MIN_PART_ELEMS``, ``SMALL_ROW_N``) are tuning choices measured on an H200
(``tools/device_streaming.py --tune``; the table is in ``benchmarks/results/h200/tune.log``):

- one 1024-thread CTA per row beats a split row up to ``n_env`` = 16384 at every batch, and
  a split row wins from 65536 on while ``rows * parts`` fits the SMs;
- past about 16 CTAs per row the split gains little; 8192 scores per CTA is on the plateau;
- 512-thread CTAs (two per SM) win for rows of 4096 at any batch and once ``rows > SMs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ladder import MAX_ROW_LENGTH, LadderParams, RowPlan, row_plan

__all__ = [
    "DeviceSpec",
    "arch_of",
    "spec_from_properties",
    "StaticRoute",
    "H200",
    "B200",
    "route_static",
    "route_dynamic",
    "SPLIT_MIN_N",
    "MIN_PART_ELEMS",
    "MAX_K",
    "SMALL_ROW_N",
]

#: Rows at least this long may be cut across several CTAs when rows are few.
SPLIT_MIN_N = 32768
#: A split row gives each CTA at least this many scores.
MIN_PART_ELEMS = 8192
#: Envelopes at most this long run on 512-thread CTAs (two per SM) at any batch.
SMALL_ROW_N = 4096
#: Largest K the kernels serve.
MAX_K = 2048

_HIST_CTL_WORDS = 256 + 16
_WS_HEADER_WORDS = 4


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
    max_cluster_size: int = 8
    l2_bytes: int = 50 * 1024 * 1024


#: NVIDIA H200 SXM (values from the CUDA device attributes of the device used here).
H200 = DeviceSpec("NVIDIA H200", "sm_90a", 132, 232448, 233472, 8, 60 * 1024 * 1024)
#: NVIDIA B200 (148 SMs; datasheet values).
B200 = DeviceSpec("NVIDIA B200", "sm_100a", 148, 232448, 233472, 8, 126 * 1024 * 1024)


#: Thread-block cluster size every sm_90 / sm_100 part supports (16 is non-portable).
PORTABLE_CLUSTER_SIZE = 8


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
    ``L2_cache_size``)."""
    return DeviceSpec(
        name=str(props.name),
        arch=arch_of(int(props.major), int(props.minor)),
        sm_count=int(props.multi_processor_count),
        smem_per_block=int(props.shared_memory_per_block_optin),
        smem_per_sm=int(props.shared_memory_per_multiprocessor),
        max_cluster_size=PORTABLE_CLUSTER_SIZE,
        l2_bytes=int(props.L2_cache_size),
    )


@dataclass(frozen=True)
class StaticRoute:
    """The capture-stable half of a route.

    Attributes:
        family: kernel family (``"streaming"``).
        parts: CTAs per row (``> 1`` only for split configurations).
        config: compile-configuration fields (``gvr_kernels.config.StreamingConfig`` keywords,
            without the call-mode fields ``mode``/``with_values``/``deterministic``).
        grid: CTAs in the launch (``rows * parts``).
        workspace_words: uint32 words of zeroed workspace the launch needs (0: none).
        smem_bytes: dynamic shared memory per CTA.
        n_env: the envelope this route was made for.
    """

    family: str
    parts: int
    config: dict = field(hash=False, compare=False)
    grid: int
    workspace_words: int
    smem_bytes: int
    n_env: int

    @property
    def key(self) -> tuple:
        """A hashable identity of the compiled kernel plus the grid."""
        return (self.family, self.parts, tuple(sorted(self.config.items())), self.grid)

    @property
    def ladder(self) -> LadderParams:
        """The ladder parameters of this route's configuration."""
        c = self.config
        return LadderParams(
            capacity=c["capacity"],
            sample_max=c["sample_max"],
            aim_mult=c["aim_mult"],
        )


def _smem_bytes(capacity: int, sample_max: int) -> int:
    return 4 * (_HIST_CTL_WORDS + sample_max) + 8 * capacity


def route_static(spec: DeviceSpec, *, rows: int, n_env: int, k: int) -> StaticRoute:
    """Choose the configuration and grid for a launch.

    Args:
        spec: the device.
        rows: rows in the launch (``>= 1``).
        n_env: longest row length the launch may see, in scores (compressed units);
            ``1 <= n_env < 2**26``.
        k: top-K size, ``1 <= k <= 2048``.

    Returns:
        The :class:`StaticRoute`. It is a pure function of its arguments, so a launch key made
        from them is stable under CUDA-graph capture.

    Raises:
        ValueError: an argument is out of range, naming it.
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if not 1 <= n_env < MAX_ROW_LENGTH:
        raise ValueError(f"n_env must be in [1, {MAX_ROW_LENGTH}), got {n_env}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in [1, {MAX_K}], got {k}")
    s = spec.sm_count
    parts = 1
    if rows <= s // 2 and n_env >= SPLIT_MIN_N:
        parts = max(1, min(s // rows, -(-n_env // MIN_PART_ELEMS)))
    if parts > 1:
        config = dict(
            threads=1024, capacity=16384, split=True, unroll=4, aim_mult=3, sample_max=8192
        )
    elif rows <= s and n_env > SMALL_ROW_N:
        config = dict(
            threads=1024, capacity=16384, split=False, unroll=4, aim_mult=2, sample_max=8192
        )
    else:
        config = dict(
            threads=512, capacity=8192, split=False, unroll=4, aim_mult=2, sample_max=8192
        )
    smem = _smem_bytes(config["capacity"], config["sample_max"])
    if smem > spec.smem_per_block:
        # Smaller parts (consumer GPUs): halve the staging until it fits.
        while smem > spec.smem_per_block and config["capacity"] > 4 * k * config["aim_mult"]:
            config["capacity"] //= 2
            smem = _smem_bytes(config["capacity"], config["sample_max"])
        if smem > spec.smem_per_block:
            raise ValueError(
                f"k={k} needs more shared memory per block than {spec.name} offers "
                f"({spec.smem_per_block} bytes)"
            )
    ws = rows * (_WS_HEADER_WORDS + 2 * config["capacity"]) if parts > 1 else 0
    return StaticRoute(
        family="streaming",
        parts=parts,
        config=config,
        grid=rows * parts,
        workspace_words=ws,
        smem_bytes=smem,
        n_env=n_env,
    )


def route_dynamic(route: StaticRoute, n: int, k: int, lead: int = 0) -> RowPlan:
    """The per-row half: what a row of length ``n`` decides in-kernel.

    Args:
        route: the static route of the launch.
        n: the row's valid length (clamped by the kernel to the physical width).
        k: top-K size.
        lead: window start modulo 4 (prefill rows).

    Returns:
        The row's :class:`gvr_reference.ladder.RowPlan`.
    """
    return row_plan(n, k, lead, route.ladder)
