"""Compile key of the register-resident family: a frozen dataclass with a readable name.

A CTA holds a whole row in registers (``threads`` threads x ``vecs`` 16-byte vectors of 4
float32 or 8 bfloat16 / float16 scores, plus a tail of fewer than a vector's scores): one
read, no staging, no capacity overflow by construction (see ``gvr_reference.register_model``
for the per-row decisions and their CPU model). The shared-memory layout is written here once
(:meth:`RegisterConfig.shared_layout`). This module imports no CuTe DSL.
"""

from __future__ import annotations

from dataclasses import dataclass

from gvr_reference.keys import KeyFormat, key_format
from gvr_reference.register_model import BRACKET_BINS, RegisterParams

from ..family import layout_bytes

__all__ = [
    "RegisterConfig",
    "MODES",
    "HIST_BINS",
    "CTL_WORDS",
    "SMEM_ALIGN",
    "STAMPS",
    "STAGED_UNSAMPLED_SLOTS",
]

MODES = ("decode", "prefill", "full")
#: Histogram words: the bracket histogram's bins (the radix levels use the first 256).
HIST_BINS = BRACKET_BINS
CTL_WORDS = 20
#: Byte alignment of every shared-memory array.
SMEM_ALIGN = 16
#: Register slots a thread (scores held) from which an unsampled row (at most ``2 aim``
#: scores) is staged before its selection, so each radix level walks the few staged keys a
#: thread instead of every slot: 1024 x 8 CTAs (32 slots) ran the real rows' b = 8,
#: n = 32,768, K = 2048 batch in 21.1 us when its 8,192-score row was unsampled, against
#: 13.6 us for a batch whose rows all staged (``bench_real_early_loads.json``, one run);
#: the staged unsampled row itself is not yet measured.
STAGED_UNSAMPLED_SLOTS = 16
#: The phase boundaries a ``stamp_phases`` kernel stamps, in the order of their words (of
#: ``family.STAMP_WORDS`` a CTA): kernel entry; the row loaded (the held scores' bits or keys
#: and the thread's reductions computed, which waits for the loads); the CTA's reductions
#: (one barrier); on the bracket path the counting pass, the crossing search, and the keys
#: above the crossing bin written with the crossing bin's written or staged (``stage``: after
#: the staging's barrier); and the row finished (the crossing bin's selection). The stamped
#: 1024 x 4 build keeps 8 bytes of stack at 64 registers, with or without ``stage`` (sm_90a);
#: an earlier stamp right after the emission of the keys above the crossing bin was left out
#: for spilling.
STAMPS = ("entry", "load", "reduce", "count", "crossing", "stage", "finish")


@dataclass(frozen=True)
class RegisterConfig:
    """Compile key of the register-resident family (one CTA per row, the row in registers).

    Attributes:
        mode: where row windows come from: ``"decode"``, ``"prefill"`` or ``"full"`` (as in
            ``StreamingConfig``).
        threads: CTA size (256, 512 or 1024).
        vecs: 16-byte vectors each thread holds (1 to 8); a row of up to
            ``vec * threads * vecs`` scores fits (``vec``: 4 float32 or 8 16-bit scores).
        aim_mult: the rung aims at ``aim_mult * k`` keys at or above it.
        capacity: staging entries (order key and position, 8 bytes each in shared memory) for
            the keys at or above the rung, at least 2048 (the largest K); more of them select
            from the registers instead.
        resident: CTAs per SM the register budget is built for (``min_blocks_per_mp``).
        dense_min: 0, or rows of more than ``dense_min * k`` scores that the aim would leave
            unsampled are sampled with the rung at ``11 k / 8`` keys
            (``gvr_reference.register_model.RegisterParams.dense_min``).
        bracket: rows take the bracket histogram path (``gvr_reference.register_model``,
            steps 1-2) where it applies; False: every row takes the sampled path (for the
            shapes whose register budget the bracket code would overflow).
        with_values: also write the values of the selection in the logits format (its most
            negative finite value beside ``-1``).
        deterministic: the K-th value's tie class yields its smallest indices.
        record_paths: write each row's path code (``gvr_reference.model.Path``) to a debug
            tensor.
        stamp_phases: (profiling, never routed) thread 0 of CTA ``c`` writes the low 31 bits
            of ``%globaltimer`` (ns) at each boundary of :data:`STAMPS` it reaches to word
            ``STAMP_WORDS * c + i`` of the debug ``paths`` tensor
            (``tools/time_register_phases.py``); not with ``record_paths``.
        dtype: the logits format, ``"float32"``, ``"bfloat16"`` or ``"float16"``: 16-bit rows
            are held as raw bits, 8 per vector; the bracket bins their exact float32 widening
            and every radix selection works in the 16-bit key space.
        early_loads: decode rows issue their vector loads within the logits width before
            their ``kv_lens`` entry arrives (``device.window.load_limit``), above the branches
            on the row's length: the length's read and the row's overlap, at the cost of
            reading the CTA's whole capacity (capped by the width) for a row shorter than it.
            Decode configurations of 128 registers a thread only (``threads * resident <=
            512``): at 64 the hoisted loads cost stack (the compile audit). False: the loads
            wait for the length and read only the window.
        bit_walk: the bracket path's emission walks each thread's set bits (one store a
            key above the crossing bin, the crossing bin's keys staged one by one:
            ``device.bracket.write_positions``) where False gives every held slot a
            predicated store and a branch; the same slots in the same order. Launches with
            values keep the predicated stores above the crossing bin.
    """

    mode: str = "decode"
    threads: int = 1024
    vecs: int = 4
    aim_mult: int = 2
    capacity: int = 8192
    resident: int = 1
    dense_min: int = 0
    bracket: bool = True
    with_values: bool = False
    deterministic: bool = False
    record_paths: bool = False
    stamp_phases: bool = False
    dtype: str = "float32"
    early_loads: bool = False
    bit_walk: bool = False

    #: The family this configuration belongs to (``gvr_kernels.registry``).
    family = "register"

    @property
    def key_format(self) -> KeyFormat:
        """The order-key format of the logits (``gvr_reference.keys.KeyFormat``)."""
        return key_format(self.dtype)

    #: 16-byte vectors per thread per tile when an oversize row is read from global memory.
    unroll = 4
    #: The staging buffer holds order keys (the selected values are read back from memory).
    stages_keys = True

    def __post_init__(self) -> None:
        key_format(self.dtype)  # validates the name
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.threads not in (256, 512, 1024):
            raise ValueError(f"threads must be 256, 512 or 1024, got {self.threads}")
        if not 1 <= self.vecs <= 8:
            raise ValueError(f"vecs must be in [1, 8], got {self.vecs}")
        if self.resident < 1 or self.resident * self.threads > 2048:
            raise ValueError(
                f"resident must be in [1, {2048 // self.threads}], got {self.resident}"
            )
        if self.capacity < max(self.threads, self.max_k) or self.capacity % 4:
            # At least max_k: an overflowing staging (more than capacity keys at or above
            # the rung) must mean at least k of them, which its fallback relies on.
            raise ValueError(
                f"capacity must be a multiple of 4 and >= max(threads, {self.max_k}), "
                f"got {self.capacity}"
            )
        if self.early_loads and (self.mode != "decode" or self.threads * self.resident > 512):
            raise ValueError(
                "early_loads needs decode rows and 128 registers a thread (threads * resident "
                f"<= 512), got mode={self.mode!r}, threads={self.threads}, "
                f"resident={self.resident}"
            )
        if self.stamp_phases and self.record_paths:
            raise ValueError("stamp_phases and record_paths both write the paths tensor")
        _ = self.params  # validates aim_mult

    @property
    def params(self) -> RegisterParams:
        """The per-row decision parameters (``gvr_reference.register_model``)."""
        return RegisterParams(
            threads=self.threads,
            vecs=self.vecs,
            aim_mult=self.aim_mult,
            capacity=self.capacity,
            bracket=self.bracket,
            dtype=self.dtype,
            dense_min=self.dense_min,
        )

    @property
    def max_n(self) -> int:
        """Longest row held in registers (longer rows are still exact, read from memory)."""
        return self.params.max_n

    @property
    def max_k(self) -> int:
        """Largest K this configuration serves."""
        return 2048

    def shared_layout(self) -> tuple[tuple[str, str, int], ...]:
        """The CTA's shared-memory arrays in allocation order, ``(name, dtype, count)``."""
        return (
            # wsum, 32 words, directly before hist: device.bracket.count_bracket counts the
            # scores below the bracket there
            ("wsum", "i32", 32),
            ("hist", "i32", HIST_BINS),
            ("ctl", "i32", CTL_WORDS),
            ("wstat", "u32", 4 * 32),
            ("sample", "u32", self.threads),
            ("stage_bits", "u32", self.capacity),
            ("stage_idx", "i32", self.capacity),
        )

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
        """One CTA per row, always."""
        return False

    @property
    def name(self) -> str:
        """A short readable name, unique per configuration."""
        parts = [
            "register",
            self.mode,
            f"t{self.threads}",
            f"v{self.vecs}",
            f"a{self.aim_mult}",
            f"c{self.capacity}",
            f"r{self.resident}",
        ]
        if self.dense_min:
            parts.append(f"d{self.dense_min}")
        if not self.bracket:
            parts.append("nobracket")
        if self.dtype != "float32":
            parts.append({"bfloat16": "bf16", "float16": "f16"}[self.dtype])
        if self.with_values:
            parts.append("values")
        if self.deterministic:
            parts.append("det")
        if self.record_paths:
            parts.append("paths")
        if self.stamp_phases:
            parts.append("stamps")
        if self.early_loads:
            parts.append("early")
        if self.bit_walk:
            parts.append("walk")
        return "_".join(parts)
