"""Device-side helpers for testing the kernels at scale (needs torch with CUDA).

:func:`check_windows` is an exact checker that runs on the GPU: it maps scores to the same
canonical order keys as ``gvr_reference.keys.order_key`` (as int64), takes ``torch.topk`` of
the *keys* (an integer top-K, exact by construction) and compares sorted key multisets, plus
uniqueness, window bounds, ``-1`` padding and the values output. It is the fast screen for
large sweeps; the test suites also run the CPU validator of ``gvr_reference`` on every row.

:func:`families` builds adversarial rows directly on the device.
"""

from __future__ import annotations

import importlib.util
import math
import os

__all__ = [
    "order_key_torch",
    "check_windows",
    "families",
    "FAMILY_NAMES",
    "poison_beyond",
    "KernelProvider",
]

FAMILY_NAMES = (
    "gaussian",
    "dsa_like",
    "quantized",
    "two_valued",
    "constant",
    "pos_inf",
    "many_pos_inf",
    "neg_inf",
    "nan",
    "denormals",
    "signed_zero",
    "hidden_peaks",
    "position_skew",
    "near_flt_max",
    # the tie-heavy tail (gvr_reference.workloads.TAIL_FAMILIES, on the device)
    "all_equal_but_few",
    "few_finite",
    "few_ulps",
    "pos_inf_flood",
    "levels16",
)

POISON = 3.0e38


def order_key_torch(x):
    """int64 order keys (canonical NaN, one key for both zeros) of a float32 tensor."""
    import torch

    u = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    neg = (u >> 31) == 1
    key = torch.where(neg, u ^ 0xFFFFFFFF, u ^ 0x80000000)
    key = torch.where(torch.isnan(x), torch.full_like(key, 0xFFFFFFFF), key)
    key = torch.where(u == 0x80000000, torch.full_like(key, 0x80000000), key)
    return key


def _window_keys(logits, starts, lengths, wmax):
    import torch

    rows = logits.shape[0]
    pos = torch.arange(wmax, device=logits.device)
    cols = (starts[:, None].to(torch.int64) + pos[None, :]).clamp(max=logits.shape[1] - 1)
    vals = torch.gather(logits, 1, cols)
    keys = order_key_torch(vals)
    inside = pos[None, :] < lengths[:, None].to(torch.int64)
    return torch.where(inside, keys, torch.full_like(keys, -1)), vals, inside, rows


def check_windows(logits, starts, lengths, k, out, values=None):
    """Exact check of a top-K result on the GPU.

    Args:
        logits: float32, bfloat16 or float16 (rows, >= width) CUDA tensor (any row stride).
        starts: int (rows,) window starts (0 for decode rows).
        lengths: int (rows,) valid lengths.
        k: top-K size.
        out: int32 (rows, k) indices in the window-local frame.
        values: optional (rows, k) values output (float32, or the 16-bit logits dtype).

    Returns:
        A bool CUDA tensor (rows,): True where the row is exact.
    """
    import torch

    # 16-bit logits and values: checked on their exact float32 widening
    pad_value = torch.finfo(values.dtype if values is not None else logits.dtype).min
    logits = logits.float() if logits.dtype != torch.float32 else logits
    values = values.float() if values is not None and values.dtype != torch.float32 else values
    lengths = lengths.to(torch.int64)
    wmax = max(int(lengths.max().item()) if lengths.numel() else 0, k, 1)
    keys, vals, inside, rows = _window_keys(logits, starts, lengths, wmax)
    expect = torch.topk(keys, k, dim=1).values  # sorted descending; -1 pads short rows
    o = out.to(torch.int64)
    m = torch.minimum(lengths, torch.full_like(lengths, k))
    slot = torch.arange(k, device=out.device)[None, :]
    due = slot < m[:, None]
    in_window = (o >= 0) & (o < lengths[:, None])
    ok = torch.where(due, in_window, o == -1).all(dim=1)
    gathered = torch.gather(keys, 1, o.clamp(min=0, max=wmax - 1))
    gathered = torch.where(in_window, gathered, torch.full_like(gathered, -1))
    ok &= (torch.sort(gathered, dim=1, descending=True).values == expect).all(dim=1)
    srt = torch.sort(torch.where(in_window, o, torch.full_like(o, -1)), dim=1).values
    dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
    ok &= ~dup.any(dim=1)
    if values is not None:
        got = values.contiguous().view(torch.int32)
        ref = torch.gather(vals, 1, o.clamp(min=0, max=wmax - 1)).contiguous().view(torch.int32)
        # the dtype's most negative finite value (float32: bits 0xFF7FFFFF, -FLT_MAX)
        pad = torch.full((1,), pad_value, device=ref.device).view(torch.int32).expand_as(ref)
        ok &= (got == torch.where(in_window, ref, pad)).all(dim=1)
    return ok


def poison_beyond(logits, starts, lengths):
    """Write ``+3e38`` (16-bit logits: the dtype's largest finite value) everywhere outside
    each row's window (in place)."""
    import torch

    pos = torch.arange(logits.shape[1], device=logits.device)[None, :]
    s = starts.to(torch.int64)[:, None]
    e = s + lengths.to(torch.int64)[:, None]
    poison = POISON if logits.dtype == torch.float32 else torch.finfo(logits.dtype).max
    logits.masked_fill_((pos < s) | (pos >= e), poison)


def families(name, rows, width, k, generator):
    """float32 (rows, width) CUDA rows of a named adversarial family.

    Args:
        name: one of :data:`FAMILY_NAMES`.
        rows, width: shape.
        k: the K the rows are built against (tie classes and +inf counts relate to it).
        generator: a seeded ``torch.Generator`` on the CUDA device.
    """
    import torch

    dev = generator.device
    g = generator

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32)

    def rand(*shape):
        return torch.rand(*shape, generator=g, device=dev, dtype=torch.float32)

    x = randn(rows, width)
    if name == "gaussian":
        return x
    if name == "dsa_like":
        q = randn(rows, 4, 16)
        kk = randn(width, 16)
        w = rand(rows, 4) - 0.3
        return torch.einsum("rh,rhw->rw", w, torch.relu(torch.einsum("rhd,wd->rhw", q, kk)))
    if name == "quantized":
        return torch.round(x * 4) / 4
    if name == "two_valued":
        return torch.where(rand(rows, width) < 0.5, 1.0, 2.0).to(torch.float32)
    if name == "constant":
        return torch.full((rows, width), 0.5, device=dev)
    if name == "pos_inf":
        return torch.where(rand(rows, width) < 0.002, math.inf, x)
    if name == "many_pos_inf":
        frac = min(1.0, 2.0 * k / max(width, 1))
        return torch.where(rand(rows, width) < frac, math.inf, x)
    if name == "neg_inf":
        y = torch.where(rand(rows, width) < 0.7, -math.inf, x)
        y[:, -1] = -math.inf
        return y
    if name == "nan":
        return torch.where(rand(rows, width) < 0.01, math.nan, x)
    if name == "denormals":
        return x * 1e-40
    if name == "signed_zero":
        z = torch.where(rand(rows, width) < 0.5, 0.0, -0.0).to(torch.float32)
        return torch.where(rand(rows, width) < 0.9, z, x)
    if name == "hidden_peaks":
        y = x.clone()
        lo = int(width * 0.75)
        span = min(max(2 * k, 1), width - lo)
        y[:, lo : lo + span] += 50.0
        return y
    if name == "position_skew":
        ramp = torch.linspace(0, 20, width, device=dev)[None, :]
        return x + ramp
    if name == "near_flt_max":
        return torch.where(rand(rows, width) < 0.5, 3.4e38, -3.4e38).to(torch.float32) * (
            1 - rand(rows, width) * 1e-6
        )
    if name in ("all_equal_but_few", "few_finite"):
        # a flat row (-inf for few_finite) with fewer than k higher values scattered over it
        flat = -math.inf if name == "few_finite" else 0.25
        few = rand(rows, width) < (k // 2) / max(width, 1)
        return torch.where(few, x.abs() + 1.0, torch.full_like(x, flat))
    if name == "few_ulps":
        base = torch.full((rows, width), 0.75, device=dev).view(torch.int32)
        steps = torch.randint(0, 5, (rows, width), generator=g, device=dev, dtype=torch.int32)
        return (base + steps).view(torch.float32)
    if name == "pos_inf_flood":
        return torch.where(rand(rows, width) < 0.25, math.inf, x)
    if name == "levels16":
        return torch.clamp(torch.floor(x * 4 + 8), 0, 15) / 4 - 1.875
    raise ValueError(f"unknown family {name!r}; known: {FAMILY_NAMES}")


class KernelProvider:
    """Compiled kernels by configuration and the launch plumbing of the device tests and tools:
    kernels come from an ahead-of-time export (``aot_dir``, default ``$GVR_AOT_DIR``, made by
    ``tools/export_kernels.py``) or are compiled on the spot with the CuTe DSL (also those an
    export lacks, where the DSL is installed)."""

    def __init__(self, aot_dir: str | None = None):
        import torch

        from .spec import spec_from_properties

        self.torch = torch
        self.dev = torch.device("cuda")
        self.cache = {}
        self.aot = aot_dir or os.environ.get("GVR_AOT_DIR")
        if self.aot:
            from .aot import load_library

            self.cache.update(load_library(self.aot))
        self.spec = spec_from_properties(torch.cuda.get_device_properties(0))
        from .routing import max_workspace_words

        words = max(1 << 22, max_workspace_words(self.spec))
        self.workspace = torch.zeros(words, dtype=torch.int32, device=self.dev).view(torch.uint32)
        self.dummy_i = torch.zeros(1, dtype=torch.int32, device=self.dev)
        self.dummy_f = torch.zeros((1, 1), dtype=torch.float32, device=self.dev)

    def get(self, cfg):
        """The compiled kernel of ``cfg`` (any registered family)."""
        if cfg not in self.cache:
            if self.aot and importlib.util.find_spec("cutlass") is None:
                raise KeyError(
                    f"{cfg.name} is not in the export at {self.aot}, and no CuTe DSL compiles it"
                )
            from .compile import compile_config

            self.cache[cfg] = compile_config(cfg)
        return self.cache[cfg]

    def launch(
        self,
        mode,
        logits,
        a,
        b,
        k,
        *,
        next_n=1,
        cr=1,
        values=False,
        det=False,
        paths=False,
        n_env=None,
        route=None,
        block_max=None,
    ):
        """Run the routed kernel; returns ``(out, values|None, paths|None, route)``.
        Outputs start poisoned (0x7FFFFFFF / 7.0 / -7) so unwritten slots are caught.
        ``route``: a :class:`gvr_kernels.routing.Route` to force (its configuration's call
        mode and flags are replaced by the arguments); by default the call is routed as the
        dispatcher routes it, by its mode, flags and the logits dtype (float32, bfloat16 or
        float16; values come back in that dtype). ``block_max``: the producer's block maxima
        (float32 ``[rows, ceil(width / 32)]``), routed as a call passing them is."""
        from dataclasses import replace

        from .abi import KernelArgs
        from .routing import route_static

        torch = self.torch
        rows = logits.shape[0]
        dtype = str(logits.dtype).removeprefix("torch.")
        if route is None:
            # Routed with the call's mode, flags and logits dtype: the router picks by them
            # (some variants of a core spill and are routed elsewhere).
            route = route_static(
                self.spec,
                rows=rows,
                n_env=n_env or logits.shape[1],
                k=k,
                mode=mode,
                with_values=values,
                deterministic=det,
                dtype=dtype,
                block_skip=block_max is not None,
            )
        cfg = replace(
            route.config, mode=mode, with_values=values, deterministic=det, record_paths=paths
        )
        fn = self.get(cfg)
        out = torch.full((rows, k), 0x7FFFFFFF, dtype=torch.int32, device=self.dev)
        val = torch.full((rows, k) if values else (1, 1), 7.0, dtype=logits.dtype, device=self.dev)
        pth = torch.full((rows if paths else 1,), -7, dtype=torch.int32, device=self.dev)
        if route.workspace_words > self.workspace.numel():
            raise ValueError(f"the route needs {route.workspace_words} workspace words")
        args = KernelArgs(
            logits=logits,
            lens_a=self.dummy_i if a is None else a,
            lens_b=self.dummy_i if b is None else b,
            out=out,
            values=val,
            workspace=self.workspace,
            paths=pth,
            k=k,
            next_n=next_n,
            cr_shift=int(math.log2(cr)),
            parts=route.parts,
            block_max=self.dummy_f if block_max is None else block_max,
        )
        fn(*args)
        return out, (val if values else None), (pth if paths else None), route
