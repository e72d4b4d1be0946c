"""Compile key of the streaming family: a frozen dataclass with a readable name.

Every field changes the generated code; everything a row can decide for itself (its length,
its sample, its rungs) is *not* here but computed in-kernel from the row (see
``gvr_reference.ladder``). The shared-memory layout and the split workspace are written here
once (:meth:`StreamingConfig.shared_layout`, :attr:`StreamingConfig.workspace_words_per_row`):
the kernel allocates from that layout, and the router and the dispatcher size launches from
it. How the tunable defaults were chosen: ``docs/kernels.md``.

This module imports no CuTe DSL, so routing and dispatch can use it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from gvr_reference.blockskip import MASK_BLOCKS
from gvr_reference.keys import KeyFormat, key_format
from gvr_reference.ladder import LadderParams

from ..family import STAMP_WORDS, layout_bytes

__all__ = [
    "StreamingConfig",
    "MODES",
    "HIST_BINS",
    "CTL_WORDS",
    "PRELOAD_MAX",
    "CTL_ALLOC",
    "CLUSTER_SIZES",
    "WS_HEADER_WORDS",
    "WS_SLAB_ENTRIES",
    "SLAB_VALID",
    "SMEM_ALIGN",
    "SKIP_MASK_WORDS",
    "STAMPS",
    "STAMP_WORDS",
]

MODES = ("decode", "prefill", "full")
HIST_BINS = 256
#: Most vectors a thread may preload (``StreamingConfig.preload``): four 16-byte vectors,
#: 16 registers held across the sample and the rung (the 1024-thread split kernel stays at
#: 62 registers, no spill).
PRELOAD_MAX = 4
#: Control words zeroed at the start of a row ...
CTL_WORDS = 17
#: ... and allocated by a ragged split (its assignment words follow the zeroed ones) and by a
#: cluster split (its meeting words follow them).
CTL_ALLOC = 24
#: Thread-block cluster sizes a cluster split may take (``StreamingConfig.cluster``; 16 is
#: past the portable 8, where the device schedules it).
CLUSTER_SIZES = (2, 4, 8, 16)
#: Per-row words of the split workspace before the survivor slab, zero on entry and zero
#: again on exit: one 64-bit counter (the survivors reserved in its low half, the arriving
#: CTAs in its high half) and two pad words (the workspace is 16-byte aligned, so each row's
#: counter is 8-byte aligned and its slab 16-byte aligned). The slab entries follow.
WS_HEADER_WORDS = 4
#: Survivor entries a row slot's slab has room for in every split configuration, whatever its
#: staging capacity (at most this): the slots of launches of different capacities (the 1024-
#: and 512-thread split cores, or a staging halved on a small part) that share one workspace
#: then start at the same words, so no slot's header lies in another launch's slab. An entry
#: is two words, one 64-bit store: the score's bits, then its position with
#: :data:`SLAB_VALID` set; every entry's valid bit is clear between launches (the workspace is
#: zeroed when allocated, and a row's last CTA clears each entry written in its launch once it
#: has read it), so the same words mean the same in every configuration.
WS_SLAB_ENTRIES = 16384
#: Valid bit of a slab entry's position word (positions are below ``2**31``).
SLAB_VALID = 1 << 31
#: Byte alignment of every shared-memory array (16-byte vector access).
SMEM_ALIGN = 16
#: Words of a block-skip CTA's live-block mask: one bit per block of ``BLOCK`` columns, so a
#: CTA's chunk of up to 8,448 blocks (270,336 float32 columns) can skip blocks; a longer chunk
#: streams every block.
SKIP_MASK_WORDS = MASK_BLOCKS // 32
#: The phase boundaries a ``stamp_phases`` kernel stamps, in the order of their words: kernel
#: entry; the row window read and the control words zeroed; the sample read; the first rung;
#: the streaming pass; then, on a workspace split row, the arrival (the one atomic that
#: reserves the CTA's slab range and counts it), and on the last CTA only its own survivors
#: written (``publish``) and the slab gathered; and the row finished (selection and emission)
#: by the CTA that finishes it (a workspace split stamps no ``reserve``). A cluster split
#: (``cluster``) stamps ``reserve`` (its survivor bins counted), ``publish`` (the counts
#: summed across the cluster: the first cluster barrier), ``cross`` (on a row that meets on
#: its survivor bins: their crossing bin found) and ``gather`` (the second cluster barrier
#: and the leader's move), and no ``arrive``. The CTA that selects among its staged survivors
#: by the linear level (``device.linear``) stamps ``hist`` (their histogram counted) and
#: ``cross`` (its crossing bin found) after its ``gather``: a reader orders the boundaries by
#: their times.
STAMPS = (
    "entry",
    "window",
    "sample",
    "rung",
    "stream",
    "reserve",
    "publish",
    "arrive",
    "hist",
    "cross",
    "gather",
    "finish",
)


@dataclass(frozen=True)
class StreamingConfig:
    """Compile key of the streaming family (one or several CTAs per row).

    Attributes:
        mode: where row windows come from: ``"decode"`` (kv_lens, next_n, compress_ratio),
            ``"prefill"`` (row_starts/row_ends, window-local output) or ``"full"`` (every row is
            the whole logical width).
        threads: CTA size.
        capacity: survivor staging capacity (entries of 8 bytes in shared memory).
        split: rows may be cut across several CTAs that meet through a global workspace
            (last-CTA election); when False the launch must use one CTA per row.
        ragged: (``split`` only) the launch's ``rows + parts`` CTAs (``parts``: the kernels'
            argument, the CTAs beyond one per row) go to the rows by their lengths, read
            in-kernel (``gvr_reference.ragged``): a long row gets more CTAs, a short one a
            single CTA that runs as on one CTA per row; a split row meets in one of
            ``min(rows, parts)`` workspace row slots. Launches of at most ``threads`` rows and
            fewer than 32,768 CTAs (larger ones run one CTA per row).
        unroll: 16-byte vectors each thread keeps in flight per tile of the streaming pass.
        aim_mult: the first rung aims at ``aim_mult * k`` survivors.
        sample_max: most sampled scores per row (multiple of ``4 * threads``).
        min_hits: sample scores wanted above the first rung.
        retry_mult: the retry rung sits at ``retry_mult`` times the first rung's sample rank.
        aim_boost: the first rung may aim at up to ``aim_boost * aim_mult * k`` survivors
            within a quarter of the capacity (``gvr_reference.ladder.LadderParams``).
        dense_min: 0, or rows of more than ``dense_min * k`` scores that the aim would leave
            unsampled are sampled with a rung aiming at ``11 k / 8`` survivors
            (``gvr_reference.ladder.LadderParams.dense_min``, ``dense_aim``).
        with_values: also write the fp32 values of the selection (``-FLT_MAX`` beside ``-1``).
        deterministic: the K-th value's tie class yields its smallest indices.
        record_paths: write each row's path code (``gvr_reference.model.Path``) to a debug
            tensor.
        stamp_phases: (profiling, never routed) thread 0 of CTA ``c`` writes the low 31 bits
            of ``%globaltimer`` (ns) at each boundary of :data:`STAMPS` it reaches to word
            ``STAMP_WORDS * c + i`` of the debug ``paths`` tensor (``tools/time_split_phases.py``);
            not with ``record_paths``.
        prefetch: tiles of the CTA's chunk kept asked of L2 ahead of the tile being loaded,
            by one bulk asynchronous prefetch per tile (``cp.async.bulk.prefetch.L2``, sm_90+);
            the first ones are asked before the sample is read. 0: none.
        dtype: the logits format, ``"float32"``, ``"bfloat16"`` or ``"float16"``: 16-bit rows
            are read as 16-byte vectors of 8 scores and selected on 16-bit order keys (two
            radix levels decide any key); values are written in the same format.
        block_skip: the kernel reads the producer's block maxima (``KernelArgs.block_max``,
            float32 ``[rows, ceil(width / 32)]``, each entry at least every score of its 32
            columns) and, where the row's sample says the first rung's survivors cluster,
            loads only the blocks whose bound reaches the pass threshold
            (``gvr_reference.blockskip``). Needs ``prefetch == 0`` (a bulk prefetch would read
            the skipped blocks).
        preload: (``split`` rows of decode and full launches, not ``ragged``, not
            ``block_skip``) 16-byte vectors each thread loads from the start of its CTA's chunk
            before it reads the sample, held in registers across the sample and the rung: a
            chunk of at most ``preload * threads`` vectors is then tested and staged with no
            load in the pass, so its DRAM read overlaps the sample's instead of following the
            rung (a longer chunk streams as usual). 0: none.
        cluster: (``split`` only, not ``ragged``, not ``block_skip``) the ``cluster`` CTAs of
            a row (2, 4, 8 or 16; the launch's ``parts``) form one thread-block cluster and
            meet through distributed shared memory instead of the workspace: every CTA adds
            its survivor count (and its survivors' bins) to every CTA's shared words, one
            cluster barrier, then each CTA emits its own survivors above the crossing bin
            and sends the bin's (or, not meeting on bins, all of its survivors) to the
            leader's staging; a second cluster barrier, and the leader selects as the
            finishing CTA of a workspace split does. The paths are those of a workspace
            split of the same capacity (``gvr_reference.model``). No workspace. 0: none.
        l2_hints: the sample's loads give their L2 lines the evict-last priority and the
            streaming pass reads with evict-first (``.L2::cache_hint`` policies,
            ``device.memory.l2_policy``): the sampled sectors stay in L2 until the pass reads
            them again, so a row whose launch does not fit L2 is read from DRAM once instead
            of about 1.03 times (the sample's share of the row), and the pass leaves every line
            it read evict-first, the sampled ones included. Not with ``block_skip`` (a skipped
            block would keep its sampled lines evict-last).
    """

    mode: str = "decode"
    threads: int = 1024
    capacity: int = 16384
    split: bool = False
    ragged: bool = False
    unroll: int = 4
    aim_mult: int = 2
    sample_max: int = 8192
    min_hits: int = 32
    retry_mult: int = 3
    aim_boost: int = 1
    dense_min: int = 0
    with_values: bool = False
    deterministic: bool = False
    record_paths: bool = False
    stamp_phases: bool = False
    prefetch: int = 0
    dtype: str = "float32"
    block_skip: bool = False
    l2_hints: bool = False
    preload: int = 0
    cluster: int = 0

    def __post_init__(self) -> None:
        fmt = key_format(self.dtype)  # validates the name
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.threads not in (256, 512, 1024):
            raise ValueError(f"threads must be 256, 512 or 1024, got {self.threads}")
        if self.capacity < self.threads or self.capacity % 4:
            raise ValueError(
                f"capacity must be a multiple of 4 and >= threads, got {self.capacity}"
            )
        if self.sample_max % (fmt.vec * self.threads):
            raise ValueError(
                f"sample_max must be a multiple of {fmt.vec} * threads for {self.dtype} rows, "
                f"got {self.sample_max}"
            )
        if self.split and self.capacity > WS_SLAB_ENTRIES:
            raise ValueError(
                f"a split configuration's capacity must be at most {WS_SLAB_ENTRIES} (its "
                f"workspace slab), got {self.capacity}"
            )
        if self.ragged and not self.split:
            raise ValueError("ragged needs split=True (a ragged launch cuts its long rows)")
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int):
            raise TypeError(f"prefetch must be an int (tiles), got {self.prefetch!r}")
        if not 0 <= self.prefetch <= 8:
            raise ValueError(f"prefetch must be in [0, 8] tiles, got {self.prefetch}")
        if self.block_skip and self.prefetch:
            raise ValueError(
                f"block_skip needs prefetch=0 (a bulk prefetch reads skipped blocks), got "
                f"prefetch={self.prefetch}"
            )
        if self.block_skip and self.l2_hints:
            raise ValueError(
                "l2_hints needs block_skip=False (a skipped block would keep its sampled "
                "lines evict-last in L2)"
            )
        if self.stamp_phases and self.record_paths:
            raise ValueError("stamp_phases and record_paths both write the paths tensor")
        if isinstance(self.preload, bool) or not isinstance(self.preload, int):
            raise TypeError(f"preload must be an int (vectors a thread), got {self.preload!r}")
        if not 0 <= self.preload <= PRELOAD_MAX:
            raise ValueError(f"preload must be in [0, {PRELOAD_MAX}], got {self.preload}")
        if self.preload and not (self.split and not self.ragged and not self.block_skip):
            raise ValueError(
                "preload needs split=True, ragged=False and block_skip=False (one chunk a "
                f"CTA, every vector read), got preload={self.preload}"
            )
        if self.preload and self.mode == "prefill":
            raise ValueError("preload needs a decode or full launch (windows that start aligned)")
        if isinstance(self.cluster, bool) or not isinstance(self.cluster, int):
            raise TypeError(f"cluster must be an int (CTAs a row), got {self.cluster!r}")
        if self.cluster and self.cluster not in CLUSTER_SIZES:
            raise ValueError(f"cluster must be 0 or one of {CLUSTER_SIZES}, got {self.cluster}")
        if self.cluster and not (self.split and not self.ragged and not self.block_skip):
            raise ValueError(
                "cluster needs split=True, ragged=False and block_skip=False (a static split "
                f"of one cluster a row), got cluster={self.cluster}"
            )
        if not 1 <= self.unroll <= 8:
            raise ValueError(f"unroll must be in [1, 8], got {self.unroll}")
        _ = self.ladder  # validates the ladder fields

    @property
    def ladder(self) -> LadderParams:
        """The ladder parameters this configuration traces into the kernel."""
        return LadderParams(
            capacity=self.capacity,
            sample_max=self.sample_max,
            aim_mult=self.aim_mult,
            min_hits=self.min_hits,
            retry_mult=self.retry_mult,
            vec=self.key_format.vec,
            aim_boost=self.aim_boost,
            dense_min=self.dense_min,
        )

    @property
    def key_format(self) -> KeyFormat:
        """The order-key format of the logits (``gvr_reference.keys.KeyFormat``)."""
        return key_format(self.dtype)

    @property
    def max_k(self) -> int:
        """Largest K this configuration serves (an unsampled row must fit the staging)."""
        return min(2048, self.ladder.max_k())

    #: The family this configuration belongs to (``gvr_kernels.registry``).
    family = "streaming"

    def shared_layout(self) -> tuple[tuple[str, str, int], ...]:
        """The CTA's shared-memory arrays in allocation order: ``(name, dtype, count)`` with
        dtype ``"i32"`` or ``"u32"``, each aligned to :data:`SMEM_ALIGN` bytes. The kernel
        allocates exactly these (``gvr_kernels.streaming.kernel.allocate_shared``)."""
        return (
            (
                ("hist", "i32", HIST_BINS),
                ("ctl", "i32", CTL_ALLOC if self.ragged or self.cluster else CTL_WORDS),
                ("sample", "u32", self.sample_max),
                ("stage_bits", "u32", self.capacity),
                ("stage_idx", "i32", self.capacity),
            )
            + ((("mhist", "i32", HIST_BINS),) if self.cluster else ())
            + (
                (
                    ("skip", "u32", SKIP_MASK_WORDS),
                    ("runmax", "u32", self.sample_max // (4 * self.key_format.vec)),
                )
                if self.block_skip
                else ()
            )
        )

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA (bytes): the arrays of :meth:`shared_layout`."""
        return layout_bytes(self.shared_layout(), SMEM_ALIGN)

    @property
    def resident_ctas(self) -> int:
        """CTAs per SM the configuration is built for (1024 threads: 1, 512: 2, 256: 4); the
        register budget is capped accordingly at compile time."""
        return 1024 // self.threads

    @property
    def workspace_words_per_row(self) -> int:
        """uint32 words of split workspace one row slot takes (0 when not split, or a cluster
        split): its header
        and a slab of :data:`WS_SLAB_ENTRIES` survivor entries, of which it uses
        ``capacity``."""
        return WS_HEADER_WORDS + 2 * WS_SLAB_ENTRIES if self.split and not self.cluster else 0

    @property
    def name(self) -> str:
        """A short readable name, unique per configuration."""
        parts = [
            "streaming",
            self.mode,
            f"t{self.threads}",
            f"c{self.capacity}",
            ("ragged" if self.ragged else "split") if self.split else "single",
        ]
        if self.cluster:
            parts.append(f"x{self.cluster}")
        parts += [
            f"u{self.unroll}",
            f"a{self.aim_mult}",
            f"s{self.sample_max}",
        ]
        if self.dtype != "float32":
            parts.append({"bfloat16": "bf16", "float16": "f16"}[self.dtype])
        if (self.min_hits, self.retry_mult) != (32, 3):
            parts.append(f"h{self.min_hits}r{self.retry_mult}")
        if self.aim_boost != 1:
            parts.append(f"b{self.aim_boost}")
        if self.dense_min:
            parts.append(f"d{self.dense_min}")
        if self.prefetch:
            parts.append(f"pf{self.prefetch}")
        if self.block_skip:
            parts.append("skip")
        if self.l2_hints:
            parts.append("l2h")
        if self.preload:
            parts.append(f"pl{self.preload}")
        if self.with_values:
            parts.append("values")
        if self.deterministic:
            parts.append("det")
        if self.record_paths:
            parts.append("paths")
        if self.stamp_phases:
            parts.append("stamps")
        return "_".join(parts)
