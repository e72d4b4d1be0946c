"""Device test of the crowd test of one warp's sample keys (``device.bracket.warp_crowd``,
``pytest -m gpu``): a probe kernel runs it on warps of planted key classes, and each warp's
answer must be the CPU model's crowd key (``gvr_reference.register_model.crowd_key``); a
second probe packs crowd keys into the warps' reduction word and tests them against brackets
(``crowd_word``, ``crowd_clear``), which must give ``crowd_harms``'s answer."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
cute = pytest.importorskip("cutlass.cute")

import cutlass  # noqa: E402
from cutlass import Int32, Uint32  # noqa: E402
from gvr_kernels.device.bracket import crowd_clear, crowd_word, warp_crowd  # noqa: E402
from gvr_reference.keys import KEY_FORMATS, format_keys, order_key, round_to_format  # noqa: E402
from gvr_reference.register_model import (  # noqa: E402
    BRACKET_BINS,
    CROWD_MIN,
    bracket,
    crowd_harms,
    crowd_key,
    crowded_sample,
)


@cute.kernel
def _probe(keys: cute.Tensor, out: cute.Tensor):
    tid, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    i = cta * 32 + tid
    out[i] = Int32(warp_crowd(Uint32(keys[i]), CROWD_MIN))


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
    got = out.cpu().numpy().view(np.uint32).reshape(warps, 32)
    assert (got == got[:, :1]).all()  # uniform over each warp
    want = np.array([crowd_key(keys[w]) for w in range(warps)], np.uint32)
    assert np.array_equal(got[:, 0], want), np.flatnonzero(got[:, 0] != want)[:8]
    crowded = np.array([crowded_sample(keys[w]) for w in range(warps)])
    assert np.array_equal(want != 0, crowded)
    big = np.array([largest_class(keys[w]) for w in range(warps)])
    # both answers are common among the planted warps, the boundary counts 7 and 8 too, and
    # warps with two crowded classes
    assert 0.2 < crowded.mean() < 0.8
    assert {7, 8} <= set(big[::4].tolist())
    classes = [np.unique(keys[w][keys[w] != 0], return_counts=True)[1] for w in range(warps)]
    assert any((c >= CROWD_MIN).sum() > 1 for c in classes)  # two crowds: the larger key


@cute.kernel
def _clear_probe(
    keys: cute.Tensor, scale: cute.Tensor, bias: cute.Tensor, out: cute.Tensor,
    fmt: cutlass.Constexpr,
):  # fmt: skip
    tid, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    i = cta * 32 + tid
    word = crowd_word(Int32(i % 33), Uint32(keys[i]), fmt)
    clear = crowd_clear(word >> Uint32(6), Uint32(scale[i]), Uint32(bias[i]), fmt)
    out[i] = Int32(word & Uint32(0x3F)) | (Int32(cutlass.select_(clear, 1, 0)) << 8)


@cute.jit
def _run_clear(keys, scale, bias, out, fmt: cutlass.Constexpr):
    _clear_probe(keys, scale, bias, out, fmt).launch(
        grid=[keys.shape[0] // 32, 1, 1], block=[32, 1, 1]
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_crowd_word_and_clear_match_the_model(dtype):
    """Crowd keys inside brackets, a few bins below their low ends (the words lanes share),
    far below them and none: the packed word keeps the valid-slot count, and the kernels'
    test of the unpacked key equals ``crowd_harms`` (float32 keys read back as the largest
    key of their top 26 bits, 16-bit keys whole)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from cutlass.cute.runtime import from_dlpack

    fmt = KEY_FORMATS[dtype]
    g = rng(32, len(dtype))
    m = 32 * 256
    lo_v = g.standard_normal(m).astype(np.float32)
    top_v = (lo_v + np.abs(g.standard_normal(m)).astype(np.float32) * 4 + 0.01).astype(np.float32)
    lo_k, top_k = order_key(lo_v), order_key(top_v)
    brs = [bracket(int(lo_k[i]), int(top_k[i])) for i in range(m)]
    ok = np.array([b is not None for b in brs])
    assert ok.mean() > 0.95
    width = (top_v - lo_v) / (BRACKET_BINS - 4)  # one bin
    off = g.choice([3.0, -2.0, -12.0, -15.0, -16.5, -18.0, -25.0, -1e3], size=m)
    v = round_to_format((lo_v + off * width).astype(np.float32), fmt)
    keys32 = order_key(v)  # the model's keys: the widened scores' float32 keys
    keys32[::17] = 0  # no crowd
    dev = keys32 if dtype == "float32" else format_keys(v, fmt).astype(np.uint32)
    dev = np.where(keys32 == 0, 0, dev).astype(np.uint32)
    scale = np.array([b.scale if b else 0 for b in brs], np.float32).view(np.uint32)
    bias = np.array([b.bias if b else 0 for b in brs], np.float32).view(np.uint32)
    t = [torch.from_numpy(a.view(np.int32)).cuda() for a in (dev, scale, bias)]
    out = torch.full((m,), -1, dtype=torch.int32, device="cuda")
    args = [from_dlpack(a) for a in (*t, out)]
    cute.compile(_run_clear, *args, fmt)(*args)
    got = out.cpu().numpy()
    assert np.array_equal(got & 0x3F, np.arange(m) % 33)
    clear = ((got >> 8) & 1 == 1)[ok]
    want = np.array([not crowd_harms(int(keys32[i]), brs[i], dtype) for i in np.flatnonzero(ok)])
    assert np.array_equal(clear, want), np.flatnonzero(clear != want)[:8]
    assert 0.2 < want.mean() < 0.8  # both answers common
