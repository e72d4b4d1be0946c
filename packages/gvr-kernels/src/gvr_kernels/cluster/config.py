"""Compile key of the cluster-register family: a frozen dataclass with a readable name.

A thread-block cluster of ``cluster`` CTAs holds one row in registers (each CTA
``threads`` threads x ``vecs`` 16-byte vectors of a contiguous chunk, the last CTA also the
0-3 score tail); the sample and the survivors travel through distributed shared memory
(see ``gvr_reference.cluster_model`` for the per-row decisions and their CPU model). The
shared-memory layout is written here once (:meth:`ClusterConfig.shared_layout`). This
module imports no CuTe DSL.
"""

from __future__ import annotations

from dataclasses import dataclass

from gvr_reference.cluster_model import ClusterParams
from gvr_reference.keys import KeyFormat, key_format
from gvr_reference.register_model import BRACKET_BINS

from ..family import layout_bytes

__all__ = ["ClusterConfig", "MODES", "HIST_BINS", "BRACKET_BINS", "CTL_WORDS", "SMEM_ALIGN"]

MODES = ("decode", "prefill", "full")
#: Radix-level histogram bins.
HIST_BINS = 256
CTL_WORDS = 20
#: Byte alignment of every shared-memory array.
SMEM_ALIGN = 16


@dataclass(frozen=True)
class ClusterConfig:
    """Compile key of the cluster-register family (one cluster per row, the row in registers).

    Attributes:
        mode: where row windows come from: ``"decode"``, ``"prefill"`` or ``"full"`` (as in
            ``StreamingConfig``).
        cluster: CTAs per row, one thread-block cluster (2, 4, 8, or the non-portable 16).
        threads: CTA size (512 or 1024).
        vecs: 16-byte vectors each thread holds (1 to 8); a row of up to
            ``vec * cluster * threads * vecs`` scores fits (``vec``: 4 float32 or 8 16-bit
            scores a vector).
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: the leader CTA's staging entries (order key and position, 8 bytes each),
            at least 2048 (the largest K); more survivors than this take the whole-row
            selection.
        with_values: also write the values of the selection in the logits format (its most
            negative finite value beside ``-1``).
        deterministic: the K-th value's tie class yields its smallest indices.
        bracket: rows take the bracket histogram path where it applies (the bracket's ends
            and the ``BRACKET_BINS`` bins' counts agreed through DSMEM, no sample exchange;
            ``gvr_reference.cluster_model``); False: every row takes the sampled path.
        record_paths: write each row's path code (``gvr_reference.model.Path``) to a debug
            tensor.
        dtype: the logits format, ``"float32"``, ``"bfloat16"`` or ``"float16"`` (16-bit rows
            as in ``RegisterConfig``: raw bits held, the bracket on their float32 widening,
            the sample and every radix selection in the 16-bit key space).
        bit_walk: the bracket path's emission walks each thread's set bits (one store a
            key above the crossing bin, the crossing bin's keys staged one by one:
            ``device.bracket.write_positions``) where False gives every held slot a
            predicated store and a branch; the same slots in the same order. Launches with
            values keep the predicated stores above the crossing bin.
    """

    mode: str = "decode"
    cluster: int = 4
    threads: int = 1024
    vecs: int = 4
    aim_mult: int = 2
    capacity: int = 16384
    with_values: bool = False
    deterministic: bool = False
    bracket: bool = False
    record_paths: bool = False
    dtype: str = "float32"
    bit_walk: bool = False

    #: The family this configuration belongs to (``gvr_kernels.registry``).
    family = "cluster"
    #: 16-byte vectors per thread per tile when a row is read from global memory.
    unroll = 4
    #: The staging buffer holds order keys (the selected values are read back from memory).
    stages_keys = True
    #: One CTA per SM (each CTA of the cluster takes an SM's registers at 1024 threads).
    resident = 1

    @property
    def key_format(self) -> KeyFormat:
        """The order-key format of the logits (``gvr_reference.keys.KeyFormat``)."""
        return key_format(self.dtype)

    @property
    def early_loads(self) -> bool:
        """Whether decode rows issue their vector loads before their ``kv_lens`` entry
        arrives (as ``RegisterConfig.early_loads``): decode configurations of 512-thread CTAs
        (128 registers a thread); at 64 the hoisted loads cost stack."""
        return self.mode == "decode" and self.threads <= 512

    @property
    def restricted_start(self) -> bool:
        """Whether the start barrier releases only the CTA's own shared memory
        (``device.cluster.arrive_own_shared``), the row's loads left in flight across the
        arrival, rather than with a cluster-scope release (``MEMBAR.ALL.GPU`` on sm_90a, which
        waits for them): every shape but 1024-thread CTAs with deterministic ties, whose code
        then spills at 64 registers on sm_90a (8 bytes of stack, the compile audit)."""
        return not (self.threads == 1024 and self.deterministic)

    def __post_init__(self) -> None:
        key_format(self.dtype)  # validates the name
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.threads not in (512, 1024):
            raise ValueError(f"threads must be 512 or 1024, got {self.threads}")
        if not 1 <= self.vecs <= 8:
            raise ValueError(f"vecs must be in [1, 8], got {self.vecs}")
        if self.capacity < max(self.threads, self.max_k) or self.capacity % 4:
            # At least max_k: an overflowing staging (more than capacity keys at or above
            # the rung) must mean at least k of them, which its fallback relies on.
            raise ValueError(
                f"capacity must be a multiple of 4 and >= max(threads, {self.max_k}), "
                f"got {self.capacity}"
            )
        _ = self.params  # validates cluster and aim_mult

    @property
    def params(self) -> ClusterParams:
        """The per-row decision parameters (``gvr_reference.cluster_model``)."""
        return ClusterParams(
            cluster=self.cluster,
            threads=self.threads,
            vecs=self.vecs,
            aim_mult=self.aim_mult,
            capacity=self.capacity,
            bracket=self.bracket,
            dtype=self.dtype,
        )

    @property
    def max_n(self) -> int:
        """Longest row held in the cluster (longer rows are still exact, read from memory)."""
        return self.params.max_n

    @property
    def max_k(self) -> int:
        """Largest K this configuration serves."""
        return 2048

    @property
    def sample_slots(self) -> int:
        """Sample keys of a row, held by every CTA of its cluster."""
        return self.cluster * self.threads

    def shared_layout(self) -> tuple[tuple[str, str, int], ...]:
        """Each CTA's shared-memory arrays in allocation order, ``(name, dtype, count)``
        (the staging is used by the leader only; every CTA of a kernel has one layout). A
        bracket configuration adds its local histogram (``bhist``), the copies of the slice of
        bins it owns from every CTA (``mcopy``, ``cluster`` runs of ``slice_bins``), the
        merged slice for the crossing search (``xhist``), every warp's count of the cluster
        (``sparts``) and its reductions (``cstat``, four words each), the crossing bin from
        its owner (``xb``), four mbarriers (``mbar``) and a scratch (``wsum``, just before
        ``bhist``: the counting pass's words for scores below the bracket)."""
        arrays = (
            ("hist", "i32", HIST_BINS),
            ("ctl", "i32", CTL_WORDS),
            ("sample", "u32", self.sample_slots),
            ("stage_bits", "u32", self.capacity),
            ("stage_idx", "i32", self.capacity),
        )
        if self.bracket:
            warps = self.threads // 32
            arrays += (
                # wsum, 32 words, directly before bhist: device.bracket.count_bracket counts
                # the scores below the bracket there
                ("wsum", "i32", 32),
                ("bhist", "i32", BRACKET_BINS),
                ("mcopy", "i32", BRACKET_BINS),
                ("xhist", "i32", max(self.threads, self.slice_bins)),
                ("sparts", "i32", self.cluster * warps),
                ("cstat", "u32", 4 * self.cluster * warps),
                ("xb", "i32", 4),
                ("mbar", "u32", 8),
            )
        return arrays

    @property
    def slice_bins(self) -> int:
        """Bracket bins each CTA of the cluster owns in the merged histogram."""
        return BRACKET_BINS // self.cluster

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA (bytes): the arrays of :meth:`shared_layout`."""
        return layout_bytes(self.shared_layout(), SMEM_ALIGN)

    @property
    def resident_ctas(self) -> int:
        """CTAs per SM the configuration is built for."""
        return self.resident

    @property
    def workspace_words_per_row(self) -> int:
        """No global workspace."""
        return 0

    @property
    def split(self) -> bool:
        """Not a split row: the cluster's CTAs meet in distributed shared memory."""
        return False

    @property
    def ctas_per_row(self) -> int:
        """CTAs a row takes (the launch grid is ``rows * ctas_per_row``)."""
        return self.cluster

    @property
    def name(self) -> str:
        """A short readable name, unique per configuration."""
        parts = [
            "cluster",
            self.mode,
            f"x{self.cluster}",
            f"t{self.threads}",
            f"v{self.vecs}",
            f"a{self.aim_mult}",
            f"c{self.capacity}",
        ]
        if self.with_values:
            parts.append("values")
        if self.deterministic:
            parts.append("det")
        if self.bracket:
            parts.append("bracket")
        if self.record_paths:
            parts.append("paths")
        if self.dtype != "float32":
            parts.append({"bfloat16": "bf16", "float16": "f16"}[self.dtype])
        if self.bit_walk:
            parts.append("walk")
        return "_".join(parts)
