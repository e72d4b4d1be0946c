"""Per-device state of the dispatcher, on a CPU-only machine.

A stand-in runtime plays two devices (the current one chosen by ``device_guard``, per thread;
CPU tensors carry no device index, so a call runs on the current device): the real dispatcher
code keeps its device properties, launch table, dummies, per-stream and per-graph workspaces
and warmup per device index. Device 1 has half the SMs of device 0, so the same call routes
differently on each, and any state of one device used on the other shows in the launches.
Every answer is checked against the oracle. The same calls on two GPUs are
``test_dispatch_multigpu.py`` (marker ``multigpu``).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import torch
from dispatch_fakes import FakeCompiler, FakeRuntime
from gvr_dispatch import Dispatcher, KernelCache
from gvr_kernels.routing import route_static
from gvr_kernels.spec import H200
from gvr_reference import oracle

SPECS = (H200, replace(H200, sm_count=H200.sm_count // 2))
#: A decode shape whose workspace split (CTAs per row) depends on the SM count (13-31 rows:
#: no cluster split takes it).
ROWS, N_ENV, K = 16, 1 << 17, 512


class TwoDeviceRuntime(FakeRuntime):
    """:class:`FakeRuntime` with two devices: ``device_guard`` sets the calling thread's
    current device, each device has its own properties and current stream."""

    def __init__(self, specs=SPECS):
        super().__init__(specs[0])
        self.specs = specs
        self.local = threading.local()
        self.spec_reads_by_device = [0] * len(specs)

    def _current(self) -> int:
        return getattr(self.local, "device", 0)

    def index(self, device) -> int:
        return self._current() if device.index is None else device.index

    def current_index(self) -> int:
        return self._current()

    def device_count(self) -> int:
        return len(self.specs)

    @contextlib.contextmanager
    def device_guard(self, device_index: int):
        before = self._current()
        self.local.device = device_index
        try:
            yield
        finally:
            self.local.device = before

    def stream_key(self, device_index: int) -> int:
        return 1000 * device_index + self.stream

    def device_spec(self, device_index: int):
        self.spec_reads += 1
        self.spec_reads_by_device[device_index] += 1
        return self.specs[device_index]


def two_device_dispatcher():
    runtime = TwoDeviceRuntime()
    compiler = FakeCompiler()
    cache = KernelCache(
        compile_fn=compiler, load_fn=compiler.load, store_fn=compiler.store, cache_dir=None
    )
    return Dispatcher(runtime=runtime, cache=cache), runtime, compiler


def _rows(seed):
    g = np.random.default_rng(seed)
    x = torch.from_numpy(g.standard_normal((ROWS, N_ENV)).astype(np.float32))
    kv = torch.from_numpy(N_ENV - g.integers(0, 4000, ROWS).astype(np.int32))
    return x, kv


def _exact(x, kv, out):
    want = oracle.topk_decode(x.numpy(), kv.numpy(), K)
    return bool((np.sort(out.numpy(), 1) == np.sort(want, 1)).all())


def test_state_is_kept_per_device():
    d, rt, compiler = two_device_dispatcher()
    parts = [route_static(s, rows=ROWS, n_env=N_ENV, k=K).parts for s in SPECS]
    assert parts[0] != parts[1], "the test needs a shape that routes differently"
    x, kv = _rows(1)
    seen = {}
    for dev in (0, 1, 0, 1):
        with rt.device_guard(dev):
            out = d.topk_decode(x, kv, K, max_seq_len=N_ENV)
        assert _exact(x, kv, out)
        call = compiler.calls[-1]
        assert call["parts"] == parts[dev]
        seen.setdefault(dev, set()).add(call["ws_ptr"])
    # One property read per device, one launch key and one workspace per (device, stream).
    assert rt.spec_reads_by_device == [1, 1]
    assert sorted(key.device for key in d.launch_keys()) == [0, 1]
    assert sorted(d._stream_ws) == [(0, rt.stream), (1, 1000 + rt.stream)]
    assert all(len(ptrs) == 1 for ptrs in seen.values()) and seen[0] != seen[1]
    assert d._stream_ws[(1, 1000 + rt.stream)].tensor.data_ptr() in seen[1]


def test_explicit_device_argument_and_workspace_per_device():
    d, rt, _ = two_device_dispatcher()
    w0 = d.workspace_for(device=0)
    w1 = d.workspace_for(device=1)
    assert w0 is not w1 and w0.tensor.data_ptr() != w1.tensor.data_ptr()
    assert d.workspace_for(device=1) is w1
    assert d.spec(1).sm_count == SPECS[1].sm_count and d.spec(0).sm_count == SPECS[0].sm_count
    assert d.workspace_bytes(1) <= d.workspace_bytes(0)


def test_warmup_and_capture_per_device():
    """Warmup on one device does not warm the other: capture on the cold device refuses
    the call (nothing is launched or written), and each device captures into its own graph
    workspace."""
    d, rt, compiler = two_device_dispatcher()
    x, kv = _rows(2)
    report = d.warmup(k=K, max_seq_len=N_ENV, rows=(ROWS,), device=0, progress=False)
    assert report.launch_keys >= 1
    assert {key.device for key in d.launch_keys()} == {0}
    rt.is_capturing = True
    with rt.device_guard(1):
        out = torch.full((ROWS, K), 5, dtype=torch.int32)
        try:
            d.topk_decode(x, kv, out=out, max_seq_len=N_ENV)
        except RuntimeError as e:
            assert "warmup" in str(e)
        else:
            raise AssertionError("a cold key on device 1 launched under capture")
        assert (out == 5).all()
    with rt.device_guard(0):
        out0 = d.topk_decode(x, kv, K, max_seq_len=N_ENV)
    assert _exact(x, kv, out0)
    assert compiler.calls[-1]["ws_ptr"] == d._graph_ws[0].tensor.data_ptr()
    rt.is_capturing = False
    d.warmup(k=K, max_seq_len=N_ENV, rows=(ROWS,), device=1, progress=False)
    rt.is_capturing = True
    with rt.device_guard(1):
        out1 = d.topk_decode(x, kv, K, max_seq_len=N_ENV)
    assert _exact(x, kv, out1)
    assert compiler.calls[-1]["ws_ptr"] == d._graph_ws[1].tensor.data_ptr()
    assert d._graph_ws[0].tensor.data_ptr() != d._graph_ws[1].tensor.data_ptr()


def test_two_threads_on_two_devices():
    """One thread per device, calls interleaved: every answer exact, each device's launches
    on its own workspace and routed for its own SM count."""
    d, rt, compiler = two_device_dispatcher()
    parts = [route_static(s, rows=ROWS, n_env=N_ENV, k=K).parts for s in SPECS]

    def work(dev):
        bad = 0
        with rt.device_guard(dev):
            for i in range(6):
                x, kv = _rows(10 * dev + i)
                bad += not _exact(x, kv, d.topk_decode(x, kv, K, max_seq_len=N_ENV))
        return bad

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(work, (0, 1))) == [0, 0]
    ws = {dev: d._stream_ws[(dev, 1000 * dev + rt.stream)].tensor.data_ptr() for dev in (0, 1)}
    for call in compiler.calls:
        dev = 0 if call["ws_ptr"] == ws[0] else 1
        assert call["ws_ptr"] == ws[dev] and call["parts"] == parts[dev]
    assert {call["ws_ptr"] for call in compiler.calls} == set(ws.values())
