"""Engine adapters against the oracle, including each peer's quirks: flat-packed wide index
buffers, stride arguments, value padding, units of ``max_seq_len``, row-window semantics."""

from __future__ import annotations

import gvr_integration
import numpy as np
import pytest
import torch
from gvr_integration.adapters import flashinfer, trtllm, vllm
from gvr_integration.indexer import block_maxima
from gvr_reference.workloads import make_decode_batch, make_prefill_batch
from integration_helpers import DEVICES, NEG_FLT_MAX, SEED, check, logits_of, rng, tensor


def decode_batch(
    *,
    k,
    next_n=1,
    cr=1,
    batch=6,
    width=900,
    family="dsa_like",
    lengths="ragged",
    stride=None,
    salt=0,
):
    return make_decode_batch(
        rng("adapter-decode", k, next_n, cr, family, lengths, salt),
        batch=batch,
        next_n=next_n,
        compress_ratio=cr,
        k=k,
        width=width,
        row_stride=stride,
        family=family,
        lengths=lengths,
    )


def prefill_batch(*, k, rows=9, width=800, family="gaussian", lengths="ragged", salt=0):
    return make_prefill_batch(
        rng("adapter-prefill", k, family, lengths, salt),
        rows=rows,
        k=k,
        width=width,
        family=family,
        lengths=lengths,
    )


@pytest.fixture
def spy(monkeypatch):
    """Record the keyword arguments the adapters pass to the ops wrappers."""
    calls = []
    for name in ("topk_decode", "topk_prefill"):
        real = getattr(gvr_integration.ops, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, kwargs))
            return _real(*args, **kwargs)

        monkeypatch.setattr(gvr_integration.ops, name, wrapper)
    return calls


# ============================================================================ TensorRT-LLM
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("next_n,cr", [(1, 1), (2, 1), (3, 4), (2, 4)])
@pytest.mark.parametrize("family,lengths", [("dsa_like", "ragged"), ("tie_flood", "edge")])
def test_trt_indexer_topk_decode(device, next_n, cr, family, lengths):
    k = 256
    b = decode_batch(k=k, next_n=next_n, cr=cr, family=family, lengths=lengths, stride=908)
    indices = torch.full((b.rows, k), 99, dtype=torch.int32, device=device)
    out = trtllm.indexer_topk_decode(
        logits_of(b, device), tensor(b.kv_lens, device), indices, next_n, k, compress_ratio=cr
    )
    assert out is None
    check(b, indices)


@pytest.mark.parametrize("device", DEVICES)
def test_trt_decode_wide_indices_are_flat_packed(device):
    k, extra = 128, 37
    b = decode_batch(k=k, next_n=2, lengths="edge")
    indices = torch.full((b.rows, k + extra), -7, dtype=torch.int32, device=device)
    trtllm.indexer_topk_decode(logits_of(b, device), tensor(b.kv_lens, device), indices, 2, k)
    flat = indices.view(-1)
    check(b, flat[: b.rows * k].view(b.rows, k))
    assert bool((flat[b.rows * k :] == -7).all()), "elements past rows * k must stay untouched"


@pytest.mark.parametrize("device", DEVICES)
def test_trt_decode_accepts_and_ignores_hints(device):
    k = 64
    b = decode_batch(k=k, next_n=2, cr=4)
    logits, kv = logits_of(b, device), tensor(b.kv_lens, device)
    junk = torch.randint(-5, 10**6, (b.rows // 2, k), dtype=torch.int32, device=device)
    indices = torch.empty((b.rows, k), dtype=torch.int32, device=device)
    trtllm.indexer_topk_decode(
        logits,
        kv,
        indices,
        2,
        k,
        compress_ratio=4,
        pre_idx=junk,
        heuristic_scratch=torch.empty(b.rows, k, device=device),
        radix_aux_indices=junk,
        radix_aux_logits=torch.empty(1, device=device),
    )
    check(b, indices)


def test_trt_decode_envelope_defaults_to_width_tokens(spy):
    b = decode_batch(k=32, next_n=1, cr=4, width=300)
    indices = torch.empty((b.rows, 32), dtype=torch.int32)
    trtllm.indexer_topk_decode(
        logits_of(b, "cpu"), tensor(b.kv_lens, "cpu"), indices, 1, 32, compress_ratio=4
    )
    assert spy[-1] == ("topk_decode", spy[-1][1]) and spy[-1][1]["max_seq_len"] == 1200
    trtllm.indexer_topk_decode(
        logits_of(b, "cpu"),
        tensor(b.kv_lens, "cpu"),
        indices,
        1,
        32,
        compress_ratio=4,
        max_seq_len=777,
    )
    assert spy[-1][1]["max_seq_len"] == 777


def test_trt_decode_checks_like_the_peer():
    b = decode_batch(k=16, next_n=2, batch=3, width=200)
    logits, kv = logits_of(b, "cpu"), tensor(b.kv_lens, "cpu")
    ok = torch.empty((6, 16), dtype=torch.int32)
    with pytest.raises(ValueError, match="next_n must equal"):
        trtllm.indexer_topk_decode(logits, kv[:2], ok, 2, 16)
    with pytest.raises(ValueError, match="indices.size\\(0\\)"):
        trtllm.indexer_topk_decode(logits, kv, torch.empty((5, 16), dtype=torch.int32), 2, 16)
    with pytest.raises(ValueError, match="index_topk"):
        trtllm.indexer_topk_decode(logits, kv, torch.empty((6, 8), dtype=torch.int32), 2, 16)
    with pytest.raises(ValueError, match="next_n must be >= 1"):
        trtllm.indexer_topk_decode(logits, kv, ok, 0, 16)
    with pytest.raises(ValueError, match="contiguous"):
        trtllm.indexer_topk_decode(logits, kv, torch.empty((16, 6), dtype=torch.int32).t(), 2, 16)
    with pytest.raises(ValueError, match="seq_lens must be 1-D"):
        trtllm.indexer_topk_decode(logits, kv.view(3, 1), ok, 2, 16)
    with pytest.raises(TypeError, match="int32"):
        trtllm.indexer_topk_decode(logits, kv, ok.long(), 2, 16)
    for cr, error in ((None, TypeError), ("4", TypeError), (3, ValueError)):
        with pytest.raises(error, match="compress_ratio must be"):
            trtllm.indexer_topk_decode(logits, kv, ok, 2, 16, compress_ratio=cr)
    with pytest.raises(TypeError, match="seq_lens must be torch.int32, got torch.int64"):
        trtllm.indexer_topk_decode(logits, kv.long(), ok, 2, 16)
    with pytest.raises(TypeError, match="sequence_lengths must be torch.int32"):
        trtllm.TopK(16)(logits, ok, is_prefill=False, sequence_lengths=kv.long(), next_n=2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lengths", ["ragged", "edge"])
def test_trt_indexer_topk_prefill(device, lengths):
    k = 128
    b = prefill_batch(k=k, lengths=lengths)
    indices = torch.full((b.rows, k), 5, dtype=torch.int32, device=device)
    trtllm.indexer_topk_prefill(
        logits_of(b, device), tensor(b.row_starts, device), tensor(b.row_ends, device), indices, k
    )
    check(b, indices)
    wide = torch.full((b.rows, k + 3), -9, dtype=torch.int32, device=device)
    trtllm.indexer_topk_prefill(
        logits_of(b, device), tensor(b.row_starts, device), tensor(b.row_ends, device), wide, k
    )
    check(b, wide.view(-1)[: b.rows * k].view(b.rows, k))
    assert bool((wide.view(-1)[b.rows * k :] == -9).all())


def test_trt_prefill_checks():
    b = prefill_batch(k=8, rows=4, width=100)
    logits = logits_of(b, "cpu")
    s, e = tensor(b.row_starts, "cpu"), tensor(b.row_ends, "cpu")
    with pytest.raises(ValueError, match="one entry per row"):
        trtllm.indexer_topk_prefill(logits, s[:3], e, torch.empty((4, 8), dtype=torch.int32), 8)
    with pytest.raises(ValueError, match="at least rows"):
        trtllm.indexer_topk_prefill(logits, s, e, torch.empty((2, 8), dtype=torch.int32), 8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", [None, trtllm.TopKImplementation.CUTE_DSL_GVR, "CUDA_RADIX"])
def test_trt_topk_module_decode_and_prefill(device, impl):
    k, cr = 128, 4
    module = trtllm.TopK(
        k,
        decode_implementation=impl,
        prefill_implementation=impl,
        compress_ratio=cr,
        gvr_self_sampling=False,
    )
    assert not module.needs_gvr_prior
    assert "top_k=128" in repr(module)
    b = decode_batch(k=k, next_n=2, cr=cr, lengths="edge")
    out = torch.full((b.rows, k), 3, dtype=torch.int32, device=device)
    got = module(
        logits_of(b, device),
        out,
        is_prefill=False,
        sequence_lengths=tensor(b.kv_lens, device),
        next_n=2,
        max_seq_len=b.width,
        gvr_ext_kwargs={"gvr_prior_indices": torch.zeros(b.rows // 2, k, dtype=torch.int32)},
    )
    assert got is out
    check(b, out)
    p = prefill_batch(k=k)
    pout = torch.empty((p.rows, k), dtype=torch.int32, device=device)
    got = module(
        logits_of(p, device),
        pout,
        is_prefill=True,
        row_starts=tensor(p.row_starts, device),
        row_ends=tensor(p.row_ends, device),
    )
    assert got is pout
    check(p, pout)


def test_trt_topk_module_units_and_errors(spy):
    module = trtllm.TopK(32, compress_ratio=4)
    b = decode_batch(k=32, next_n=1, cr=4, width=250)
    logits, kv = logits_of(b, "cpu"), tensor(b.kv_lens, "cpu")
    out = torch.empty((b.rows, 32), dtype=torch.int32)
    module(logits, out, is_prefill=False, sequence_lengths=kv, max_seq_len=250)
    assert spy[-1][1]["max_seq_len"] == 1000  # compressed units times the ratio
    module(logits, out, is_prefill=False, sequence_lengths=kv)
    assert spy[-1][1]["max_seq_len"] == 1000  # default: the width, in tokens
    check(b, out)
    # the block-maxima extension reaches the ops, decode and prefill
    bm = block_maxima(logits)
    out.fill_(7)
    module(logits, out, is_prefill=False, sequence_lengths=kv, block_max=bm)
    assert spy[-1][0] == "topk_decode" and spy[-1][1]["block_max"] is bm
    check(b, out)
    p = prefill_batch(k=32)
    plog = logits_of(p, "cpu")
    pbm, pout = block_maxima(plog), torch.empty((p.rows, 32), dtype=torch.int32)
    module(plog, pout, is_prefill=True, row_starts=tensor(p.row_starts, "cpu"),
           row_ends=tensor(p.row_ends, "cpu"), block_max=pbm)  # fmt: skip
    assert spy[-1][0] == "topk_prefill" and spy[-1][1]["block_max"] is pbm
    check(p, pout)
    with pytest.raises(ValueError, match="sequence_lengths"):
        module(logits, out, is_prefill=False, scan_lengths=kv)
    with pytest.raises(ValueError, match="row_starts and row_ends"):
        module(logits, out, is_prefill=True)
    with pytest.raises(ValueError, match="power of two"):
        trtllm.TopK(32, compress_ratio=3)
    # compress_ratio 1: scan_lengths are in the same units and stand in for the lengths.
    plain = trtllm.TopK(32)
    b1 = decode_batch(k=32, next_n=2, width=250)
    out1 = torch.empty((b1.rows, 32), dtype=torch.int32)
    plain(
        logits_of(b1, "cpu"),
        out1,
        is_prefill=False,
        scan_lengths=tensor(b1.kv_lens, "cpu"),
        next_n=2,
    )
    check(b1, out1)


# ============================================================================ FlashInfer
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("next_n,cr", [(1, 1), (2, 4), (4, 1)])
@pytest.mark.parametrize("backend", ["auto", "gvr_2"])
def test_flashinfer_top_k_varlen(device, next_n, cr, backend):
    k = 512
    b = decode_batch(k=k, next_n=next_n, cr=cr, width=1500, lengths="edge", family="neg_inf")
    idx, vals = flashinfer.top_k_varlen(
        logits_of(b, device),
        tensor(b.kv_lens, device),
        k,
        compress_ratio=cr,
        next_n=next_n,
        backend=backend,
    )
    assert vals is None and idx.dtype == torch.int32 and idx.shape == (b.rows, k)
    check(b, idx)
    idx, vals = flashinfer.top_k_varlen(
        logits_of(b, device),
        tensor(b.kv_lens, device),
        k,
        compress_ratio=cr,
        next_n=next_n,
        return_values=True,
        backend=backend,
    )
    check(b, idx, vals)  # values pad -FLT_MAX beside -1


@pytest.mark.parametrize("device", DEVICES)
def test_flashinfer_out_buffers_and_radix_cutlass_padding(device):
    k = 200
    b = decode_batch(k=k, next_n=2, lengths="edge")
    out_i = torch.empty((b.rows, k), dtype=torch.int32, device=device)
    out_v = torch.empty((b.rows, k), device=device)
    idx, vals = flashinfer.top_k_varlen(
        logits_of(b, device),
        tensor(b.kv_lens, device),
        k,
        next_n=2,
        out_indices=out_i,
        out_values=out_v,
        backend="radix_cutlass",
    )
    assert idx is out_i and vals is out_v
    pad = idx < 0
    assert bool(pad.any()), "the edge lengths include short rows"
    assert bool((vals[pad] == 0).all()), "radix_cutlass pads values with 0"
    check(b, idx, torch.where(pad, torch.full_like(vals, NEG_FLT_MAX), vals))


def test_flashinfer_errors_and_ignored_arguments(spy):
    b = decode_batch(k=16, next_n=2, batch=3, width=120)
    logits, kv = logits_of(b, "cpu"), tensor(b.kv_lens, "cpu")
    with pytest.raises(ValueError, match="seq_lens.shape\\[0\\] \\* next_n"):
        flashinfer.top_k_varlen(logits, kv, 16, next_n=1)
    with pytest.raises(ValueError, match="next_n must be >= 1"):
        flashinfer.top_k_varlen(logits, kv, 16, next_n=0)
    with pytest.raises(ValueError, match="backend"):
        flashinfer.top_k_varlen(logits, kv, 16, next_n=2, backend="sglang")
    for cr, error in ((None, TypeError), ("4", TypeError), (3, ValueError)):
        with pytest.raises(error, match="compress_ratio must be"):
            flashinfer.top_k_varlen(logits, kv, 16, next_n=2, compress_ratio=cr)
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        flashinfer.top_k_varlen(logits, kv, 0, next_n=2)
    with pytest.raises(TypeError, match="top_k must be an int, got float"):
        flashinfer.top_k_varlen(logits, kv, 16.0, next_n=2)
    with pytest.raises(TypeError, match="return_values must be a bool, got str"):
        flashinfer.top_k_varlen(logits, kv, 16, next_n=2, return_values="no")
    rows = logits.shape[0]
    with pytest.raises(ValueError, match="seq_lens must be on the logits device"):
        flashinfer.top_k_varlen(
            logits, torch.full((rows,), 9, dtype=torch.int32, device="meta"), 16,
            row_starts=torch.zeros(rows, dtype=torch.int32),
        )  # fmt: skip
    idx, _ = flashinfer.top_k_varlen(
        logits,
        kv,
        16,
        pre_idx=torch.zeros(3, 16, dtype=torch.int32),
        next_n=2,
        load_balance=False,
        approx_ties=True,
        workspace={"gvr2_workspace": None, "other": 1},
    )
    check(b, idx)
    assert spy[-1][1]["max_seq_len"] == 120  # width x compress_ratio: no host read


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("absolute", [False, True])
def test_flashinfer_windowed_row_starts(device, absolute):
    k = 100
    p = prefill_batch(k=k, rows=10, width=700)
    starts = tensor(p.row_starts, device)
    lens = tensor(p.row_ends - p.row_starts, device)
    idx, vals = flashinfer.top_k_varlen(
        logits_of(p, device),
        lens,
        k,
        row_starts=starts,
        absolute_indices=absolute,
        return_values=True,
    )
    local = torch.where(idx >= 0, idx - starts.unsqueeze(1), idx) if absolute else idx
    check(p, local, vals)


def test_flashinfer_windows_clamp_to_the_width():
    logits = torch.randn(3, 50)
    starts = torch.tensor([45, 50, 60], dtype=torch.int32)
    lens = torch.tensor([20, 5, 5], dtype=torch.int32)
    idx, _ = flashinfer.top_k_varlen(logits, lens, 8, row_starts=starts, absolute_indices=True)
    assert sorted(idx[0, :5].tolist()) == [45, 46, 47, 48, 49] and bool((idx[0, 5:] == -1).all())
    assert bool((idx[1:] == -1).all()), "windows at or past the width are empty"
    # start + length past int32: the end is still the width (no wrap to a negative end)
    big = torch.tensor([2**31 - 5, 2**31 - 1, 5], dtype=torch.int32)
    near = torch.tensor([10, 0, -(2**31)], dtype=torch.int32)
    idx, _ = flashinfer.top_k_varlen(logits, big, 3, row_starts=near, absolute_indices=True)
    assert sorted(idx[0].tolist()) == sorted((torch.topk(logits[0, 10:], 3).indices + 10).tolist())
    assert sorted(idx[1].tolist()) == sorted(torch.topk(logits[1], 3).indices.tolist())
    assert bool((idx[2] == -1).all()), "a start before column 0 with a short length is empty"
    with pytest.raises(ValueError, match="windowed"):
        flashinfer.top_k_varlen(logits, lens, 8, row_starts=starts, compress_ratio=4)


# ============================================================================ vLLM
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_vllm_top_k_per_row_decode(device, next_n):
    k = 256
    b = decode_batch(k=k, next_n=next_n, width=1000, stride=1024, lengths="edge", batch=8)
    logits = logits_of(b, device)
    indices = torch.full((b.rows, k), 11, dtype=torch.int32, device=device)
    vllm.top_k_per_row_decode(
        logits,
        next_n,
        tensor(b.kv_lens, device),
        indices,
        b.rows,
        logits.stride(0),
        logits.stride(1),
        k,
    )
    check(b, indices)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_strides_come_from_the_arguments(device):
    k = 64
    b = decode_batch(k=k, next_n=1, width=500, stride=512)
    arena = tensor(b.arena, device)
    indices = torch.empty((b.rows, k), dtype=torch.int32, device=device)
    # A one-row tensor: the rows come from num_rows and stride0, not from its shape.
    vllm.top_k_per_row_decode(
        arena[:1, :500], 1, tensor(b.kv_lens, device), indices, b.rows, 512, 1, k
    )
    check(b, indices)
    # Interleaved columns (stride1 = 2), the other lanes poisoned.
    inter = torch.full((b.rows, 1000), 3e38, device=device)
    inter[:, ::2] = torch.from_numpy(np.ascontiguousarray(b.logits)).to(device)
    view = inter[:, ::2]
    vllm.top_k_per_row_decode(
        view, 1, tensor(b.kv_lens, device), indices, b.rows, view.stride(0), view.stride(1), k
    )
    check(b, indices)


def test_vllm_view_outside_the_storage_is_refused():
    logits = torch.randn(4, 100)
    seq = torch.full((4,), 100, dtype=torch.int32)
    out = torch.empty((4, 8), dtype=torch.int32)
    with pytest.raises(ValueError, match="storage"):
        vllm.top_k_per_row_decode(logits, 1, seq, out, 4, 128, 1, 8)
    with pytest.raises(ValueError, match=">= 0"):
        vllm.top_k_per_row_decode(logits, 1, seq, out, 4, -100, 1, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_seq_lens_layouts(device):
    k, next_n = 32, 2
    b = decode_batch(k=k, next_n=next_n, width=300, batch=5)
    logits = logits_of(b, device)
    kv = tensor(b.kv_lens, device)
    idx = torch.empty((b.rows, k), dtype=torch.int32, device=device)
    s0, s1 = logits.stride()
    # (B, 1) is the request layout; extra trailing entries are not read.
    vllm.top_k_per_row_decode(logits, next_n, kv.view(-1, 1), idx, b.rows, s0, s1, k)
    check(b, idx)
    longer = torch.cat([kv, torch.full((3,), 10**6, dtype=torch.int32, device=device)])
    vllm.top_k_per_row_decode(logits, next_n, longer, idx, b.rows, s0, s1, k)
    check(b, idx)
    # (B, next_n): each entry is its row's own end (native speculative-decode layout).
    ends = torch.from_numpy(b.windows.lengths.astype(np.int32)).to(device).view(-1, next_n)
    idx.fill_(-5)
    vllm.top_k_per_row_decode(logits, next_n, ends.contiguous(), idx, b.rows, s0, s1, k)
    check(b, idx)
    with pytest.raises(ValueError, match="cover"):
        vllm.top_k_per_row_decode(logits, next_n, kv[:2], idx, b.rows, s0, s1, k)
    with pytest.raises(ValueError, match="multiple of next_n"):
        vllm.top_k_per_row_decode(logits, next_n, kv, idx, b.rows - 1, s0, s1, k)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_wide_indices_flat_packed_and_zero_rows(device):
    k = 48
    b = decode_batch(k=k, next_n=1, width=400)
    logits = logits_of(b, device)
    wide = torch.full((b.rows, 100), -3, dtype=torch.int32, device=device)
    vllm.top_k_per_row_decode(
        logits, 1, tensor(b.kv_lens, device), wide, b.rows, *logits.stride(), k
    )
    check(b, wide.view(-1)[: b.rows * k].view(b.rows, k))
    assert bool((wide.view(-1)[b.rows * k :] == -3).all())
    before = wide.clone()
    vllm.top_k_per_row_decode(logits, 1, tensor(b.kv_lens, device), wide, 0, *logits.stride(), k)
    assert torch.equal(wide, before)


def test_vllm_runtime_k_beyond_2048_on_cpu():
    """vLLM's tests use K = 3000; the CPU engine serves any K (the kernels stop at 2048)."""
    k = 3000
    b = decode_batch(k=k, next_n=1, width=5000, batch=3, lengths="full")
    logits = logits_of(b, "cpu")
    idx = torch.empty((b.rows, k), dtype=torch.int32)
    vllm.top_k_per_row_decode(logits, 1, tensor(b.kv_lens, "cpu"), idx, b.rows, *logits.stride(), k)
    check(b, idx)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_top_k_per_row_prefill(device):
    k = 128
    p = prefill_batch(k=k, rows=11, lengths="edge")
    logits = logits_of(p, device)
    idx = torch.full((p.rows, k), 8, dtype=torch.int32, device=device)
    vllm.top_k_per_row_prefill(
        logits,
        tensor(p.row_starts, device),
        tensor(p.row_ends, device),
        idx,
        p.rows,
        *logits.stride(),
        k,
    )
    check(p, idx)  # window-local


def test_seed_is_reported():
    assert isinstance(SEED, int)
