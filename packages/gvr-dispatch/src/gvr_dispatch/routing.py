"""Launch keys: what a call is routed by, built only from capture-stable quantities.

A :class:`LaunchKey` is ``(device, mode, rows, n_env, k, with_values, deterministic, dtype,
block_skip)``:

- ``mode``: the kernel's window source, ``"decode"`` (``topk_decode``, and ``topk`` with
  ``lengths``), ``"prefill"`` or ``"full"`` (``topk`` without ``lengths``);
- ``rows``: logits rows;
- ``n_env``: the length envelope (longest row the launch may see, in compressed scores):
  decode with ``max_seq_len``: ``min(max(max_seq_len // compress_ratio, 1), width)``
  (:func:`decode_envelope`); decode without it, prefill and dense: the width, which bounds
  every row since rows are clamped to it;
- ``with_values``: the kernel writes values (requested, or needed by ``sorted=True``);
- ``deterministic``: the tie mode;
- ``dtype``: the logits dtype's name (``"float32"``, ``"bfloat16"``, ``"float16"``);
- ``block_skip``: the call passes ``block_max`` (the router may pick a block-skip
  configuration; ``gvr_kernels.routing.BLOCK_SKIP_MIN_BYTES``).

No part of a key is read from device data, so routing never synchronises.
:func:`route` turns a key into the ``gvr_kernels.routing.route_static`` route (family, typed
compile configuration, grid, workspace), a pure function of the key and the device spec.
"""

from __future__ import annotations

from typing import NamedTuple

from gvr_kernels.routing import Route, route_static
from gvr_kernels.spec import DeviceSpec

__all__ = ["LaunchKey", "decode_envelope", "route", "describe_key"]


class LaunchKey(NamedTuple):
    """The identity of a launch (see the module docstring). Equal to, and hashed as, the plain
    tuple of its fields, so a hot path may look a launch up with a tuple."""

    device: int
    mode: str
    rows: int
    n_env: int
    k: int
    with_values: bool
    deterministic: bool
    dtype: str
    block_skip: bool = False


def decode_envelope(max_seq_len: int, cr_shift: int, width: int) -> int:
    """Envelope of a decode call with ``max_seq_len`` (uncompressed tokens): the longest row
    any ``kv_lens <= max_seq_len`` can give, at least 1, at most ``width`` (``width >= 1``)."""
    return min(max(max_seq_len >> cr_shift, 1), width)


def route(spec: DeviceSpec, key: LaunchKey) -> Route:
    """The static route (and with it the compile configuration) of a launch key on ``spec``."""
    _, mode, rows, n_env, k, with_values, deterministic, dtype, *skip = key
    return route_static(
        spec,
        rows=rows,
        n_env=n_env,
        k=k,
        mode=mode,
        with_values=with_values,
        deterministic=deterministic,
        dtype=dtype,
        block_skip=bool(skip and skip[0]),
    )


def describe_key(key) -> str:
    """A readable form of a launch key for error messages."""
    dev, mode, rows, n_env, k, with_values, deterministic, dtype, *skip = key
    return (
        f"(device=cuda:{dev}, mode={mode}, rows={rows}, n_env={n_env}, k={k}, "
        f"with_values={with_values}, deterministic={deterministic}, dtype={dtype}, "
        f"block_max={bool(skip and skip[0])})"
    )
