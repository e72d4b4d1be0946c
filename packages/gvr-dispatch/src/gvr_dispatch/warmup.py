"""Warmup: the launch keys an envelope of calls can produce, and the report of a warmup.

:func:`warmup_keys` enumerates every launch key (see :mod:`gvr_dispatch.routing`) that calls
inside the envelope can look up:

- ``"decode"`` (``topk_decode``): each row count; with ``max_seq_len`` the one envelope
  ``min(max(max_seq_len // compress_ratio, 1), width)``; without it the width (calls without
  ``max_seq_len`` route by the width);
- ``"prefill"`` (``topk_prefill``): each row count at the width;
- ``"dense"`` (``topk``): each row count at the width, with and without ``lengths``.

Each key is made for every logits dtype of ``dtypes`` (float32 by default; bfloat16 and float16
calls have their own kernels).

The dispatcher compiles (or loads) each distinct configuration once, then resolves every key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .routing import LaunchKey
from .validation import KERNEL_MAX_WIDTH, check_flag, check_int, check_kernel_k

__all__ = ["WARMUP_MODES", "WarmupEntry", "WarmupReport", "check_call_flags", "warmup_keys"]

WARMUP_MODES = ("decode", "prefill", "dense")


@dataclass(frozen=True)
class WarmupEntry:
    """One kernel configuration a warmup made ready.

    Attributes:
        name: the configuration name (e.g. ``StreamingConfig.name``), or ``"cpu_engine"``.
        arch: compile target (``"sm_90a"``, ...), or ``"cpu"``.
        source: ``"memory"`` (already loaded), ``"disk"`` (persistent cache) or
            ``"compiled"``.
        seconds: what making it ready cost in this warmup.
    """

    name: str
    arch: str
    source: str
    seconds: float


@dataclass
class WarmupReport:
    """What a warmup did.

    Attributes:
        entries: one per distinct kernel configuration, in compile order.
        launch_keys: launch keys resolved (0 for a compile-only warmup).
        workspace_bytes: bytes of split workspace held for the device after the warmup.
        seconds: wall time of the whole warmup.
        device: the device warmed (``"cuda:0"``, ``"cpu"``) or the arch of a compile-only
            warmup.
        notes: remarks (e.g. a row stride the kernels cannot address in place).
    """

    entries: list[WarmupEntry] = field(default_factory=list)
    launch_keys: int = 0
    workspace_bytes: int = 0
    seconds: float = 0.0
    device: str = ""
    notes: list[str] = field(default_factory=list)

    def _names(self, source: str) -> list[str]:
        return [e.name for e in self.entries if e.source == source]

    @property
    def compiled(self) -> list[str]:
        """Configurations compiled by this warmup."""
        return self._names("compiled")

    @property
    def loaded(self) -> list[str]:
        """Configurations loaded from the persistent cache."""
        return self._names("disk")

    @property
    def from_memory(self) -> list[str]:
        """Configurations that were already in memory."""
        return self._names("memory")

    def __str__(self) -> str:
        lines = [
            f"gvr warmup on {self.device}: {len(self.entries)} kernels "
            f"({len(self.compiled)} compiled, {len(self.loaded)} from disk, "
            f"{len(self.from_memory)} in memory), {self.launch_keys} launch keys, "
            f"{self.workspace_bytes} workspace bytes, {self.seconds:.2f} s"
        ]
        lines += [f"  {e.source:8s} {e.seconds:7.3f} s  {e.arch} {e.name}" for e in self.entries]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _ints(value: object, name: str) -> tuple[int, ...]:
    items = (value,) if not isinstance(value, Iterable) or isinstance(value, str) else value
    out = tuple(check_int(v, name) for v in items)
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


def _flags(value: object, name: str) -> tuple[bool, ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    out = tuple(dict.fromkeys(check_flag(v, name) for v in items))
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


def check_call_flags(k, rows, modes, with_values, deterministic, block_skip, kernels=True):
    """The call flags of a warm-up envelope, checked (also where the CPU engine serves the
    calls and no key is made).

    Returns:
        ``(ks, row_counts, modes, values_opts, det_opts, skip_opts)`` as tuples.

    Raises:
        TypeError, ValueError: an argument is out of range, naming it; with ``kernels``, a K
            the CUDA kernels do not serve.
    """
    ks = _ints(k, "k")
    for kk in ks:
        if kk < 1:
            raise ValueError(f"k must be >= 1, got {kk}")
        if kernels:
            check_kernel_k(kk)
    row_counts = _ints(rows, "rows")
    for r in row_counts:
        if r < 0:
            raise ValueError(f"rows must be >= 0, got {r}")
    if isinstance(modes, str):
        modes = (modes,)
    modes = tuple(modes)
    for m in modes:
        if m not in WARMUP_MODES:
            raise ValueError(f"modes must be drawn from {WARMUP_MODES}, got {m!r}")
    if not modes:
        raise ValueError("modes must not be empty")
    values_opts = _flags(with_values, "with_values")
    det_opts = _flags(deterministic, "deterministic")
    skip_opts = _flags(block_skip, "block_max")
    return ks, row_counts, modes, values_opts, det_opts, skip_opts


def check_envelope(width, row_stride, row_counts, modes, next_n, max_seq_len):
    """The shape arguments of a warm-up envelope, checked (also where the CPU engine serves the
    calls and no key is made): ``width`` in ``[1, 2**26)`` and given for prefill, dense and
    decode without ``max_seq_len`` calls, ``row_stride >= 0``, and decode row counts
    multiples of ``next_n``.

    Returns:
        ``(width, row_stride)`` as ints (or None where not given).

    Raises:
        TypeError, ValueError: an argument is out of range, naming it.
    """
    if width is not None:
        width = check_int(width, "width")
        if not 1 <= width < KERNEL_MAX_WIDTH:
            raise ValueError(f"width must be in [1, 2**26), got {width}")
    if row_stride is not None:
        row_stride = check_int(row_stride, "row_stride")
        if row_stride < 0:
            raise ValueError(f"row_stride must be >= 0, got {row_stride}")
    if "decode" in modes:
        for r in row_counts:
            if r % next_n:
                raise ValueError(
                    f"rows must be multiples of next_n={next_n} for decode calls, got {r}"
                )
    if width is None:
        for mode in modes:
            if mode == "decode" and max_seq_len is None:
                raise ValueError(
                    "width (logits.shape[1]) or max_seq_len is required to warm up 'decode' calls"
                )
            if mode != "decode":
                raise ValueError(f"width (logits.shape[1]) is required to warm up {mode!r} calls")
    return width, row_stride


def warmup_keys(
    device_index: int,
    *,
    k,
    rows=(1,),
    next_n: int = 1,
    cr_shift: int = 0,
    max_seq_len: int | None = None,
    width: int | None = None,
    row_stride: int | None = None,
    modes=("decode",),
    with_values=False,
    deterministic=False,
    dtypes=("float32",),
    block_skip=False,
) -> tuple[list[LaunchKey], list[str]]:
    """Every launch key calls inside the envelope can produce (see the module docstring).

    Args:
        device_index: the device of the keys.
        k: one K or several (``1 <= k <= 2048``).
        rows: logits row counts (decode: multiples of ``next_n``); 0 is skipped.
        next_n, cr_shift: decode rows per request and ``log2(compress_ratio)``.
        max_seq_len: the decode envelope in uncompressed tokens, or ``None``.
        width: the logits width (``logits.shape[1]``); required for prefill, dense and decode
            without ``max_seq_len``; for decode with ``max_seq_len`` it defaults to
            ``max_seq_len // compress_ratio`` (the logits are at least that wide).
        row_stride: the logits row stride calls will use (checked: one the kernels cannot
            address in place makes those calls copy, which capture refuses).
        modes: any of ``"decode"``, ``"prefill"``, ``"dense"``.
        with_values, deterministic: a bool, or a tuple of the bools to cover.
        dtypes: names of the logits dtypes to cover (``"float32"``, ``"bfloat16"``,
            ``"float16"``).
        block_skip: whether the calls pass ``block_max``: a bool, or a tuple of the bools to
            cover.

    Returns:
        ``(keys, notes)``: the distinct keys in a stable order, and remarks for the report.

    Raises:
        TypeError, ValueError: an argument is out of range, naming it.
    """
    ks, row_counts, modes, values_opts, det_opts, skip_opts = check_call_flags(
        k, rows, modes, with_values, deterministic, block_skip
    )
    width, row_stride = check_envelope(width, row_stride, row_counts, modes, next_n, max_seq_len)
    notes: list[str] = []
    if row_stride is not None:
        vec = 8 if any(d != "float32" for d in dtypes) else 4
        if row_stride % vec and any(r > 1 for r in row_counts):
            notes.append(
                f"row_stride={row_stride} is not a multiple of {vec}: calls with more than one "
                f"row copy the logits (slower) and cannot be captured in a CUDA graph"
            )

    def need_width(mode: str) -> int:
        assert width is not None, mode  # check_envelope refused the envelope without it
        return width

    # (kernel mode, n_env)
    envelopes: list[tuple[str, int]] = []
    for mode in modes:
        if mode == "decode":
            if max_seq_len is not None:
                w = width if width is not None else max(max_seq_len >> cr_shift, 1)
                w = min(w, KERNEL_MAX_WIDTH - 1)
                envelopes.append(("decode", min(max(max_seq_len >> cr_shift, 1), w)))
            else:
                envelopes.append(("decode", need_width(mode)))
        elif mode == "prefill":
            envelopes.append(("prefill", need_width(mode)))
        else:
            w = need_width(mode)
            envelopes += [("decode", w), ("full", w)]

    keys: dict[LaunchKey, None] = {}
    for mode, n_env in envelopes:
        for r in row_counts:
            if r == 0:
                continue
            for kk in ks:
                for wv in values_opts:
                    for det in det_opts:
                        for dt in dtypes:
                            for sk in skip_opts:
                                key = LaunchKey(device_index, mode, r, n_env, kk, wv, det, dt, sk)
                                keys[key] = None
    return list(keys), notes
