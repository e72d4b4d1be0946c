"""Time the routed 16-bit cluster launch against the 16-bit streaming route (run on the GPU).

    python tools/time_half_routes.py > results/tune_cluster16.log

For bfloat16 gaussian decode rows at n = 65,536 and 131,072, b = 1 and 8, K = 512 and 2048:
the route ``route_static`` picks with every family allowed and the streaming family's route,
each checked exact, then timed as a raw kernel launch (cold L2, CUDA events, median of 15;
``device_streaming.timing_setup`` / ``timeit``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from gvr_kernels.routing import route_static
from gvr_kernels.testing import KernelProvider, check_windows

sys.path.insert(0, str(Path(__file__).parent))
from device_streaming import decode_args, timeit, timing_setup  # noqa: E402


def main() -> None:
    kp = KernelProvider()
    flush = timing_setup()
    g = torch.Generator(device="cuda").manual_seed(0)
    for n in (65536, 131072):
        for b in (1, 8):
            for k in (512, 2048):
                x = torch.randn(b, n, generator=g, device="cuda").to(torch.bfloat16)
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                zeros = torch.zeros(b, dtype=torch.int64, device="cuda")
                line = f"bf16 n={n} b={b} k={k}"
                for fams in (("cluster", "streaming"), ("streaming",)):
                    r = route_static(kp.spec, rows=b, n_env=n, k=k, dtype="bfloat16", families=fams)
                    out, _, _, _ = kp.launch("decode", x, kv, None, k, route=r)
                    ok = bool(check_windows(x, zeros, kv.to(torch.int64), k, out).all())
                    fn = kp.get(r.config)
                    args = decode_args(kp, x, kv, out, k, r.parts)
                    t = timeit(lambda fn=fn, args=args: fn(*args), flush, reps=15)
                    line += f" | {r.config.name[:40]} x{r.parts} {'ok' if ok else 'BAD'} {t:.1f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
