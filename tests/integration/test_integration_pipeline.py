"""The DSA decode pipeline on the real sample: indexer, row lengths, schedule, sparse attention,
and end-to-end steps checked against the oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gvr_integration.attention import sparse_attention, torch_topk_selection
from gvr_integration.indexer import decode_row_lengths, lightning_indexer
from gvr_integration.pipeline import DecodeConfig, DSADecodePipeline, decode_schedule
from gvr_reference.realdata import indexer_scores, load_sample
from gvr_reference.windows import decode_row_lengths as ref_row_lengths
from integration_helpers import DEVICES, rng


@pytest.fixture(scope="module")
def sample():
    return load_sample()


# ---------------------------------------------------------------------------- indexer
@pytest.mark.parametrize(
    "next_n,cr,weights", [(1, 1, "positive"), (2, 4, "signed"), (3, 1, "signed")]
)
def test_indexer_matches_the_float64_reference(sample, next_n, cr, weights):
    """The torch fp32 indexer agrees with realdata's float64-then-rounded scores."""
    groups = np.array([0, 7, 20 // next_n])
    positions = (groups[:, None] * next_n + np.arange(next_n)).reshape(-1) + sample.positions[0]
    ref, kv = indexer_scores(sample, positions, next_n=next_n, compress_ratio=cr, weights=weights)
    pipe = DSADecodePipeline(
        sample, DecodeConfig(k=256, next_n=next_n, compress_ratio=cr, weights=weights, batch=3)
    )
    inp = pipe.inputs(groups)
    assert np.array_equal(inp.kv_lens.numpy(), kv)
    got = pipe.scores(inp).numpy()
    width = ref.shape[1]
    assert np.array_equal(np.isinf(got[:, :width]), np.isinf(ref))
    assert bool(np.isinf(got[:, width:]).all())
    finite = np.isfinite(ref)
    scale = np.abs(np.where(finite, ref, 0)).max(axis=1, keepdims=True)
    diff = got[:, :width].astype(np.float64) - np.where(finite, ref, 0)
    err = np.abs(np.where(finite, diff, 0)) / scale
    assert err.max() < 1e-5, err.max()


def test_indexer_formula_on_a_tiny_case():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, generator=g)
    w = torch.randn(2, 3, generator=g)
    k = torch.randn(5, 4, generator=g)
    got = lightning_indexer(q, w, k, torch.tensor([5, 3]))
    want = torch.zeros(2, 5)
    for t in range(2):
        for s in range(5):
            want[t, s] = sum(w[t, h] * torch.relu(q[t, h] @ k[s]) for h in range(3))
    want[1, 3:] = float("-inf")
    torch.testing.assert_close(got, want)
    buf = torch.empty(2, 8)[:, :5]
    assert lightning_indexer(q, w, k, out=buf) is buf
    with pytest.raises(ValueError, match="shapes"):
        lightning_indexer(q, w[:, :2], k)


_Q, _W, _K = torch.ones(4, 2, 16), torch.ones(4, 2), torch.ones(50, 16)


def _buffers():
    """Valid ``out`` and ``block_max`` buffers of the bad-input cases, filled with 7."""
    return dict(out=torch.full((4, 50), 7.0), block_max=torch.full((4, 2), 7.0))


def _overlapping():
    arena = torch.full((4, 60), 7.0)
    return dict(out=arena[:, :50], block_max=arena[:, 48:50])


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(q=_Q.double()), TypeError, "q must be a float32"),
        (dict(weights=_W.half()), TypeError, "weights must be a float32"),
        (dict(keys=[[1.0] * 16] * 50), TypeError, "keys must be a float32"),
        (dict(q=_Q[:, 0]), ValueError, "q must be 3-D"),
        (dict(keys=_K[:, :8]), ValueError, "shapes do not fit"),
        (dict(lengths=[1, 2, 3, 4]), TypeError, "lengths must be an integer tensor"),
        (dict(lengths=torch.tensor([50.0, 10, 0, 3])), TypeError, "lengths must be an integer"),
        (dict(lengths=torch.tensor([10])), ValueError, r"lengths must have shape \(4,\)"),
        (dict(lengths=torch.tensor([50, 10, 0])), ValueError, "lengths must have shape"),
        (dict(out=torch.full((4, 50), 7, dtype=torch.int32)), TypeError, "out must be a float32"),
        (dict(out=torch.full((4, 50), 7.0, dtype=torch.float64)), TypeError, "out must be a"),
        (dict(out=torch.full((4, 49), 7.0)), ValueError, r"out must be a float32 \[4, 50\]"),
        (dict(out=torch.full((4, 50), 7.0, requires_grad=True)), ValueError, "out must not"),
        (dict(block=3), ValueError, "block must be a power of two"),
        (dict(block=32.0), TypeError, "block must be an int"),
        (dict(block_max=torch.full((4, 3), 7.0)), ValueError, "block_max must be"),
        (dict(block_max=[[7.0] * 2] * 4), TypeError, "block_max must be a float32 tensor"),
        (
            dict(block_max=torch.full((4, 2), 7.0, requires_grad=True)),
            ValueError,
            "block_max must not",
        ),
        (_overlapping(), ValueError, "out and block_max must not share memory"),
    ],
)
def test_indexer_rejects_bad_input_before_writing(kwargs, err, match):
    """Each case differs from a valid call (with both buffers) by one argument; no buffer
    given, valid or not, is written."""
    args = dict(q=_Q, weights=_W, keys=_K, lengths=None, block=32, **_buffers())
    args.update(kwargs)
    bufs = [b for b in (args["out"], args["block_max"]) if isinstance(b, torch.Tensor)]
    with pytest.raises(err, match=match):
        lightning_indexer(
            args["q"], args["weights"], args["keys"], args["lengths"],
            out=args["out"], block_max=args["block_max"], block=args["block"],
        )  # fmt: skip
    for b in bufs:
        assert bool((b.detach() == 7.0).all()), "a rejected call wrote into a buffer"


def test_indexer_base_call_of_the_bad_input_cases_is_valid():
    bufs = _buffers()
    got = lightning_indexer(_Q, _W, _K, None, **bufs, block=32)
    assert got is bufs["out"] and bool((got == 32.0).all())  # 2 heads x relu(16) each
    assert bool((bufs["block_max"] == 32.0).all())
    with torch.no_grad():  # a buffer that requires grad is fine without a graph to keep
        out = torch.zeros(4, 50, requires_grad=True)
        assert lightning_indexer(_Q, _W, _K, out=out) is out
    assert lightning_indexer(torch.ones(0, 2, 16), torch.ones(0, 2), _K).shape == (0, 50)


@pytest.mark.parametrize("next_n,cr", [(1, 1), (2, 4), (3, 2), (4, 1)])
def test_decode_row_lengths_match_the_reference(next_n, cr):
    kv = rng("lengths", next_n, cr).integers(0, 3000, 13).astype(np.int32)
    got = decode_row_lengths(torch.from_numpy(kv), next_n, cr, width=600)
    assert np.array_equal(got.numpy(), ref_row_lengths(kv, next_n, cr, 600))
    with pytest.raises(ValueError):
        decode_row_lengths(torch.from_numpy(kv), 0)


def test_decode_schedule():
    steps = decode_schedule(64, 2, 4)
    assert len(steps) == 8
    seen = np.concatenate(steps)
    assert sorted(seen.tolist()) == list(range(32)), "every group exactly once by default"
    for a, b in zip(steps, steps[1:], strict=False):
        assert np.array_equal((a + 1) % 32, b), "each request advances one group per step"
    wrapped = decode_schedule(64, 1, 2, steps=40)
    assert wrapped[31][1] == 63 and wrapped[32][1] == 0  # the slot wraps to a new request
    with pytest.raises(ValueError):
        decode_schedule(64, 2, 33)
    with pytest.raises(ValueError):
        decode_schedule(64, 1, 1, steps=0)


# ---------------------------------------------------------------------------- attention
def test_sparse_attention_against_a_float64_loop():
    g = torch.Generator().manual_seed(1)
    t, h, d, s = 3, 2, 8, 20
    q, keys, vals = (
        torch.randn(t, h, d, generator=g),
        torch.randn(s, d, generator=g),
        torch.randn(s, 5, generator=g),
    )
    idx = torch.tensor([[3, 0, 19, 7, -1, -1], [1, 2, 3, 4, 5, 6], [-1] * 6], dtype=torch.int32)
    got = sparse_attention(q, keys, vals, idx)
    assert got.shape == (t, h, 5)
    for r in range(t):
        sel = [int(i) for i in idx[r] if i >= 0]
        for head in range(h):
            if not sel:
                assert bool((got[r, head] == 0).all())
                continue
            lo = torch.tensor([float(q[r, head].double() @ keys[i].double()) for i in sel])
            p = torch.softmax(lo / math.sqrt(d), 0)
            want = sum(p[j] * vals[i].double() for j, i in enumerate(sel))
            torch.testing.assert_close(got[r, head].double(), want, atol=1e-6, rtol=1e-5)


def test_torch_topk_selection_pads_short_rows():
    scores = torch.tensor([[5.0, 1.0, 3.0, float("-inf")], [2.0, 9.0, 4.0, 7.0]])
    sel = torch_topk_selection(scores, torch.tensor([2, 4]), 3)
    assert sorted(sel[0].tolist()) == [-1, 0, 1]
    assert sorted(sel[1].tolist()) == [1, 2, 3]


# ---------------------------------------------------------------------------- pipeline
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "cfg",
    [
        DecodeConfig(k=2048, next_n=1, compress_ratio=1, weights="positive", batch=2),
        DecodeConfig(k=512, next_n=2, compress_ratio=4, weights="signed", batch=3),
        DecodeConfig(k=1024, next_n=2, compress_ratio=4, weights="positive", batch=2),
    ],
    ids=lambda c: c.label().replace(" ", ","),
)
def test_pipeline_steps_are_exact(sample, device, cfg):
    pipe = DSADecodePipeline(sample, cfg, device)
    tol = 1e-4 * float(pipe.values.abs().max())
    for i, groups in enumerate(
        decode_schedule(len(sample.positions), cfg.next_n, cfg.batch, steps=3)
    ):
        r = pipe.step(groups, block_skip=i == 1)  # one step with the indexer's block maxima
        assert r.exact, r.summary
        assert r.rows == cfg.rows and r.rows_same_set + r.tie_rows == r.rows
        assert r.attn_max_abs_diff <= tol
        assert 1 <= r.min_len <= r.max_len <= pipe.width


def test_pipeline_detects_a_wrong_selection(sample):
    cfg = DecodeConfig(k=512, next_n=1, batch=2)
    pipe = DSADecodePipeline(sample, cfg)

    def broken(logits, kv_lens):
        idx = pipe.select(logits, kv_lens).clone()
        idx[0, 0] = idx[0, 1]  # a duplicate in place of a selected position
        return idx

    r = pipe.step([0, 10], broken)
    assert not r.exact
    assert "NOT exact" in r.summary


def test_pipeline_rejects_bad_configs(sample):
    with pytest.raises(ValueError, match="compress_ratio"):
        DSADecodePipeline(sample, DecodeConfig(k=64, compress_ratio=2))
    with pytest.raises(ValueError, match="exceeds"):
        DSADecodePipeline(sample, DecodeConfig(k=2048, compress_ratio=4))
    with pytest.raises(ValueError, match="weights"):
        DSADecodePipeline(sample, DecodeConfig(k=64, weights="learned"))


# ---------------------------------------------------------------- block maxima (producer)
def test_block_maxima_match_the_reference_producer_and_hold_the_contract():
    from gvr_integration.indexer import BLOCK, block_maxima
    from gvr_reference.blockskip import block_maxima as ref_maxima
    from gvr_reference.blockskip import contract_violations

    g = torch.Generator().manual_seed(5)
    for width in (1, 31, 32, 33, 1000, 4096):
        for block in (1, 8, BLOCK, 64):
            x = torch.randn(3, width, generator=g)
            x[0, :: max(1, width // 3)] = float("inf")
            x[1, width // 2] = float("nan")
            x[2, : width // 2] = float("-inf")
            x[2, -1] = -0.0
            got = block_maxima(x, block)
            want = ref_maxima(x.numpy(), block)
            assert got.shape == (3, -(-width // block))
            np.testing.assert_array_equal(got.numpy(), want)  # NaN positions equal too
            assert contract_violations(x.numpy(), got.numpy(), block).size == 0


def test_block_maxima_on_strided_scores_and_into_a_buffer():
    from gvr_integration.indexer import block_maxima

    arena = torch.randn(4, 130)
    view = arena[:, :100]  # row stride 130
    buf = torch.empty(4, 4)
    assert block_maxima(view, 32, out=buf) is buf
    want = torch.stack([view[:, i : i + 32].amax(dim=1) for i in range(0, 100, 32)], dim=1)
    assert torch.equal(buf, want)
    # a padded buffer (row stride 6, unit inner stride), as the top-K calls accept it
    padded = torch.full((4, 6), 9.0)
    assert block_maxima(view, 32, out=padded[:, :4]) is not None
    assert torch.equal(padded[:, :4], want) and (padded[:, 4:] == 9.0).all()


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(scores=torch.zeros(2, 8, dtype=torch.float64)), TypeError, "float32"),
        (dict(scores=torch.zeros(8)), ValueError, "2-D"),
        (dict(scores=torch.zeros(2, 8), block=3), ValueError, "block"),
        (dict(scores=torch.zeros(2, 8), block=True), TypeError, "block"),
        (dict(scores=torch.zeros(2, 8), block=32.0), TypeError, "block"),
        (dict(scores=torch.zeros(2, 8), out=torch.zeros(2, 2)), ValueError, "block_max"),
        (
            dict(scores=torch.zeros(2, 64), out=torch.zeros(2, 4, 2)[:, :, 0]),
            ValueError,
            "block_max",
        ),
        # one block a row, but not unit inner stride (what the top-K calls would refuse)
        (dict(scores=torch.zeros(3, 32), out=torch.zeros(1, 3).t()), ValueError, "block_max"),
        # rows that overlap (a broadcast buffer)
        (
            dict(scores=torch.zeros(2, 64), out=torch.zeros(1, 2).expand(2, 2)),
            ValueError,
            "block_max",
        ),
    ],
)
def test_block_maxima_rejects_bad_input(kwargs, err, match):
    from gvr_integration.indexer import block_maxima

    scores = kwargs.pop("scores")
    with pytest.raises(err, match=match):
        block_maxima(scores, **kwargs)


def test_indexer_writes_block_maxima_after_the_length_mask():
    g = torch.Generator().manual_seed(9)
    q = torch.randn(2, 3, 8, generator=g)
    w = torch.randn(2, 3, generator=g)
    k = torch.randn(70, 8, generator=g)
    bm = torch.empty(2, 3)
    scores = lightning_indexer(q, w, k, torch.tensor([70, 20]), block_max=bm)
    from gvr_integration.indexer import block_maxima

    assert torch.equal(bm, block_maxima(scores))
    assert torch.isinf(bm[1, 1:]).all() and bm[1, 1:].lt(0).all()  # blocks past row 1's length
