"""The dispatcher's kernel path on a CPU-only machine: a stand-in runtime treats CPU tensors as
the kernel device and stand-in kernels check the launch contract on every call (layout,
workspace, argument order) and answer with the oracle (``dispatch_fakes``).

What runs here is the real dispatcher code: launch keys, the launch table, layouts and their
fallbacks, workspaces per stream and per graph, capture rules, the ``sorted`` epilogue,
logging, and the host cost of a warm call.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import torch
from dispatch_fakes import aligned_empty, fake_dispatcher
from gvr_dispatch.sorting import sort_rows_
from gvr_kernels.routing import route_static
from gvr_kernels.spec import H200
from gvr_reference import oracle
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch

FLT_MIN = torch.finfo(torch.float32).min


def _view(batch):
    return torch.from_numpy(batch.arena)[:, : batch.width]


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("family", ["gaussian", "tie_flood", "nan", "neg_inf"])
@pytest.mark.parametrize("next_n, cr, batch", [(1, 1, 3), (2, 4, 5), (4, 1, 40)])
def test_decode_exact(family, next_n, cr, batch):
    d, _, compiler = fake_dispatcher()
    b = make_decode_batch(
        7,
        batch=batch,
        next_n=next_n,
        compress_ratio=cr,
        k=64,
        width=20000,
        row_stride=20004,
        family=family,
        lengths="edge",
    )
    x, kv = _view(b), _t(b.kv_lens)
    out, values = d.topk_decode(
        x, kv, 64, next_n=next_n, compress_ratio=cr, max_seq_len=20000 * cr, return_values=True
    )
    b.check(out.numpy(), values.numpy()).raise_if_failed()
    call = compiler.calls[-1]
    assert call["logits_ptr"] == x.data_ptr(), "the logits were copied"
    assert call["parts"] == route_static(H200, rows=batch * next_n, n_env=20000, k=64).parts


@pytest.mark.parametrize("lengths", ["ragged", "edge"])
def test_prefill_and_dense_exact(lengths):
    d, _, _ = fake_dispatcher()
    b = make_prefill_batch(3, rows=9, k=32, width=999, row_stride=1000, lengths=lengths)
    out = d.topk_prefill(_view(b), _t(b.row_starts), _t(b.row_ends), 32)
    b.check(out.numpy()).raise_if_failed()
    b = make_dense_batch(4, rows=9, k=32, width=999, row_stride=1000, lengths=lengths)
    out = d.topk(_view(b), 32, _t(b.lengths))
    b.check(out.numpy()).raise_if_failed()
    b = make_dense_batch(5, rows=9, k=32, width=999, row_stride=1000)
    out, values = d.topk(_view(b), 32, return_values=True)
    b.check(out.numpy(), values.numpy()).raise_if_failed()
    modes = {key[1] for key in d.launch_keys()}
    assert modes == {"prefill", "decode", "full"}


def test_sorted_epilogue_matches_oracle_order():
    d, _, compiler = fake_dispatcher()
    b = make_dense_batch(9, rows=12, k=40, width=700, family="tie_flood", lengths="edge")
    x = _view(b)
    # The stand-in kernel permutes rows outside the deterministic mode, so the order is the
    # epilogue's doing.
    out = d.topk(x, 40, _t(b.lengths), sorted=True, deterministic=True)
    ref_idx, ref_val = b.reference(sorted=True, return_values=True)
    np.testing.assert_array_equal(out.numpy(), ref_idx)
    out, values = d.topk(x, 40, _t(b.lengths), sorted=True, return_values=True, deterministic=True)
    np.testing.assert_array_equal(out.numpy(), ref_idx)
    np.testing.assert_array_equal(values.numpy().view(np.uint32), ref_val.view(np.uint32))
    assert all(c["config"].with_values for c in compiler.calls)


def test_sort_rows_special_values():
    nan, inf = float("nan"), float("inf")
    vals = torch.tensor(
        [
            [1.0, nan, -0.0, 0.0, -inf, 3.0, 1.0, FLT_MIN],
            [2.0, 2.0, FLT_MIN, FLT_MIN, FLT_MIN, 2.0, -inf, FLT_MIN],
        ]
    )
    idx = torch.tensor([[9, 4, 7, 2, 0, 5, 3, 8], [6, 1, -1, -1, -1, 3, 2, -1]], dtype=torch.int32)
    sort_rows_(idx, vals)
    assert idx[0].tolist() == [4, 5, 3, 9, 2, 7, 8, 0]  # NaN, 3, 1(3), 1(9), 0(2), -0(7), ...
    assert idx[1].tolist() == [1, 3, 6, 2, -1, -1, -1, -1]
    assert torch.isnan(vals[0, 0]) and vals[0, 1] == 3.0
    assert vals[1, 3] == -inf and (vals[1, 4:] == FLT_MIN).all()


def test_sort_rows_random_against_oracle():
    g = np.random.default_rng(3)
    x = np.round(g.standard_normal((20, 300)).astype(np.float32) * 2) / 2
    ref_idx, ref_val = oracle.topk_dense(x, 50, sorted=True, return_values=True)
    plain_idx, plain_val = oracle.topk_dense(x, 50, return_values=True)
    p = g.permutation(50)
    idx, val = _t(plain_idx[:, p]), _t(plain_val[:, p])
    sort_rows_(idx, val)
    np.testing.assert_array_equal(idx.numpy(), ref_idx)
    np.testing.assert_array_equal(val.numpy(), ref_val)


# ---------------------------------------------------------------------- layouts
def test_single_row_odd_stride_is_restrided_not_copied():
    d, _, compiler = fake_dispatcher()
    arena = aligned_empty((3, 1001))
    arena.copy_(torch.randn(3, 1001))
    x = arena[:1, :999]  # one row, stride 1001
    out = d.topk(x, 16)
    call = compiler.calls[-1]
    assert call["logits_ptr"] == x.data_ptr() and call["stride"] % 4 == 0
    expect = oracle.topk_dense(x.numpy(), 16)
    assert sorted(out[0].tolist()) == sorted(expect[0].tolist())


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: aligned_empty((5, 1001))[:, :999], "row stride"),
        (lambda: aligned_empty((300, 5)).t(), "inner stride"),
        (lambda: aligned_empty((5, 1004))[:, 1:1001], "alignment"),
    ],
    ids=["row-stride", "inner-stride", "alignment"],
)
def test_layout_fallback_copies_and_warns_once(make, reason, caplog):
    d, runtime, compiler = fake_dispatcher()
    x = make()
    x.copy_(torch.randn(x.shape))
    with caplog.at_level(logging.WARNING, logger="gvr"):
        out = d.topk(x, 8)
        out2 = d.topk(x, 8)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0].getMessage()
    assert compiler.calls[-1]["logits_ptr"] != x.data_ptr()
    expect = oracle.topk_dense(np.ascontiguousarray(x.numpy()), 8)
    assert (np.sort(out.numpy(), 1) == np.sort(expect, 1)).all()
    assert torch.equal(out.sort(1).values, out2.sort(1).values)
    runtime.is_capturing = True
    with pytest.raises(RuntimeError, match="capture"):
        d.topk(x, 8)


# ---------------------------------------------------------------------- capture rules
def test_cold_key_under_capture_raises_naming_key():
    d, runtime, compiler = fake_dispatcher()
    runtime.is_capturing = True
    x = torch.randn(4, 5000)
    kv = torch.tensor([100, 200, 300, 400], dtype=torch.int32)
    out = torch.full((4, 32), 5, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"rows=4, n_env=5000, k=32.*warmup"):
        d.topk_decode(x, kv, out=out, max_seq_len=1 << 20)
    assert not compiler.compiled and (out == 5).all()


def test_no_max_seq_len_works_under_capture():
    """Without max_seq_len the envelope is the width: an eager call warms the key, and the
    same call under capture launches it (nothing to read on the host, nothing to compile)."""
    d, runtime, compiler = fake_dispatcher()
    x = torch.randn(2, 100)
    kv = torch.tensor([10, 20], dtype=torch.int32)
    d.topk_decode(x, kv, 8)
    runtime.is_capturing = True
    out = d.topk_decode(x, torch.tensor([100, 3], dtype=torch.int32), 8)
    assert len(compiler.compiled) == 1
    assert (out[1, 3:] == -1).all() and sorted(out[1, :3].tolist()) == [0, 1, 2]


def test_capture_after_warmup_uses_graph_workspace():
    d, runtime, compiler = fake_dispatcher()
    msl = 1 << 18
    # (deterministic ties: the workspace split; without them the cluster split, no workspace)
    det = dict(deterministic=True)
    assert route_static(H200, rows=2, n_env=msl, k=512, **det).workspace_words
    d.warmup(k=512, max_seq_len=msl, rows=(1, 2), progress=False, **det)
    stream_ws = d.workspace_for()
    n_compiled, n_ws = len(compiler.compiled), len(d._stream_ws)
    x = torch.randn(2, msl)
    kv = torch.tensor([msl, 1000], dtype=torch.int32)

    d.topk_decode(x, kv, 512, max_seq_len=msl, **det)
    eager = compiler.calls[-1]
    assert eager["parts"] > 1 and eager["ws_ptr"] == stream_ws.tensor.data_ptr()

    runtime.is_capturing = True
    runtime.stream = 99  # capture runs on another stream than the warmup
    out = d.topk_decode(x, kv, 512, max_seq_len=msl, **det)
    captured = compiler.calls[-1]
    assert captured["ws_ptr"] == d._graph_ws[0].tensor.data_ptr() != eager["ws_ptr"]
    assert len(compiler.compiled) == n_compiled and len(d._stream_ws) == n_ws
    oracle_out = oracle.topk_decode(x.numpy(), kv.numpy(), 512)
    assert (np.sort(out.numpy(), 1) == np.sort(oracle_out, 1)).all()
    with pytest.raises(RuntimeError, match="capture"):
        d.workspace_for()  # the capture stream has none and none can be made now


def test_workspace_per_stream():
    d, runtime, compiler = fake_dispatcher()
    n = 1 << 18
    det = dict(deterministic=True)  # (the workspace split: see above)
    assert route_static(H200, rows=1, n_env=n, k=64, **det).workspace_words
    x = torch.randn(1, n)
    kv = torch.tensor([n], dtype=torch.int32)
    d.topk_decode(x, kv, 64, max_seq_len=n, **det)
    a = compiler.calls[-1]["ws_ptr"]
    runtime.stream = 8
    d.topk_decode(x, kv, 64, max_seq_len=n, **det)
    b = compiler.calls[-1]["ws_ptr"]
    runtime.stream = 7
    d.topk_decode(x, kv, 64, max_seq_len=n, **det)
    assert compiler.calls[-1]["ws_ptr"] == a != b
    assert d.workspace_for(stream=8).tensor.data_ptr() == b
    assert d.workspace_for().nbytes == d.workspace_bytes()


def test_single_cta_launch_needs_no_workspace():
    d, _, compiler = fake_dispatcher()
    d.topk(torch.randn(200, 300), 16)
    assert compiler.calls[-1]["parts"] == 1
    assert not d._stream_ws and not d._graph_ws


def test_zero_rows_and_zero_width_do_not_launch():
    d, runtime, compiler = fake_dispatcher()
    runtime.is_capturing = True  # no launch key is needed either
    out = d.topk_decode(torch.empty(0, 10), torch.empty(0, dtype=torch.int32), 4)
    assert out.shape == (0, 4)
    out, values = d.topk(torch.empty(3, 0), 4, return_values=True)
    assert (out == -1).all() and (values == FLT_MIN).all()
    assert not compiler.calls and not compiler.compiled


def test_info_logged_once_per_kernel(caplog):
    d, _, _ = fake_dispatcher()
    x = torch.randn(3, 100)
    with caplog.at_level(logging.INFO, logger="gvr"):
        for _ in range(3):
            d.topk(x, 4)
            d.topk(x, 8)  # same configuration, another key
    engaged = [r for r in caplog.records if "engaged" in r.getMessage()]
    assert len(engaged) == 1


def test_disk_cache_serves_a_new_dispatcher(tmp_path):
    d1, _, c1 = fake_dispatcher(cache_dir=tmp_path)
    d1.topk(torch.randn(3, 100), 4)
    d2, _, c2 = fake_dispatcher(cache_dir=tmp_path)
    c2.fail = True  # any compile raises
    out = d2.topk(torch.randn(3, 100), 4)
    assert out.shape == (3, 4) and len(c1.compiled) == 1 and not c2.compiled
    assert d2.cache.stats["disk"] == 1


def test_host_overhead_of_a_warm_call():
    """Per-call host cost of validation + key + lookup (the kernel is a no-op stand-in).
    Printed for the record; the bound only catches gross regressions on a slow CPU."""
    d, _, compiler = fake_dispatcher()
    n = 1 << 17
    x = torch.randn(1, n)
    kv = torch.tensor([n], dtype=torch.int32)
    out = torch.empty(1, 2048, dtype=torch.int32)
    d.topk_decode(x, kv, out=out, max_seq_len=n)
    launch = next(iter(d._launches.values()))
    object.__setattr__(launch, "fn", lambda *args: None)
    reps = 2000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            d.topk_decode(x, kv, out=out, max_seq_len=n)
        best = min(best, (time.perf_counter() - t0) / reps)
    print(f"\nhost overhead per warm topk_decode call (b=1, split, out given): {best * 1e6:.1f} us")
    assert best < 200e-6


def test_fast_decode_path_matches_the_general_path():
    """The inline fast path serves the common warm call exactly like the general path, and
    declines (returns None) everything else."""
    d, runtime, compiler = fake_dispatcher()
    b = make_decode_batch(
        12, batch=3, next_n=2, compress_ratio=4, k=64, width=5000, row_stride=5004,
        lengths="edge",
    )  # fmt: skip
    x, kv = _view(b), _t(b.kv_lens)
    msl = 5000 * 4

    def fast(**kw):
        args = dict(k=64, next_n=2, compress_ratio=4, out=None, values=None,
                    return_values=True, max_seq_len=msl, workspace=None,
                    deterministic=True, sorted=False)  # fmt: skip
        args.update(kw)
        return d._decode_fast(x, kv, *args.values())

    assert fast() is None  # cold key
    ref_out, ref_val = d._decode(x, kv, 64, 2, 4, None, None, True, msl, None, True, False)
    n_calls = len(compiler.calls)
    out, val = fast()
    assert len(compiler.calls) == n_calls + 1
    assert torch.equal(out, ref_out) and torch.equal(val, ref_val)
    b.check(out.numpy(), val.numpy()).raise_if_failed()
    buf = torch.empty(6, 64, dtype=torch.int32)
    assert fast(k=None, out=buf, return_values=False, values=torch.empty(6, 64))[0] is buf
    # Without max_seq_len the envelope is the width, here the same key: served inline too.
    out2, val2 = fast(max_seq_len=None)
    assert len(compiler.calls) == n_calls + 3
    b.check(out2.numpy(), val2.numpy()).raise_if_failed()
    declined = [
        dict(sorted=True),
        dict(workspace=torch.zeros(4, dtype=torch.int32)),
        dict(max_seq_len=-1),
        dict(max_seq_len=4.0 * 5000),
        dict(max_seq_len=4 * 1000),  # another envelope: a key that was not warmed
        dict(k=np.int64(64)),
        dict(k=65),
        dict(next_n=True),
        dict(compress_ratio=3),
        dict(return_values=1),
        dict(out=torch.empty(6, 64, dtype=torch.int64)),
        dict(out=torch.empty(64, 6, dtype=torch.int32).t()),
        dict(out=torch.empty(6, 63, dtype=torch.int32)),
        dict(values=torch.empty(6, 64, dtype=torch.float64)),
    ]
    # outputs over bytes the call reads: the logits, kv_lens
    arena = torch.from_numpy(b.arena).view(-1)
    declined += [
        dict(out=arena[: 6 * 64].view(torch.int32).view(6, 64)),
        dict(return_values=False, values=arena[5004 : 5004 + 6 * 64].view(6, 64)),
    ]
    for kw in declined:
        assert fast(**kw) is None, kw
    words = torch.zeros(6 * 64, dtype=torch.int32)
    words[:3] = kv
    args = (64, 2, 4, words.view(6, 64), None, False, msl, None, True, False)
    assert d._decode_fast(x, words[:3], *args) is None
    with pytest.raises(ValueError, match="out and kv_lens must not share memory"):
        d._decode(x, words[:3], *args)
    assert torch.equal(words[:3], kv) and not words[3:].any()  # nothing written
    odd = torch.from_numpy(b.arena).view(-1)[: 6 * 5001].view(6, 5001)[:, :5000]
    assert d._decode_fast(odd, kv, 64, 2, 4, None, None, True, msl, None, True, False) is None
