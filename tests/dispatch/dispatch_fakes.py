"""Stand-ins that let the dispatcher's kernel path run on a CPU-only machine.

- :class:`FakeRuntime` plays the CUDA runtime: CPU tensors count as the kernel device, capture
  is a flag the test sets, streams are integers.
- :class:`FakeKernel` honours the launch contract of the streaming kernel (the argument order
  of ``gvr_kernels.abi.KernelArgs``, dtypes, shapes, the layout it can address, a zeroed
  workspace of the right size) and checks every part of it on each call, then answers with an
  independent numpy oracle. Outside the deterministic tie mode it permutes each row's valid
  slots, since the kernel's order is unspecified.
- :class:`FakeCompiler` and the disk store/load functions stand in for the CuTe DSL, counting
  compiles.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from gvr_dispatch import Dispatcher, KernelCache
from gvr_kernels.abi import KernelArgs
from gvr_kernels.registry import config_from_dict
from gvr_kernels.spec import H200
from gvr_kernels.streaming.config import WS_HEADER_WORDS, StreamingConfig
from gvr_reference.oracle import topk_windows
from gvr_reference.windows import RowWindows


class FakeRuntime:
    """The CUDA runtime, played on the CPU."""

    kernel_device_type = "cpu"

    def __init__(self, spec=H200):
        self.spec = spec
        self.is_capturing = False
        self.stream = 7
        self.syncs = 0
        self.spec_reads = 0

    def capturing(self) -> bool:
        return self.is_capturing

    def stream_key(self, device_index: int) -> int:
        return self.stream

    def stream_key_of(self, stream) -> int:
        return int(stream)

    @staticmethod
    def index(device) -> int:
        return 0 if device.index is None else device.index

    def current_device(self):
        return torch.device("cpu")

    def current_index(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def device_guard(self, device_index: int):
        return contextlib.nullcontext()

    def synchronize(self, device) -> None:
        self.syncs += 1

    def device_spec(self, device_index: int):
        self.spec_reads += 1
        return self.spec


def _windows(config: StreamingConfig, lens_a, lens_b, rows, width, next_n, cr_shift):
    if config.mode == "decode":
        kv = lens_a.numpy().astype(np.int64)
        r = np.arange(rows)
        t = kv[r // next_n] - next_n + r % next_n + 1
        n = np.minimum(np.maximum(t, 0) >> cr_shift, width)
        return RowWindows(np.zeros(rows, np.int64), n)
    if config.mode == "prefill":
        s = np.clip(lens_a.numpy().astype(np.int64), 0, width)
        e = np.clip(lens_b.numpy().astype(np.int64), s, width)
        return RowWindows(s, e - s)
    return RowWindows(np.zeros(rows, np.int64), np.full(rows, width, np.int64))


class FakeKernel:
    """A compiled streaming configuration, simulated (see the module docstring)."""

    def __init__(self, config: StreamingConfig, calls: list):
        self.config = config
        self.calls = calls
        self.rng = np.random.default_rng(0)

    def __call__(self, *args):
        cfg = self.config
        # Positional, as every call site passes them; named by the one ABI definition.
        a = KernelArgs(*args)
        logits, lens_a, lens_b, out, values, ws, paths = a[:7]
        k, next_n, cr_shift, parts = a.k, a.next_n, a.cr_shift, a.parts
        # -- the launch contract
        dtype = getattr(torch, cfg.dtype)
        vec = cfg.key_format.vec
        assert logits.dtype == dtype and logits.dim() == 2
        assert logits.stride(1) == 1, logits.stride()
        assert logits.stride(0) % vec == 0, logits.stride()
        assert logits.data_ptr() % 16 == 0
        rows, width = logits.shape
        for t in (lens_a, lens_b, paths):
            assert t.dtype == torch.int32 and t.dim() == 1 and t.is_contiguous()
        assert out.dtype == torch.int32 and tuple(out.shape) == (rows, k) and out.is_contiguous()
        assert values.dtype == dtype and values.dim() == 2 and values.is_contiguous()
        if cfg.with_values:
            assert tuple(values.shape) == (rows, k)
        assert ws.dtype == torch.uint32 and ws.dim() == 1 and ws.is_contiguous()
        assert ws.data_ptr() % 16 == 0
        assert all(isinstance(x, int) for x in (k, next_n, cr_shift, parts))
        assert 1 <= k <= cfg.max_k and next_n >= 1 and cr_shift >= 0 and parts >= 1
        assert parts == 1 or cfg.split
        if parts > 1:
            # A ragged split meets in min(rows, parts) row slots (parts: its extra CTAs).
            # (The warmup's module-load launch passes parts = 1 and empty rows: no slot used.)
            n_slots = min(rows, parts) if cfg.ragged else rows
            wpr = cfg.workspace_words_per_row
            assert ws.numel() >= n_slots * wpr
            slots = ws[: n_slots * wpr].view(torch.int32).view(n_slots, wpr)
            assert not slots[:, :WS_HEADER_WORDS].any(), "split headers must be zero on entry"
            # (a position word with its sign bit set: a slab entry's valid bit)
            valid = slots[:, WS_HEADER_WORDS + 1 :: 2] < 0
            assert not valid.any(), "split slab valid bits must be clear on entry"
        bm = a.block_max
        assert bm.dtype == torch.float32 and bm.dim() == 2
        if getattr(cfg, "block_skip", False):
            assert tuple(bm.shape) == (rows, -(-width // 32)) and bm.stride(1) == 1
        if cfg.mode == "decode":
            assert lens_a.numel() * next_n == rows
        if cfg.mode == "prefill":
            assert lens_a.numel() == rows and lens_b.numel() == rows
        self.calls.append(
            dict(
                config=cfg,
                rows=rows,
                width=width,
                stride=logits.stride(0),
                logits_ptr=logits.data_ptr(),
                ws_ptr=ws.data_ptr(),
                parts=parts,
                k=k,
                block_max_ptr=bm.data_ptr(),
            )
        )
        # -- the answer
        win = _windows(cfg, lens_a, lens_b, rows, width, next_n, cr_shift)
        idx, val = topk_windows(logits.float().numpy(), win, k, return_values=True)
        if not cfg.deterministic:
            for r in range(rows):
                m = int(min(k, win.lengths[r]))
                p = self.rng.permutation(m)
                idx[r, :m] = idx[r, :m][p]
                val[r, :m] = val[r, :m][p]
        out.numpy()[...] = idx
        if cfg.with_values:
            v = torch.from_numpy(val)
            if dtype is not torch.float32:  # the pad beside -1: the dtype's most negative
                v = torch.where(torch.from_numpy(idx) < 0, torch.finfo(dtype).min, v)
            values.copy_(v.to(dtype))


class FakeCompiler:
    """``compile_fn`` that counts compiles and returns :class:`FakeKernel` objects."""

    def __init__(self):
        self.compiled: list[tuple[StreamingConfig, str]] = []
        self.calls: list[dict] = []
        self.fail = False

    def __call__(self, config: StreamingConfig, arch):
        if self.fail:
            raise AssertionError(f"compile of {config.name} was not expected")
        self.compiled.append((config, arch))
        return _Exportable(config, self.calls)

    def load(self, path: Path, name: str):
        data = json.loads(Path(path).read_text())
        assert data["name"] == name
        config = config_from_dict(data["family"], data["config"])
        return None, FakeKernel(config, self.calls)

    @staticmethod
    def store(compiled, path: Path, name: str) -> None:
        cfg = compiled.config
        data = {"name": name, "family": cfg.family, "config": asdict(cfg)}
        Path(path).write_text(json.dumps(data))


class _Exportable(FakeKernel):
    pass


def fake_dispatcher(cache_dir=None, spec=H200):
    """A dispatcher whose kernel device is the CPU: fake runtime, fake compiler, and a disk
    cache in ``cache_dir`` (None: none). Returns ``(dispatcher, runtime, compiler)``."""
    runtime = FakeRuntime(spec)
    compiler = FakeCompiler()
    cache = KernelCache(
        compile_fn=compiler, load_fn=compiler.load, store_fn=compiler.store, cache_dir=cache_dir
    )
    return Dispatcher(runtime=runtime, cache=cache), runtime, compiler


def aligned_empty(shape, *, offset_bytes=0, dtype=torch.float32):
    """A CPU tensor of ``shape`` whose base is ``offset_bytes`` past a 64-byte boundary."""
    n = int(np.prod(shape))
    es = torch.tensor([], dtype=dtype).element_size()
    buf = torch.zeros(n + 64, dtype=dtype)
    shift = (-buf.data_ptr() % 64 + offset_bytes) // es
    return buf[shift : shift + n].view(shape)
