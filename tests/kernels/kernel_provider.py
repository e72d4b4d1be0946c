"""Kernels for the device tests: loaded from an ahead-of-time export (``GVR_AOT_DIR``, made by
``tools/export_kernels.py``) or compiled on the spot with the CuTe DSL."""

from __future__ import annotations

import math
import os

from gvr_kernels.config import StreamingConfig
from gvr_reference.routing import DeviceSpec, route_static


class KernelProvider:
    """Compiled kernels by configuration, plus the launch plumbing the tests share."""

    def __init__(self):
        import torch

        self.torch = torch
        self.dev = torch.device("cuda")
        self.cache = {}
        self.aot = os.environ.get("GVR_AOT_DIR")
        if self.aot:
            from gvr_kernels.aot import load_library

            self.cache.update(load_library(self.aot))
        p = torch.cuda.get_device_properties(0)
        self.spec = DeviceSpec(
            p.name,
            f"sm_{p.major}{p.minor}a",
            p.multi_processor_count,
            p.shared_memory_per_block_optin,
            p.shared_memory_per_multiprocessor,
            8,
            p.L2_cache_size,
        )
        self.workspace = torch.zeros(1 << 22, dtype=torch.int32, device=self.dev).view(torch.uint32)
        self.dummy_i = torch.zeros(1, dtype=torch.int32, device=self.dev)

    def get(self, cfg: StreamingConfig):
        if cfg not in self.cache:
            if self.aot:
                raise KeyError(f"{cfg.name} is not in the export at {self.aot}")
            from gvr_kernels.compile import compile_streaming

            self.cache[cfg] = compile_streaming(cfg)
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
    ):
        """Run the routed streaming kernel; returns ``(out, values|None, paths|None, route)``.
        Outputs start poisoned (0x7FFFFFFF / 7.0 / -7) so unwritten slots are caught."""
        torch = self.torch
        rows = logits.shape[0]
        if route is None:
            route = route_static(self.spec, rows=rows, n_env=n_env or logits.shape[1], k=k)
        cfg = StreamingConfig(
            mode=mode, with_values=values, deterministic=det, record_paths=paths, **route.config
        )
        fn = self.get(cfg)
        out = torch.full((rows, k), 0x7FFFFFFF, dtype=torch.int32, device=self.dev)
        val = torch.full((rows, k) if values else (1, 1), 7.0, dtype=torch.float32, device=self.dev)
        pth = torch.full((rows if paths else 1,), -7, dtype=torch.int32, device=self.dev)
        assert route.workspace_words <= self.workspace.numel()
        fn(
            logits,
            self.dummy_i if a is None else a,
            self.dummy_i if b is None else b,
            out,
            val,
            self.workspace,
            pth,
            k,
            next_n,
            int(math.log2(cr)),
            route.parts,
        )
        return out, (val if values else None), (pth if paths else None), route
