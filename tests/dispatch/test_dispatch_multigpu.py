"""Two GPUs (``pytest -m multigpu`` on a machine with at least two CUDA devices; skipped
elsewhere): the same calls on ``cuda:0`` and ``cuda:1`` from one thread and from two threads,
eagerly and under CUDA graphs captured per device after a warmup per device. Every answer is
checked against the oracle, and no state of one device is used on the other (launch keys,
workspaces, outputs on the caller's device). The per-device state itself is also covered on
a CPU-only machine by ``test_dispatch_devices.py``; the two-process NCCL run of the DSA decode
pipeline is ``tools/multigpu_dsa.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]
torch = pytest.importorskip("torch")

K = 512
#: (rows, max_seq_len): a split row, a cluster row and a register row.
SHAPES = ((2, 1 << 17), (1, 1 << 16), (8, 8192))


@pytest.fixture(scope="module")
def gvr():
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    import gvr_dispatch

    return gvr_dispatch


def _batch(dev: int, rows: int, n: int, seed: int):
    g = torch.Generator(device=f"cuda:{dev}").manual_seed(seed)
    x = torch.randn(rows, n, device=f"cuda:{dev}", generator=g)
    kv = torch.randint(n // 2, n + 1, (rows,), device=f"cuda:{dev}", dtype=torch.int32, generator=g)
    return x, kv


def _exact(x, kv, out) -> bool:
    from gvr_reference import oracle

    want = oracle.topk_decode(x.cpu().numpy(), kv.cpu().numpy(), out.shape[1])
    return bool((np.sort(out.cpu().numpy(), 1) == np.sort(want, 1)).all())


def test_same_call_on_both_devices_one_thread(gvr):
    for rows, n in SHAPES:
        for dev in (0, 1, 0, 1):
            x, kv = _batch(dev, rows, n, seed=rows + dev)
            out = gvr.topk_decode(x, kv, K, max_seq_len=n)
            assert out.device == x.device
            assert _exact(x, kv, out), (dev, rows, n)
    keys = gvr.get_dispatcher().launch_keys()
    assert {key.device for key in keys} == {0, 1}


def test_two_threads_two_devices(gvr):
    def work(dev):
        torch.cuda.set_device(dev)
        bad = 0
        for i in range(10):
            rows, n = SHAPES[i % len(SHAPES)]
            x, kv = _batch(dev, rows, n, seed=100 * dev + i)
            bad += not _exact(x, kv, gvr.topk_decode(x, kv, K, max_seq_len=n))
        torch.cuda.synchronize(dev)
        return bad

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(work, (0, 1))) == [0, 0]


def test_graphs_captured_per_device(gvr):
    """A warmup and a graph per device; replays on new scores and lengths are exact on each."""
    rows, n = SHAPES[0]
    graphs = {}
    for dev in (0, 1):
        with torch.cuda.device(dev):
            gvr.warmup(k=K, max_seq_len=n, rows=(rows,), device=dev, progress=False)
            x, kv = _batch(dev, rows, n, seed=7 + dev)
            out = torch.empty((rows, K), dtype=torch.int32, device=f"cuda:{dev}")
            stream = torch.cuda.Stream(dev)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                gvr.topk_decode(x, kv, out=out, max_seq_len=n)  # eager on the capture stream
            torch.cuda.current_stream(dev).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                gvr.topk_decode(x, kv, out=out, max_seq_len=n)
            graphs[dev] = (graph, x, kv, out)
    for step in range(3):
        for dev, (graph, x, kv, out) in graphs.items():
            nx, nkv = _batch(dev, rows, n, seed=1000 + 10 * step + dev)
            x.copy_(nx)
            kv.copy_(nkv)
            graph.replay()
            torch.cuda.synchronize(dev)
            assert _exact(x, kv, out), (dev, step)
