"""The CPU route: which engine serves a CPU call (``gvr_dispatch.cpu.cpu_route``), and that
the ``torch.topk`` route keeps the contract (exact multiset, values bit for bit, the output
buffers filled in place) while ``deterministic=True`` and ``sorted=True`` stay on the numba
engine with their tie and order rules."""

from __future__ import annotations

import gvr_dispatch
import numpy as np
import pytest
import torch
from gvr_dispatch import cpu
from gvr_reference import oracle
from gvr_reference.workloads import make_dense_batch

FAMILIES = ("gaussian", "tie_flood", "pos_inf", "neg_inf", "nan", "signed_zero", "denormals")


def test_route_table():
    narrow = cpu.dense_windows_of(None, 8, 1024)
    assert isinstance(narrow, cpu.FullRows) and narrow.width == 1024
    assert cpu.cpu_route(narrow, 512, False, False) == "torch"
    assert cpu.cpu_route(narrow, 512, True, False) == "numba"  # smallest-index ties
    assert cpu.cpu_route(narrow, 512, False, True) == "numba"  # index order among ties
    assert cpu.cpu_route(narrow, 1024, False, False) == "numba"  # n <= k: 0..n-1, no select
    wide = cpu.dense_windows_of(None, 8, cpu.TORCH_MAX_WIDTH)
    assert cpu.cpu_route(wide, 512, False, False) == "numba"
    ragged = cpu.dense_windows_of(torch.full((8,), 1024, dtype=torch.int32), 8, 1024)
    assert not isinstance(ragged, cpu.FullRows)
    assert cpu.cpu_route(ragged, 512, False, False) == "numba"


def test_full_rows_are_shared_and_read_only():
    a = cpu.dense_windows_of(None, 3, 100)
    assert a is cpu.dense_windows_of(None, 3, 100)
    assert not a.lengths.flags.writeable and not a.starts.flags.writeable
    assert a.lengths.tolist() == [100] * 3 and a.starts.tolist() == [0] * 3


@pytest.mark.parametrize("family", FAMILIES)
def test_torch_route_is_exact(family, monkeypatch):
    calls = []
    real = torch.topk

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "topk", spy)
    k = 64
    b = make_dense_batch(7, rows=9, k=k, width=1000, family=family)
    x = torch.from_numpy(np.ascontiguousarray(b.arena[:, : b.width]))
    out = torch.full((9, k), 123, dtype=torch.int32)
    values = torch.full((9, k), 123.0)
    res = gvr_dispatch.topk(x, k, out=out, values=values)
    assert res[0] is out and res[1] is values
    assert calls == [k]  # the torch route ran
    b.check(out.numpy(), values.numpy()).raise_if_failed()
    # values are the selected logits bit for bit
    picked = torch.gather(x, 1, out.long())
    assert torch.equal(picked.view(torch.int32), values.view(torch.int32))
    assert gvr_dispatch.topk(x, k).dtype == torch.int32


def test_deterministic_and_sorted_stay_on_numba(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("torch.topk must not serve this call")

    x = torch.zeros(3, 500)
    x[:, 100:] = 1.0
    monkeypatch.setattr(torch, "topk", fail)
    out = gvr_dispatch.topk(x, 10, deterministic=True)
    assert out.tolist() == [list(range(100, 110))] * 3
    out, values = gvr_dispatch.topk(x, 10, sorted=True, return_values=True)
    ref_idx, ref_val = oracle.topk_dense(x.numpy(), 10, sorted=True, return_values=True)
    assert out.tolist() == ref_idx.tolist() and values.tolist() == ref_val.tolist()
