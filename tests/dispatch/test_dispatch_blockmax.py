"""``block_max`` in the public calls (``gvr_dispatch.blockmax``): validation before anything is
written, the debug check of the contract (``GVR_CHECK_BLOCK_MAX``), exact answers on the CPU
path, and, on the dispatcher's kernel path (``dispatch_fakes``), the block-skip route taken at
the working-set gate with the maxima passed to the kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dispatch_fakes import fake_dispatcher
from gvr_dispatch import topk, topk_decode, topk_prefill
from gvr_dispatch.blockmax import contract_violations
from gvr_integration.indexer import block_maxima
from gvr_kernels.routing import BLOCK_SKIP_MIN_BYTES
from gvr_reference import blockskip
from gvr_reference.workloads import make_decode_batch, make_prefill_batch


def _decode(seed=3, batch=6, width=3000, family="sink_window"):
    b = make_decode_batch(seed, batch=batch, k=64, width=width, family=family, lengths="ragged")
    x = torch.from_numpy(b.arena)[:, : b.width]
    return b, x, torch.from_numpy(b.kv_lens)


def test_cpu_calls_with_block_max_are_exact():
    b, x, kv = _decode()
    out, val = topk_decode(x, kv, 64, block_max=block_maxima(x), return_values=True)
    b.check(out.numpy(), val.numpy()).raise_if_failed()
    p = make_prefill_batch(4, rows=7, k=32, width=2500, family="dsa_like")
    xp = torch.from_numpy(p.arena)[:, : p.width]
    s, e = torch.from_numpy(p.row_starts), torch.from_numpy(p.row_ends)
    out = topk_prefill(xp, s, e, 32, block_max=block_maxima(xp))
    p.check(out.numpy()).raise_if_failed()
    dense = torch.randn(3, 1000)
    got = topk(dense, 10, block_max=block_maxima(dense))
    want = torch.topk(dense, 10).values.sort(dim=1).values
    assert torch.equal(torch.gather(dense, 1, got.long()).sort(dim=1).values, want)


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (lambda bm: bm.numpy(), TypeError, "block_max must be a torch.Tensor"),
        (lambda bm: bm.double(), TypeError, "block_max must be float32"),
        (lambda bm: bm[:, :-1], ValueError, r"block_max must have shape \(6, 94\)"),
        (lambda bm: bm[:-1], ValueError, "block_max must have shape"),
        (lambda bm: bm.t().contiguous().t(), ValueError, "unit inner stride"),
    ],
)
def test_bad_block_max_is_refused_before_anything_is_written(bad, err, match):
    _, x, kv = _decode()
    out = torch.full((6, 64), 77, dtype=torch.int32)
    with pytest.raises(err, match=match):
        topk_decode(x, kv, 64, out=out, block_max=bad(block_maxima(x)))
    assert (out == 77).all()


def test_debug_mode_catches_a_bound_below_its_block(monkeypatch):
    _, x, kv = _decode()
    bm = block_maxima(x)
    row = int(np.flatnonzero(kv.numpy() >= 200)[0])
    j = 3  # a block inside the row's window
    low = bm.clone()
    low[row, j] = torch.nextafter(low[row, j], torch.tensor(-np.inf))  # one ulp below its max
    out = torch.full((6, 64), 77, dtype=torch.int32)
    topk_decode(x, kv, 64, out=out, block_max=low)  # not checked without the debug mode
    for off in ("0", "false", "Off", " no "):
        monkeypatch.setenv("GVR_CHECK_BLOCK_MAX", off)
        topk_decode(x, kv, 64, out=out, block_max=low)
    monkeypatch.setenv("GVR_CHECK_BLOCK_MAX", "maybe")
    out.fill_(77)
    with pytest.raises(ValueError, match=r"GVR_CHECK_BLOCK_MAX must be .* got 'maybe'"):
        topk_decode(x, kv, 64, out=out, block_max=low)
    assert (out == 77).all()
    monkeypatch.setenv("GVR_CHECK_BLOCK_MAX", "1")
    out.fill_(77)
    with pytest.raises(ValueError, match=rf"breaks its contract .*\(row {row}, block {j}\)"):
        topk_decode(x, kv, 64, out=out, block_max=low)
    assert (out == 77).all()
    topk_decode(x, kv, 64, out=out, block_max=bm)  # correct maxima pass the check
    # a bound below a score outside the window is no violation (the kernel never reads it)
    outside = bm.clone()
    row = int(np.argmin(kv.numpy()))
    nb = -(-int(kv[row]) // 32)
    if nb < bm.shape[1]:
        outside[row, nb:] = -np.inf
        topk_decode(x, kv, 64, out=out, block_max=outside)


def test_contract_check_agrees_with_the_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    x[1, 40] = np.nan
    x[2, 70] = -0.0
    bm = blockskip.block_maxima(x)
    bm[3, 2] = np.nextafter(bm[3, 2], -np.inf)
    bm[1, 1] = 5.0  # a finite bound over a NaN
    bm[2, 2] = -0.0 if bm[2, 2] == 0 else bm[2, 2]
    want = blockskip.contract_violations(x, bm)
    full = torch.zeros(4, dtype=torch.int64), torch.full((4,), 300, dtype=torch.int64)
    got = contract_violations(torch.from_numpy(x), torch.from_numpy(bm), *full)
    assert got.tolist() == want.tolist() == [[1, 1], [3, 2]]


def test_kernel_path_routes_block_skip_at_the_gate_and_passes_the_maxima():
    d, _, compiler = fake_dispatcher()
    rows, width = 512, 65536
    assert rows * width * 4 >= BLOCK_SKIP_MIN_BYTES
    x = torch.randn(rows, width)
    kv = torch.full((rows,), width, dtype=torch.int32)
    bm = block_maxima(x)
    out = d.topk_decode(x, kv, 512, block_max=bm)
    call = compiler.calls[-1]
    assert call["config"].block_skip and call["block_max_ptr"] == bm.data_ptr()
    want = torch.topk(x, 512).values.sort(dim=1).values
    assert torch.equal(torch.gather(x, 1, out.long()).sort(dim=1).values, want)
    keys = d.launch_keys()
    assert keys[-1].block_skip
    d.topk_decode(x, kv, 512)  # the same call without maxima: its own key, no block skip
    assert not compiler.calls[-1]["config"].block_skip
    assert len(d.launch_keys()) == 2
    # the warm fast path takes block_max too
    out2 = d.topk_decode(x, kv, 512, block_max=bm)
    assert compiler.calls[-1]["config"].block_skip and torch.equal(
        torch.gather(x, 1, out2.long()).sort(dim=1).values, want
    )
    # below the gate the maxima are ignored
    small = torch.randn(8, 4096)
    d.topk_decode(small, torch.full((8,), 4096, dtype=torch.int32), 64,
                  block_max=block_maxima(small))  # fmt: skip
    assert not getattr(compiler.calls[-1]["config"], "block_skip", False)


def test_warmup_covers_block_max_keys():
    d, _, _ = fake_dispatcher()
    rep = d.warmup(k=512, rows=(512,), width=65536, block_max=(False, True), progress=False)
    assert rep.launch_keys == 2
    assert {k.block_skip for k in d.launch_keys()} == {False, True}
