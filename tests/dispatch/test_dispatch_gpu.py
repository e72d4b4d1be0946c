"""Device tests of the public API (``pytest -m gpu`` on an H200 or another sm_90 / sm_10x GPU).

Every answer is checked by the CPU validator of ``gvr_reference`` on fresh random rows (seed
printed; replay with ``GVR_TEST_SEED``), with ``+3e38`` poison beyond every valid length.
Kernels compile on first use or load from the persistent cache (``GVR_CACHE_DIR``, else
``~/.cache/gvr``), so a second run of this file compiles nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from gvr_reference import validate
from gvr_reference.keys import order_key
from gvr_reference.windows import decode_windows
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SEED = int(os.environ.get("GVR_TEST_SEED", time.time_ns() % (1 << 31)))
POISON = 3.0e38


@pytest.fixture(scope="module")
def api():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import gvr_dispatch

    print(f"\nseed {SEED}; cache {gvr_dispatch.get_dispatcher().cache.cache_dir}")
    return gvr_dispatch


def rng(*salt):
    return np.random.default_rng([SEED, *salt])


def on_device(batch):
    """The batch's arena on the GPU and the logits view with the batch's strides."""
    arena = torch.from_numpy(np.ascontiguousarray(batch.arena)).cuda()
    return arena[:, : batch.width]


def cuda(a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def check(batch, out, values=None, *, det=False, sorted_=False):
    """Validator, plus the tie choice (``det``) and the order (``sorted_``)."""
    o = out.cpu().numpy()
    v = None if values is None else values.cpu().numpy()
    validate.check_topk(batch.logits, batch.windows, batch.k, o, v).raise_if_failed()
    if det:
        want = batch.reference()
        assert np.array_equal(np.sort(want, 1), np.sort(o, 1)), "deterministic tie choice"
    if sorted_:
        if det:
            want = batch.reference(sorted=True)
            assert np.array_equal(want, o), "sorted order"
        else:
            _assert_descending(batch, o)


def _assert_descending(batch, o):
    for r in range(batch.rows):
        s, n = int(batch.windows.starts[r]), int(batch.windows.lengths[r])
        m = min(n, batch.k)
        sel = o[r, :m].astype(np.int64)
        keys = order_key(np.ascontiguousarray(batch.logits[r, s : s + n]))[sel].astype(np.int64)
        assert (np.diff(keys) <= 0).all(), f"row {r}: values not descending"
        ties = np.diff(keys) == 0
        assert (np.diff(sel)[ties] > 0).all(), f"row {r}: ties not by ascending index"
        assert (o[r, m:] == -1).all()


def headers_zero(ws):
    """Whether every row slot of a split workspace is clean, as the kernel leaves it: its
    header words zero and no slab entry with its valid bit (the sign bit of a position word)."""
    import gvr_dispatch
    from gvr_kernels.routing import route_static
    from gvr_kernels.streaming.config import SLAB_VALID, WS_HEADER_WORDS

    assert SLAB_VALID == 1 << 31
    wpr = route_static(gvr_dispatch.device_spec(), rows=1, n_env=1 << 20, k=512).workspace_words
    slots = ws[: ws.numel() // wpr * wpr].view(torch.int32).view(-1, wpr)
    valid = (slots[:, WS_HEADER_WORDS + 1 :: 2] < 0).any().item()
    return not slots[:, :WS_HEADER_WORDS].any().item() and not valid


def pitch(width, extra=0):
    return -(-width // 4) * 4 + extra


# ---------------------------------------------------------------------- exactness
DECODE = [
    # (k, batch, width, next_n, compress_ratio, family, lengths)
    (2048, 1, 262144, 1, 1, "dsa_like", "full"),  # split
    (512, 3, 131075, 2, 4, "gaussian", "edge"),  # split, MTP + compression
    (1024, 40, 50000, 1, 1, "tie_flood", "ragged"),  # one CTA per row
    (2048, 100, 20001, 2, 1, "nan", "edge"),  # the 512-thread configuration
    (512, 300, 8000, 1, 4, "signed_zero", "ragged"),
    (7, 5, 40000, 3, 2, "two_valued", "edge"),
]


@pytest.mark.parametrize("case", DECODE, ids=lambda c: "k{}-b{}-n{}-nn{}-cr{}-{}".format(*c[:6]))
def test_decode_exact(api, case):
    k, b, width, nn, cr, family, lengths = case
    batch = make_decode_batch(
        rng(1, *case[:5]),
        batch=b,
        next_n=nn,
        compress_ratio=cr,
        k=k,
        width=width,
        row_stride=pitch(width, 4),
        family=family,
        lengths=lengths,
    )
    x, kv = on_device(batch), cuda(batch.kv_lens)
    out = api.topk_decode(x, kv, k, next_n=nn, compress_ratio=cr)
    check(batch, out)
    out, values = api.topk_decode(
        x, kv, k, next_n=nn, compress_ratio=cr, max_seq_len=width * cr + nn, return_values=True
    )
    check(batch, out, values)


@pytest.mark.parametrize("det", [False, True])
def test_decode_values_deterministic_sorted(api, det):
    k = 512
    for b, width, family in ((2, 100000, "quantized"), (150, 9000, "two_valued")):
        batch = make_decode_batch(
            rng(2, b, det),
            batch=b,
            k=k,
            width=width,
            row_stride=pitch(width),
            family=family,
            lengths="ragged",
        )
        x, kv = on_device(batch), cuda(batch.kv_lens)
        out = torch.full((b, k), 77, dtype=torch.int32, device="cuda")
        values = torch.full((b, k), 7.0, device="cuda")
        res = api.topk_decode(x, kv, out=out, values=values, deterministic=det)
        assert res[0] is out and res[1] is values
        check(batch, out, values, det=det)
        out, values = api.topk_decode(x, kv, k, return_values=True, deterministic=det, sorted=True)
        check(batch, out, values, det=det, sorted_=True)
        out = api.topk_decode(x, kv, k, deterministic=det, sorted=True)
        check(batch, out, det=det, sorted_=True)


@pytest.mark.parametrize("k", [512, 2048])
def test_prefill_exact(api, k):
    for rows, width, family, lengths in (
        (200, 30001, "gaussian", "ragged"),
        (6, 150003, "dsa_like", "full"),
        (64, 9000, "neg_inf", "edge"),
    ):
        batch = make_prefill_batch(
            rng(3, k, rows),
            rows=rows,
            k=k,
            width=width,
            row_stride=pitch(width),
            family=family,
            lengths=lengths,
            misaligned=True,
        )
        x = on_device(batch)
        s, e = cuda(batch.row_starts), cuda(batch.row_ends)
        out, values = api.topk_prefill(x, s, e, k, return_values=True)
        check(batch, out, values)
        out = api.topk_prefill(x, s, e, k, deterministic=True, sorted=True)
        check(batch, out, det=True, sorted_=True)


@pytest.mark.parametrize("lengths", [None, "ragged", "edge"])
def test_dense_exact(api, lengths):
    k = 1024
    for rows, width in ((3, 120001), (500, 5000)):
        batch = make_dense_batch(
            rng(4, rows, [None, "ragged", "edge"].index(lengths)),
            rows=rows,
            k=k,
            width=width,
            row_stride=pitch(width),
            family="pos_inf",
            lengths=lengths,
        )
        x = on_device(batch)
        n = None if batch.lengths is None else cuda(batch.lengths)
        out, values = api.topk(x, k, n, return_values=True)
        check(batch, out, values)


def test_short_empty_and_trivial(api):
    x = torch.randn(4, 3000, device="cuda")
    kv = torch.tensor([0, 1, 600, 3000], dtype=torch.int32, device="cuda")
    out, values = api.topk_decode(x, kv, 600, return_values=True)
    o = out.cpu()
    assert (o[0] == -1).all() and (values[0] == torch.finfo(torch.float32).min).all()
    assert o[1].tolist() == [0] + [-1] * 599
    assert sorted(o[2].tolist()) == list(range(600))
    assert (o[3] >= 0).all()
    empty = api.topk_decode(x[:0], kv[:0], 8)
    assert empty.shape == (0, 8) and empty.is_cuda
    out = api.topk(torch.empty(2, 0, device="cuda"), 8)
    assert (out == -1).all()


# ---------------------------------------------------------------------- layouts
def test_layouts(api):
    """Views the kernels read in place, a single row re-viewed, and layouts that are copied
    first (refused under capture)."""
    k = 256
    g = rng(5)
    base = torch.from_numpy(g.standard_normal((6, 40004)).astype(np.float32)).cuda()
    flat = base.view(-1)
    cases = {
        "padded-view": base[:, :40001],  # row stride 40004: read in place
        "single-row-odd-stride": flat[: 5 * 39999].view(5, 39999)[4:5],  # re-viewed
        "odd-stride": flat[: 6 * 40001].view(6, 40001)[:, :39999],  # copied
        "misaligned": base[:, 1:40001],  # copied
        "transposed": base[:, :300].t(),  # copied
    }
    for name, x in cases.items():
        out, values = api.topk(x, k, return_values=True)
        report = validate.check_dense(
            np.ascontiguousarray(x.cpu().numpy()),
            k,
            out.cpu().numpy(),
            values=values.cpu().numpy(),
        )
        assert report.ok, f"{name}:\n{report.summary()}"
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="copy"):
        with torch.cuda.graph(graph, stream=s):
            api.topk(cases["odd-stride"], k, return_values=True)
    torch.cuda.synchronize()


# ---------------------------------------------------------------------- CUDA graphs
def _kv_schedule(steps, batch, next_n, cr, k, msl, g):
    """kv_lens per replay: rows grow, shrink, cross the short-row boundary, go empty."""
    boundary = k * cr + next_n - 1  # last row exactly k long
    sched = []
    for i in range(steps):
        kv = g.integers(0, msl + 1, batch)
        phase = i % 4
        if phase == 0:  # growing
            kv[0] = min(msl, 1 + 97 * i * cr)
        elif phase == 1:  # around the short-row boundary
            kv[0] = boundary + (i % 7) - 3
        elif phase == 2:  # empty and nearly empty requests
            kv[0] = i % next_n
        else:  # shrinking
            kv[0] = max(0, msl - 131 * i * cr)
        kv[-1] = msl if i % 5 == 0 else kv[-1]
        sched.append(kv.astype(np.int32))
    return sched


#: (batch, next_n, compress_ratio, width, replays) of the graph test: one cluster per row, the
#: static split, one CTA per row, and the ragged split (at least RAGGED_MIN_ROWS rows of an
#: envelope past RAGGED_MIN_N: CTAs handed out by the lengths in-kernel, every replay), of few
#: rows and of more rows than SMs (RAGGED_BULK_MIN_N).
GRAPH_CASES = [(2, 2, 4, 65536, 120), (16, 2, 4, 65536, 120), (100, 2, 4, 32768, 120),
               (40, 1, 1, 262144, 40), (150, 1, 1, 140000, 30)]  # fmt: skip


@pytest.mark.parametrize(
    "case", GRAPH_CASES, ids=["cluster", "split", "single", "ragged", "ragged-bulk"]
)
def test_cuda_graph_decode_replays(api, case):
    """Warm up on a side stream, capture one decode call with max_seq_len and fixed buffers,
    replay while kv_lens (and the logits) change in place; every replay is exact. Then zero
    the outputs and replay again."""
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import spec_from_properties

    batch, next_n, cr, width, steps = case
    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    route = route_static(spec, rows=batch * next_n, n_env=width, k=512, with_values=True)
    assert getattr(route.config, "ragged", False) == (case in GRAPH_CASES[-2:]), route.config.name
    _replay_decode_graph(api, batch, next_n, cr, width, steps, k=512, values=True)


#: (batch, width, K, cluster size) of the cluster split's graph test: float32 decode launches
#: without values in place of the workspace split (8 and 2 CTAs a row, where the router still
#: takes it since 591e587: K = 2048, chunks of more than CLUSTER_SPLIT_MIN_CHUNK scores). (Its
#: replacement of the register family's 1024 x 8 row is routed only on devices of fewer than
#: 96 SMs since four 512 x 4 cluster CTAs a row serve those rows at K = 2048.)
CLUSTER_SPLIT_GRAPH_CASES = [(8, 262144, 2048, 8), (12, 262144, 2048, 8), (64, 65536, 2048, 2)]


@pytest.mark.parametrize(
    "case", CLUSTER_SPLIT_GRAPH_CASES, ids=lambda c: f"x{c[3]}-b{c[0]}-k{c[2]}"
)
def test_cuda_graph_decode_replays_on_the_cluster_split(api, case):
    """The routed cluster split (dense rows) under CUDA-graph replay as kv_lens change, as
    :func:`test_cuda_graph_decode_replays` (indices only)."""
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import spec_from_properties

    batch, width, k, cluster = case
    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    route = route_static(spec, rows=batch, n_env=width, k=k)
    assert route.family == "streaming" and route.config.cluster == cluster, route.config.name
    _replay_decode_graph(api, batch, 1, 1, width, 40, k=k, values=False)


def _replay_decode_graph(api, batch, next_n, cr, width, steps, k, values):
    """Capture one decode call (with ``values`` or not) and check every replay as the
    lengths and the logits change in place (:func:`_kv_schedule`)."""
    from gvr_kernels.testing import poison_beyond

    msl = width * cr
    rows = batch * next_n
    g = rng(6, batch)
    base = torch.from_numpy(g.standard_normal((rows, width)).astype(np.float32)).cuda()
    base[::3] = torch.round(base[::3] * 2)  # tie-heavy rows
    arena = torch.full((rows, pitch(width, 4)), POISON, device="cuda")
    logits = arena[:, :width]
    kv = torch.zeros(batch, dtype=torch.int32, device="cuda")
    out = torch.zeros((rows, k), dtype=torch.int32, device="cuda")
    vals = torch.zeros((rows, k), device="cuda") if values else None
    call = dict(out=out, values=vals, next_n=next_n, compress_ratio=cr, max_seq_len=msl)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        report = api.warmup(
            k=k,
            max_seq_len=msl,
            rows=(rows,),
            next_n=next_n,
            compress_ratio=cr,
            with_values=values,
            progress=False,
        )
        print(report)
        api.topk_decode(logits, kv, **call)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.topk_decode(logits, kv, **call)

    sched = _kv_schedule(steps, batch, next_n, cr, k, msl, g)
    for step, kv_np in enumerate(sched + sched[:3]):
        kv.copy_(torch.from_numpy(kv_np))
        windows = decode_windows(kv_np, next_n, cr, width)
        logits.copy_(base)
        poison_beyond(
            logits, torch.zeros(rows, dtype=torch.int64, device="cuda"), cuda(windows.lengths)
        )
        if step >= len(sched):  # the last replays start from zeroed outputs
            out.zero_()
            if values:
                vals.zero_()
        graph.replay()
        torch.cuda.synchronize()
        report = validate.check_decode(
            logits.cpu().numpy(),
            kv_np,
            k,
            out.cpu().numpy(),
            next_n=next_n,
            compress_ratio=cr,
            values=vals.cpu().numpy() if values else None,
        )
        assert report.ok, f"replay {step}:\n{report.summary()}"
    # The split workspace the graph uses has its row headers back at zero.
    d = api.get_dispatcher()
    for ws in d._graph_ws.values():
        assert headers_zero(ws.tensor)


def test_cold_key_under_capture_raises(api):
    x = torch.randn(4, 7777, device="cuda")
    kv = torch.full((4,), 5000, dtype=torch.int32, device="cuda")
    out = torch.zeros((4, 333), dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="warm"):
        with torch.cuda.graph(graph, stream=s):
            api.topk_decode(x, kv, out=out, max_seq_len=1 << 30, deterministic=True)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="max_seq_len"):
        with torch.cuda.graph(graph, stream=s):
            api.topk_decode(x, kv, out=out)
    torch.cuda.synchronize()
    # The device is still usable.
    assert api.topk_decode(x, kv, out=out).shape == (4, 333)


def test_two_streams_two_workspaces(api):
    """Split launches on two streams at once use separate default workspaces."""
    k, width = 1024, 200000
    batches = [
        make_decode_batch(
            rng(7, i),
            batch=1,
            k=k,
            width=width,
            row_stride=pitch(width),
            family="dsa_like",
            lengths="full",
        )
        for i in range(2)
    ]
    xs = [on_device(b) for b in batches]
    kvs = [cuda(b.kv_lens) for b in batches]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [None, None]
    torch.cuda.synchronize()
    for _ in range(20):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i] = api.topk_decode(xs[i], kvs[i], k, max_seq_len=width)
    torch.cuda.synchronize()
    for b, o in zip(batches, outs, strict=True):
        check(b, o)
    ws = [api.workspace_for(stream=s) for s in streams]
    assert ws[0].tensor.data_ptr() != ws[1].tensor.data_ptr()
    assert all(headers_zero(w.tensor) for w in ws)


def test_warmup_is_idempotent(api):
    kw = dict(k=(512, 2048), max_seq_len=1 << 17, rows=(1, 8, 200), progress=False)
    api.warmup(**kw)
    again = api.warmup(**kw)
    assert not again.compiled and not again.loaded and again.from_memory


# ---------------------------------------------------------------------- persistent cache
_FIRST_CALL = textwrap.dedent(
    """
    import json, sys, time
    import torch
    import gvr_dispatch
    import gvr_dispatch.cache as cache_mod
    if sys.argv[2] == "refuse":
        def refuse(config, arch):
            raise AssertionError("compiled although the cache was warm: " + config.name)
        cache_mod._compile = refuse
    x = torch.randn(1, 50000, device="cuda")
    kv = torch.tensor([50000], dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    import cutlass.runtime  # loading (or compiling) a kernel imports the DSL first
    t1 = time.perf_counter()
    out = gvr_dispatch.topk_decode(x, kv, 2048, max_seq_len=50000)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    want = torch.topk(x, 2048, dim=1).values.sort(dim=1).values
    got = torch.gather(x, 1, out.long()).sort(dim=1).values
    print(json.dumps({"dsl_import_s": t1 - t0, "first_call_s": t2 - t1,
                      "stats": gvr_dispatch.get_dispatcher().cache.stats,
                      "exact": bool(torch.equal(want, got))}))
    """
)


def test_persistent_cache_second_process(api, tmp_path):
    """A second process with a warm cache folder runs its first call without compiling."""
    env = dict(os.environ, GVR_CACHE_DIR=str(tmp_path))
    env.pop("GVR_CACHE_DISABLE", None)
    runs = {}
    for label, mode in (("cold", "compile"), ("warm", "refuse")):
        res = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL, str(tmp_path), mode],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert res.returncode == 0, res.stderr[-4000:]
        runs[label] = json.loads(res.stdout.strip().splitlines()[-1])
    assert runs["cold"]["stats"]["compiled"] == 1
    assert runs["warm"]["stats"] == {"memory": 0, "disk": 1, "compiled": 0}
    assert runs["cold"]["exact"] and runs["warm"]["exact"]
    print(
        f"\nfirst call: cold cache {runs['cold']['first_call_s']:.2f} s, warm cache "
        f"{runs['warm']['first_call_s']:.3f} s (CuTe DSL import before it: "
        f"{runs['cold']['dsl_import_s']:.2f} s / {runs['warm']['dsl_import_s']:.2f} s)"
    )


# ---------------------------------------------------------------------- host overhead
@pytest.mark.parametrize("width", [8192, 262144], ids=["single-cta", "split"])
def test_host_overhead_per_eager_call(api, width):
    """Host cost of one warm eager call at b=1 (printed): the issue rate of 1000 calls through
    the API, the same through the raw TVM-FFI callable, and the end-to-end time per call."""
    k = 2048
    x = torch.randn(1, width, device="cuda")
    kv = torch.tensor([width], dtype=torch.int32, device="cuda")
    out = torch.empty((1, k), dtype=torch.int32, device="cuda")
    api.warmup(k=k, max_seq_len=width, progress=False)
    for _ in range(20):
        api.topk_decode(x, kv, out=out, max_seq_len=width)
    torch.cuda.synchronize()

    d = api.get_dispatcher()
    launch = d._launches[(x.device.index, "decode", 1, width, k, False, False, "float32", False)]
    ws = d.workspace_for().tensor if launch.parts > 1 else launch.dummies.workspace
    dm = launch.dummies
    n = 1000
    timings = {}
    for label, call in (
        ("api", lambda: api.topk_decode(x, kv, out=out, max_seq_len=width)),
        (
            "raw",
            lambda: launch.fn(
                x, kv, dm.i32, out, dm.values, ws, dm.i32, k, 1, 0, launch.parts, dm.values
            ),
        ),
    ):
        best = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            host = (time.perf_counter() - t0) / n
            end.record()
            torch.cuda.synchronize()
            best = min(best, host)
            timings[label + "_e2e"] = start.elapsed_time(end) * 1e-3 / n
        timings[label] = best
    print(
        f"\nb=1 k={k} n={width} parts={launch.parts}: API {timings['api'] * 1e6:.1f} us/call "
        f"issued ({timings['api_e2e'] * 1e6:.1f} end to end), raw TVM-FFI "
        f"{timings['raw'] * 1e6:.1f} us/call ({timings['raw_e2e'] * 1e6:.1f} end to end)"
    )
    assert timings["api"] < 100e-6


@pytest.mark.parametrize("k", [512, 2048])
def test_block_max_under_cuda_graph_replay_as_lengths_and_scores_change(api, k):
    """A launch at the block-skip gate with the indexer's block maxima, captured once and
    replayed while the scores, their maxima (written into the same buffer) and the lengths
    change: every replay exact."""
    from gvr_integration.indexer import block_maxima
    from gvr_kernels.routing import BLOCK_SKIP_MIN_BYTES

    rows, width = 512, 65536
    assert rows * width * 4 >= BLOCK_SKIP_MIN_BYTES
    g = torch.Generator(device="cuda").manual_seed(k)
    x = torch.empty(rows, width, device="cuda")
    kv = torch.empty(rows, dtype=torch.int32, device="cuda")
    bm = torch.empty(rows, width // 32, device="cuda")

    def fill(step):
        x.normal_(generator=g)
        x[:, :64] += 8
        n = torch.randint(0, width + 1, (rows,), device="cuda", generator=g)
        n[: 4 + step] = torch.tensor([0, k - 1, k + 1, width, 7, 9][: 4 + step], device="cuda")
        kv.copy_(n)
        win = n[:, None] - torch.arange(1, 4097, device="cuda")[None, :]
        x.scatter_add_(1, win.clamp(min=0).long(), torch.full((rows, 4096), 6.0, device="cuda"))
        block_maxima(x, 32, out=bm)

    api.warmup(k=k, rows=(rows,), width=width, block_max=True, progress=False)
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    fill(0)
    api.topk_decode(x, kv, k, out=out, block_max=bm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.topk_decode(x, kv, k, out=out, block_max=bm)
    key = api.get_dispatcher().launch_keys()[-1]
    assert key.block_skip
    for step in range(3):
        fill(step)
        graph.replay()
        torch.cuda.synchronize()
        cols = torch.arange(width, device="cuda")[None, :]
        masked = torch.where(cols < kv[:, None].long(), x, -float("inf"))
        want = torch.topk(masked, k, dim=1).values
        short = kv.long() < k
        got = torch.gather(masked, 1, out.long().clamp(min=0))
        for r in range(rows):
            n = int(kv[r])
            if n <= k:
                assert out[r, :n].tolist() == list(range(n)) and (out[r, n:] == -1).all()
        ok = ~short
        assert torch.equal(got[ok].sort(dim=1).values, want[ok].sort(dim=1).values), step
