"""Device-only integration tests (``pytest -m gpu``): CUDA-graph capture of the ops, the
adapters and the pipeline's top-K step, ``torch.compile`` with CUDA graphs, and the demo on
the kernels. The device-parametrized tests of the other files run their ``cuda`` cases too.

Every replay is checked by the oracle's validator on fresh random inputs (seed printed;
``GVR_TEST_SEED`` replays), with ``+3e38`` poison beyond every valid window.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gvr_integration import demo, ops
from gvr_integration.adapters import flashinfer, trtllm, vllm
from gvr_integration.graph import CapturedDecodeTopK
from gvr_integration.pipeline import DecodeConfig, DSADecodePipeline, decode_schedule
from gvr_reference.realdata import load_sample
from gvr_reference.validate import check_prefill
from gvr_reference.workloads import make_decode_batch, make_prefill_batch
from integration_helpers import SEED, check, rng, tensor

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


@pytest.fixture(scope="module", autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    print(f"\nseed {SEED}; {torch.cuda.get_device_name()}")


def batches(rows_per_req, batch, *, k, width, cr, salt="", dtype="float32"):
    """Decode batches of one shape with lengths that grow, shrink and hit the edges (scores
    rounded to ``dtype``)."""
    for i, mode in enumerate(["ragged", "edge", "full", "ragged", "edge"]):
        yield make_decode_batch(
            rng("graph", salt, i),
            batch=batch,
            next_n=rows_per_req,
            compress_ratio=cr,
            k=k,
            width=width,
            family=("dsa_like", "tie_flood", "gaussian", "neg_inf", "two_valued")[i],
            lengths=mode,
            dtype=dtype,
        )


# ---------------------------------------------------------------------------- graph capture
@pytest.mark.parametrize(
    "next_n,cr,k,width,batch,with_values",
    [
        (1, 1, 2048, 8192, 4, False),
        (2, 4, 512, 4096, 3, True),
        (1, 1, 2048, 131072, 1, False),  # long rows: split launches through the graph workspace
        (3, 1, 1024, 20000, 5, True),
    ],
)
def test_captured_decode_replays_exactly(next_n, cr, k, width, batch, with_values):
    stride = width + (-width) % 4 + 64
    cap = CapturedDecodeTopK(
        batch * next_n,
        width,
        k,
        next_n=next_n,
        compress_ratio=cr,
        max_seq_len=width * cr + next_n,
        device=CUDA,
        with_values=with_values,
        row_stride=stride,
    )
    assert cap.logits.stride(0) == stride
    for b in batches(next_n, batch, k=k, width=width, cr=cr, salt=(next_n, cr, k, width)):
        out = cap(tensor(b.logits, CUDA), tensor(b.kv_lens, CUDA))
        assert out.data_ptr() == cap.out.data_ptr()
        check(b, out, cap.values)
    # kv_lens written in place alone (same logits): shrink every request below next_n.
    cap.kv_lens.zero_()
    out = cap()
    assert bool((out == -1).all()), "evicted slots (kv_len < next_n) give empty rows"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_captured_16bit_decode_replays_exactly(dtype):
    """A captured bf16 / fp16 decode step: 16-bit buffers read in place by the 16-bit kernels
    (split rows through the graph workspace), values in the logits dtype, replayed on new
    scores and lengths."""
    name = str(dtype).removeprefix("torch.")
    next_n, cr, k, width, batch = 2, 4, 1024, 40000, 3
    cap = CapturedDecodeTopK(
        batch * next_n,
        width,
        k,
        next_n=next_n,
        compress_ratio=cr,
        max_seq_len=width * cr + next_n,
        device=CUDA,
        with_values=True,
        row_stride=width + (-width) % 8 + 64,
        dtype=dtype,
    )
    assert cap.logits.dtype == dtype and cap.values.dtype == dtype
    for b in batches(next_n, batch, k=k, width=width, cr=cr, salt=("half", name), dtype=name):
        out = cap(tensor(b.logits, CUDA, dtype), tensor(b.kv_lens, CUDA))
        check(b, out, cap.values.float())


def test_captured_op_and_adapters_with_lengths_changed_in_place():
    k, next_n, cr, width, batch = 256, 2, 4, 3000, 4
    rows = batch * next_n
    logits = torch.full((rows, width + 4), float("-inf"), device=CUDA)[:, :width]
    kv = torch.zeros(batch, dtype=torch.int32, device=CUDA)
    outs = {name: torch.empty((rows, k), dtype=torch.int32, device=CUDA) for name in "abc"}
    wide = torch.full((rows, k + 16), -2, dtype=torch.int32, device=CUDA)
    tokens = width * cr

    def step():
        torch.ops.gvr.topk_decode(logits, kv, outs["a"], None, next_n, cr, tokens)
        trtllm.indexer_topk_decode(logits, kv, wide, next_n, k, compress_ratio=cr)
        flashinfer.top_k_varlen(
            logits, kv, k, compress_ratio=cr, next_n=next_n, out_indices=outs["b"]
        )
        ops.topk_decode(
            logits, kv, out=outs["c"], next_n=next_n, compress_ratio=cr, max_seq_len=tokens
        )

    step()  # eager: compiles and resolves every launch the graph will replay
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for b in batches(next_n, batch, k=k, width=width, cr=cr, salt="adapters"):
        logits.copy_(tensor(b.logits, CUDA))
        kv.copy_(tensor(b.kv_lens, CUDA))
        graph.replay()
        for name in "abc":
            check(b, outs[name])
        check(b, wide.view(-1)[: rows * k].view(rows, k))
        assert bool((wide.view(-1)[rows * k :] == -2).all())


def test_captured_vllm_and_prefill_windows_changed_in_place():
    k, rows, width = 512, 6, 5000
    p0 = make_prefill_batch(rng("prefill-graph"), rows=rows, k=k, width=width)
    logits = tensor(p0.arena, CUDA)[:, :width]
    starts = tensor(p0.row_starts, CUDA)
    ends = tensor(p0.row_ends, CUDA)
    seq = (ends - starts).contiguous()
    out_p = torch.empty((rows, k), dtype=torch.int32, device=CUDA)
    out_v = torch.empty((rows, k), dtype=torch.int32, device=CUDA)
    out_d = torch.empty((rows, k), dtype=torch.int32, device=CUDA)

    def step():
        ops.topk_prefill(logits, starts, ends, out=out_p)
        vllm.top_k_per_row_prefill(logits, starts, ends, out_v, rows, *logits.stride(), k)
        vllm.top_k_per_row_decode(logits, 1, seq, out_d, rows, *logits.stride(), k)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i in range(4):
        p = make_prefill_batch(
            rng("prefill-graph", i),
            rows=rows,
            k=k,
            width=width,
            lengths=("ragged", "edge", "full", "ragged")[i],
        )
        logits.copy_(tensor(p.logits, CUDA))
        starts.copy_(tensor(p.row_starts, CUDA))
        ends.copy_(tensor(p.row_ends, CUDA))
        seq.copy_(tensor(p.row_ends, CUDA))  # decode rows [0, row_ends) of the same scores
        graph.replay()
        check(p, out_p)
        check(p, out_v)
        rep = check_prefill(p.logits, np.zeros(rows, np.int32), p.row_ends, k, out_d.cpu().numpy())
        assert rep.ok, f"seed {SEED}\n{rep.summary()}"


# ---------------------------------------------------------------------------- torch.compile
def test_compile_reduce_overhead_replays_the_op():
    """``torch.compile(mode="reduce-overhead")`` (inductor's CUDA-graph mode) over the traced
    op: every call exact while the inputs change between calls."""
    torch._dynamo.reset()
    k, width, batch = 512, 6000, 3

    def f(logits, kv):
        return ops.topk_decode(logits, kv, k, max_seq_len=width + 1).clone()

    cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for i in range(5):
        b = make_decode_batch(
            rng("reduce-overhead", i),
            batch=batch,
            k=k,
            width=width,
            lengths=("ragged", "edge", "full", "ragged", "edge")[i],
        )
        check(b, cf(tensor(b.logits, CUDA), tensor(b.kv_lens, CUDA)))


# ---------------------------------------------------------------------------- pipeline, demo
@pytest.mark.parametrize(
    "cfg",
    [
        DecodeConfig(k=2048, next_n=1, compress_ratio=1, weights="signed", batch=4),
        DecodeConfig(k=512, next_n=2, compress_ratio=4, weights="positive", batch=4),
    ],
    ids=lambda c: c.label().replace(" ", ","),
)
def test_pipeline_with_a_captured_topk(cfg):
    sample = load_sample()
    pipe = DSADecodePipeline(sample, cfg, CUDA)
    cap = CapturedDecodeTopK(
        cfg.rows,
        pipe.width,
        cfg.k,
        next_n=cfg.next_n,
        compress_ratio=cfg.compress_ratio,
        max_seq_len=pipe.max_seq_len,
        device=CUDA,
    )
    tol = 1e-4 * float(pipe.values.abs().max())
    for groups in decode_schedule(len(sample.positions), cfg.next_n, cfg.batch, steps=20):
        for select in (None, cap):
            r = pipe.step(groups, select)
            assert r.exact, r.summary
            assert r.attn_max_abs_diff <= tol


def test_demo_on_the_kernels(tmp_path, capsys):
    path = tmp_path / "gpu.json"
    rc = demo.main(
        [
            "--device",
            "cuda",
            "--k",
            "512",
            "2048",
            "--next-n",
            "1",
            "2",
            "--steps",
            "4",
            "--json",
            str(path),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    rep = json.loads(path.read_text())
    assert rep["ok"] and rep["engine"].startswith("GVR kernels")
    modes = {
        (r["k"], r["next_n"], r["compress_ratio"], r["weights"], r["mode"]) for r in rep["results"]
    }
    assert (2048, 1, 1, "positive", "graph") in modes and (512, 2, 4, "signed", "eager") in modes
