"""How many blocks of 32 a block-skip pass would read (CPU, no GPU), per row, for two ways of
choosing the threshold (``gvr_reference.blockskip``): the bound-rank ladder of
``simulate_block_skip`` (every rung tried counted), and the streaming family's sampled first
rung (blocks whose bound reaches it). Rows: the shared real score rows, gaussian rows, and
rows with an attention sink and a recent window. The numbers quoted in ``docs/kernels.md``
(block-skip design):

    python tools/blockskip_fractions.py --real-rows ../shared/data/real-rows
"""

import argparse
import glob

import numpy as np
from gvr_kernels.streaming import StreamingConfig
from gvr_reference.blockskip import block_maxima, simulate_block_skip
from gvr_reference.keys import order_key
from gvr_reference.model import ModelConfig, simulate_row

#: The 512-thread streaming core's ladder (``gvr_kernels.routing``).
CORE = StreamingConfig(threads=512, capacity=8192, min_hits=64, aim_boost=2)


def fractions(x, n, k):
    m = block_maxima(x[None, :n])[0]
    ladder = simulate_block_skip(x, m, k, 0, n)
    t = simulate_row(x[:n], k, ModelConfig(CORE.ladder))
    rung = float((order_key(m) >= t.t1).mean()) if t.t1 is not None else float("nan")
    return ladder.blocks_read / ladder.blocks, rung


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--real-rows", default=None)
    args = ap.parse_args()
    rows = []
    if args.real_rows:
        from safetensors.numpy import load_file

        for f in sorted(glob.glob(f"{args.real_rows}/*.safetensors")):
            d = load_file(f)
            for i in range(d["logits"].shape[0]):
                rows.append((f.rsplit("/", 1)[-1], d["logits"][i], int(d["lengths"][i])))
    rng = np.random.default_rng(0)
    g = rng.standard_normal(262144).astype(np.float32)
    loc = g.copy()
    loc[:64] += 8
    loc[-4096:] += 6
    rows += [("gaussian", g, g.size), ("sink + recent window", loc, loc.size)]
    for k in (512, 2048):
        by: dict = {}
        for name, x, n in rows:
            if n > 4 * k:
                by.setdefault(name, []).append(fractions(x, n, k))
        for name, fr in by.items():
            a = np.array(fr)
            print(f"k={k} {name}: bound-rank ladder reads {np.median(a[:, 0]):.2f} of the blocks"
                  f" (median; max {a[:, 0].max():.2f}), the sampled rung {np.median(a[:, 1]):.2f}"
                  f" (max {a[:, 1].max():.2f}) over {len(fr)} rows")  # fmt: skip


if __name__ == "__main__":
    main()
