"""Device test of the crowd test of one warp's sample keys (``device.bracket.warp_crowd``,
``pytest -m gpu``): a probe kernel runs it on warps of planted key classes, and each warp's
answer must give the CPU model's decision (``gvr_reference.register_model.crowded_sample``)
and, for a crowded warp, its largest class."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
cute = pytest.importorskip("cutlass.cute")

from cutlass import Uint32  # noqa: E402
from gvr_kernels.device.bracket import warp_crowd  # noqa: E402
from gvr_reference.register_model import CROWD_MIN, crowded_sample  # noqa: E402


@cute.kernel
def _probe(keys: cute.Tensor, out: cute.Tensor):
    tid, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    i = cta * 32 + tid
    out[i] = warp_crowd(Uint32(keys[i]), CROWD_MIN)


@cute.jit
def _run(keys: cute.Tensor, out: cute.Tensor):
    _probe(keys, out).launch(grid=[keys.shape[0] // 32, 1, 1], block=[32, 1, 1])


def planted_warps(g, warps: int) -> np.ndarray:
    """``[warps, 32]`` uint32 keys: distinct keys (the top bit set on some) with one key
    planted on 0-32 lanes (6-9 lanes on every fourth warp, the boundary), some planted
    classes of zeros (invalid keys), a second class beside the first, invalid lanes."""
    keys = g.choice(2**32 - 1, size=(warps, 32), replace=False).astype(np.uint64) + 1
    for w in range(warps):
        count = int(g.integers(0, 33)) if w % 4 else int(g.integers(6, 10))
        lanes = g.choice(32, size=count, replace=False)
        keys[w, lanes] = 0 if w % 7 == 3 else keys[w, g.integers(32)]
        if w % 5 == 1:
            keys[w, g.choice(32, size=int(g.integers(0, 12)), replace=False)] = 2**31 + w
        if w % 3 == 2:
            keys[w, g.choice(32, size=int(g.integers(0, 8)), replace=False)] = 0
    return keys.astype(np.uint32)


def largest_class(lanes: np.ndarray) -> int:
    _, counts = np.unique(lanes[lanes != 0], return_counts=True)
    return int(counts.max()) if counts.size else 0


def test_warp_crowd_matches_the_model():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from cutlass.cute.runtime import from_dlpack

    warps = 4096
    keys = planted_warps(rng(31), warps)
    dk = torch.from_numpy(keys.view(np.int32).reshape(-1)).cuda()
    out = torch.full((warps * 32,), -1, dtype=torch.int32, device="cuda")
    compiled = cute.compile(_run, from_dlpack(dk), from_dlpack(out))
    compiled(from_dlpack(dk), from_dlpack(out))
    got = out.cpu().numpy().reshape(warps, 32)
    assert (got == got[:, :1]).all()  # uniform over each warp
    crowded = np.array([crowded_sample(keys[w]) for w in range(warps)])
    assert np.array_equal(got[:, 0] >= CROWD_MIN, crowded), np.flatnonzero(
        (got[:, 0] >= CROWD_MIN) != crowded
    )[:8]
    big = np.array([largest_class(keys[w]) for w in range(warps)])
    assert np.array_equal(got[crowded, 0], big[crowded])
    # both answers are common among the planted warps, the boundary counts 7 and 8 too
    assert 0.2 < crowded.mean() < 0.8
    assert {7, 8} <= set(big[::4].tolist())
