"""CPU tensors through the public API (numba engine): every answer checked by the
``gvr_reference`` validator, plus the exact order of ``sorted=True`` and the tie choice of
``deterministic=True`` against the oracle."""

from __future__ import annotations

import gvr_dispatch
import numpy as np
import pytest
import torch
from gvr_reference import oracle
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch

FAMILIES = (
    "gaussian",
    "tie_flood",
    "two_valued",
    "pos_inf",
    "neg_inf",
    "nan",
    "signed_zero",
    "denormals",
    "hidden_peaks",
)


def _t(a):
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a))


def _view(batch):
    """The batch's logits as a torch view with the same strides (arena padding included)."""
    arena = torch.from_numpy(batch.arena)
    return arena[:, : batch.width]


def _check_exact(batch, out, values=None):
    report = batch.check(out.numpy(), None if values is None else values.numpy())
    report.raise_if_failed()


def _check_sorted(batch, out, values):
    ref_idx, ref_val = batch.reference(sorted=True, return_values=True)
    np.testing.assert_array_equal(out.numpy(), ref_idx)
    np.testing.assert_array_equal(values.numpy().view(np.uint32), ref_val.view(np.uint32))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("next_n, cr", [(1, 1), (2, 4), (3, 1), (4, 2)])
def test_decode(family, next_n, cr):
    k = 32
    for lengths in ("ragged", "edge"):
        b = make_decode_batch(
            11 * next_n + cr,
            batch=9,
            next_n=next_n,
            compress_ratio=cr,
            k=k,
            width=301,
            row_stride=308,
            family=family,
            lengths=lengths,
        )
        x, kv = _view(b), _t(b.kv_lens)
        out = gvr_dispatch.topk_decode(x, kv, k, next_n=next_n, compress_ratio=cr)
        _check_exact(b, out)
        out, values = gvr_dispatch.topk_decode(
            x, kv, k, next_n=next_n, compress_ratio=cr, return_values=True, max_seq_len=10_000
        )
        _check_exact(b, out, values)
        out, values = gvr_dispatch.topk_decode(
            x, kv, k, next_n=next_n, compress_ratio=cr, sorted=True, return_values=True
        )
        _check_sorted(b, out, values)


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill(family):
    k = 24
    for lengths in ("ragged", "edge", "full"):
        b = make_prefill_batch(
            5, rows=13, k=k, width=257, row_stride=260, family=family, lengths=lengths
        )
        x = _view(b)
        starts, ends = _t(b.row_starts), _t(b.row_ends)
        out = torch.full((13, k), 99, dtype=torch.int32)
        values = torch.full((13, k), 99.0)
        res = gvr_dispatch.topk_prefill(x, starts, ends, out=out, values=values)
        assert res[0] is out and res[1] is values
        _check_exact(b, out, values)
        gvr_dispatch.topk_prefill(x, starts, ends, out=out, values=values, sorted=True)
        _check_sorted(b, out, values)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lengths", [None, "ragged", "edge"])
def test_dense(family, lengths):
    k = 16
    b = make_dense_batch(3, rows=7, k=k, width=150, family=family, lengths=lengths)
    x, n = _view(b), _t(b.lengths)
    out = gvr_dispatch.topk(x, k, n)
    _check_exact(b, out)
    out, values = gvr_dispatch.topk(x, k, n, sorted=True, return_values=True)
    _check_sorted(b, out, values)


def test_deterministic_takes_smallest_indices():
    """A tie class larger than K: ``deterministic=True`` yields its smallest indices."""
    x = torch.zeros(3, 200)
    x[:, 50:] = 1.0
    x[1, 7] = 5.0
    out = gvr_dispatch.topk(x, 10, deterministic=True)
    expect = oracle.topk_dense(x.numpy(), 10)
    assert (np.sort(out.numpy(), 1) == np.sort(expect, 1)).all()
    assert set(out[0].tolist()) == set(range(50, 60))
    assert set(out[1].tolist()) == {7, *range(50, 59)}


def test_short_and_empty_rows():
    x = torch.randn(4, 50)
    kv = torch.tensor([0, 1, 5, 50], dtype=torch.int32)
    out, values = gvr_dispatch.topk_decode(x, kv, 8, return_values=True)
    assert (out[0] == -1).all() and (values[0] == torch.finfo(torch.float32).min).all()
    assert out[1].tolist() == [0] + [-1] * 7
    assert sorted(out[2, :5].tolist()) == list(range(5)) and (out[2, 5:] == -1).all()
    assert (out[3] >= 0).all()


def test_negative_lengths_and_out_of_range_windows_are_clamped():
    """The CPU path follows the kernels' clamping, so the same call means the same thing."""
    x = torch.randn(3, 40)
    kv = torch.tensor([-5, 3, 100], dtype=torch.int32)
    out = gvr_dispatch.topk_decode(x, kv, 4)
    assert (out[0] == -1).all()
    assert sorted(out[1, :3].tolist()) == [0, 1, 2]
    starts = torch.tensor([-3, 30, 50], dtype=torch.int32)
    ends = torch.tensor([2, 100, 60], dtype=torch.int32)
    out = gvr_dispatch.topk_prefill(x, starts, ends, 4)
    assert sorted(out[0, :2].tolist()) == [0, 1] and (out[0, 2:] == -1).all()
    expect = oracle.topk_dense(x[1:2, 30:].numpy(), 4)
    assert sorted(out[1].tolist()) == sorted(expect[0].tolist())
    assert (out[2] == -1).all()
    lengths = torch.tensor([-1, 2, 1000], dtype=torch.int32)
    out = gvr_dispatch.topk(x, 4, lengths)
    assert (out[0] == -1).all() and (out[2] >= 0).all()


def test_zero_rows_and_zero_width():
    out = gvr_dispatch.topk_decode(torch.empty(0, 10), torch.empty(0, dtype=torch.int32), 4)
    assert out.shape == (0, 4) and out.dtype == torch.int32
    out, values = gvr_dispatch.topk(torch.empty(3, 0), 4, return_values=True)
    assert (out == -1).all() and (values == torch.finfo(torch.float32).min).all()


def test_k_from_out_and_large_k():
    x = torch.randn(2, 5000)
    out = torch.empty(2, 3000, dtype=torch.int32)
    assert gvr_dispatch.topk(x, out=out) is out
    b_idx = oracle.topk_dense(x.numpy(), 3000)
    assert (np.sort(out.numpy(), 1) == np.sort(b_idx, 1)).all()


def test_workspace_ignored_on_cpu():
    x = torch.randn(2, 100)
    out = gvr_dispatch.topk(x, 4, workspace=torch.zeros(4, dtype=torch.int32))
    assert out.shape == (2, 4)


def test_logits_requiring_grad():
    x = torch.randn(2, 100, requires_grad=True)
    out, values = gvr_dispatch.topk(x, 4, return_values=True)
    assert not values.requires_grad
    assert torch.equal(values, torch.gather(x.detach(), 1, out.long()))
