"""Routing: launch keys are deterministic and capture-stable, envelopes come from capture-stable
facts only (never from kv_lens), every routed configuration is one the kernel registry lists,
and warmup covers every key the calls of its envelope produce."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from dispatch_fakes import FakeRuntime, fake_dispatcher
from gvr_dispatch.device import arch_of, max_workspace_words, spec_from_properties
from gvr_dispatch.routing import LaunchKey, decode_envelope, route
from gvr_dispatch.warmup import warmup_keys
from gvr_kernels.registry import routable_configs
from gvr_kernels.routing import RAGGED_BULK_MAX_ROWS, route_static
from gvr_kernels.spec import B200, H200, DeviceSpec

SPECS = [H200, B200]


def test_decode_envelope():
    assert decode_envelope(0, 0, 4096) == 1
    assert decode_envelope(100, 0, 4096) == 100
    assert decode_envelope(100_000, 0, 4096) == 4096
    assert decode_envelope(1000, 2, 4096) == 250  # compress_ratio 4
    assert decode_envelope(3, 2, 4096) == 1


def test_key_independent_of_kv_lens_with_max_seq_len():
    """With max_seq_len the launch key depends only on shapes and flags: random, zero, full
    and over-long kv_lens all reuse one key, and no host read of kv_lens is needed."""
    d, runtime, compiler = fake_dispatcher()
    rows, next_n, width, msl = 8, 2, 5000, 16000
    x = torch.randn(rows, width)
    g = np.random.default_rng(1)
    for kv in (
        g.integers(0, msl, rows // next_n),
        np.zeros(rows // next_n),
        np.full(rows // next_n, msl),
        np.array([0, 1, msl, 7]),
    ):
        d.topk_decode(
            x,
            torch.tensor(kv, dtype=torch.int32),
            64,
            next_n=next_n,
            compress_ratio=4,
            max_seq_len=msl,
        )
    assert d.launch_keys() == [(0, "decode", rows, 4000, 64, False, False, "float32", False)]
    assert len(compiler.compiled) == 1
    # Under capture the same call works (no compile, no host read).
    runtime.is_capturing = True
    kv = torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    d.topk_decode(x, kv, 64, next_n=next_n, compress_ratio=4, max_seq_len=msl)
    assert len(compiler.compiled) == 1


def test_envelope_without_max_seq_len_is_the_width():
    """Without max_seq_len the envelope is the logits width whatever kv_lens holds: one key for
    every call, nothing read from kv_lens (a read of a device tensor would synchronise), and
    the same call works under capture."""
    d, runtime, compiler = fake_dispatcher()
    width = 3000
    x = torch.randn(2, width)
    for longest in (0, 1, 3, 129, 2999, 3000, 9999):
        kv = torch.tensor([longest, 0], dtype=torch.int32)
        d.topk_decode(x, kv, 16)
    assert d.launch_keys() == [(0, "decode", 2, width, 16, False, False, "float32", False)]
    assert len(compiler.compiled) == 1
    runtime.is_capturing = True
    d.topk_decode(x, torch.tensor([7, 8], dtype=torch.int32), 16, compress_ratio=4)
    assert d.launch_keys() == [(0, "decode", 2, width, 16, False, False, "float32", False)]
    # max_seq_len still tightens it (compressed units).
    runtime.is_capturing = False
    kv = torch.tensor([5, 0], dtype=torch.int32)
    d.topk_decode(x, kv, 16, compress_ratio=4, max_seq_len=4003)
    assert d.launch_keys()[-1] == (0, "decode", 2, 1000, 16, False, False, "float32", False)


def test_kv_lens_is_never_read_on_the_host(monkeypatch):
    """The dispatcher never turns kv_lens into a Python value (max, item, tolist)."""
    d, _, _ = fake_dispatcher()
    x = torch.randn(4, 5000)
    kv = torch.tensor([100, 5000, 0, 77], dtype=torch.int32)

    def refuse(*_a, **_k):
        raise AssertionError("a host read of kv_lens")

    for name in ("max", "item", "tolist", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    out = d.topk_decode(x, kv, 64)
    monkeypatch.undo()
    assert out.shape == (4, 64)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.arch)
def test_every_routed_config_is_routable(spec):
    known = set(routable_configs(spec))
    s = spec.sm_count
    row_counts = sorted(
        {
            1,
            2,
            3,
            7,
            s // 4,
            s // 2 - 1,
            s // 2,
            s // 2 + 1,
            s - 1,
            s,
            s + 1,
            2 * s,
            4 * s,
            1000,
            4096,
        }
    )
    for rows in row_counts:
        for n_env in (1, 100, 4095, 4096, 16383, 16384, 16385, 1 << 17, (1 << 26) - 1):
            for k in (1, 64, 512, 1024, 2048):
                for mode in ("decode", "prefill", "full"):
                    for wv, det, dt in itertools.product(
                        (False, True), (False, True), ("float32", "bfloat16", "float16")
                    ):
                        r = route(spec, LaunchKey(0, mode, rows, n_env, k, wv, det, dt))
                        cfg = r.config
                        assert cfg in known, cfg.name
                        assert r.parts >= 1 and (r.parts > 1) == cfg.split
                        assert cfg.max_k >= k
                        assert r.workspace_words <= max_workspace_words(spec)
                        assert getattr(cfg, "dtype", "float32") == dt


def test_route_is_deterministic():
    for key in [
        (0, "decode", 1, 1 << 17, 2048, False, False, "float32"),
        (3, "full", 500, 4096, 512, True, True, "float32"),
        (0, "prefill", 7, 1 << 15, 1024, True, False, "bfloat16"),
    ]:
        a, b = route(H200, LaunchKey(*key)), route(H200, LaunchKey(*key))
        assert a == b and a.config.name == b.config.name


def test_max_workspace_words_covers_split_routes():
    words = max_workspace_words(H200)
    worst = max(
        route_static(H200, rows=r, n_env=1 << 20, k=k).workspace_words
        for r in range(1, RAGGED_BULK_MAX_ROWS + 2)
        for k in (1, 2048)
    )
    assert words == worst > 0
    # one SM: no split of few rows; the ragged split of many rows meets in one slot
    tiny = DeviceSpec("one SM", "sm_90a", 1, 232448, 233472)
    assert (
        max_workspace_words(tiny)
        == route_static(tiny, rows=RAGGED_BULK_MAX_ROWS, n_env=1 << 20, k=512).workspace_words
        > 0
    )


def test_spec_from_properties_and_arch():
    class Props:
        name = "NVIDIA H200"
        major, minor = 9, 0
        multi_processor_count = 132
        shared_memory_per_block_optin = 232448
        shared_memory_per_multiprocessor = 233472
        L2_cache_size = 60 * 1024 * 1024

    spec = spec_from_properties(Props())
    assert spec == H200
    assert arch_of(10, 0) == "sm_100a" and arch_of(10, 3) == "sm_103a"
    with pytest.raises(RuntimeError, match="sm_80"):
        arch_of(8, 0)
    with pytest.raises(RuntimeError, match="sm_120"):
        arch_of(12, 0)


def test_spec_read_once_per_device():
    d, runtime, _ = fake_dispatcher()
    x = torch.randn(3, 100)
    for k in (4, 8, 16):
        d.topk(x, k)
        d.topk(x, k, sorted=True)
    assert runtime.spec_reads == 1


# ---------------------------------------------------------------------- warmup enumeration
def test_warmup_keys_decode_without_max_seq_len():
    keys, _ = warmup_keys(0, k=512, rows=(1, 4), width=5000)
    assert keys == [LaunchKey(0, "decode", r, 5000, 512, False, False, "float32") for r in (1, 4)]


def test_warmup_keys_dense_and_prefill():
    keys, _ = warmup_keys(
        0,
        k=(8, 16),
        rows=(3,),
        width=100,
        modes=("dense", "prefill"),
        with_values=(False, True),
        deterministic=True,
    )
    modes = {(key[1], key[3]) for key in keys}
    assert modes == {("decode", 100), ("full", 100), ("prefill", 100)}
    assert len(keys) == 3 * 2 * 2
    assert all(key[6] is True for key in keys)


def test_warmup_keys_errors():
    with pytest.raises(ValueError, match="width"):
        warmup_keys(0, k=8, modes=("prefill",))
    with pytest.raises(ValueError, match="width"):
        warmup_keys(0, k=8)  # decode without max_seq_len needs the width
    with pytest.raises(ValueError, match="multiples of next_n"):
        warmup_keys(0, k=8, rows=(3,), next_n=2, max_seq_len=100)
    with pytest.raises(ValueError, match="modes"):
        warmup_keys(0, k=8, modes=("decoding",), max_seq_len=10)
    with pytest.raises(ValueError, match="k must be <= 2048"):
        warmup_keys(0, k=4096, max_seq_len=10)
    with pytest.raises(TypeError, match="with_values"):
        warmup_keys(0, k=8, max_seq_len=10, with_values="no")
    _, notes = warmup_keys(0, k=8, rows=(2,), max_seq_len=10, row_stride=1001)
    assert notes and "1001" in notes[0]


def _decode_calls(d, rows, next_n, width, msl, k, cr=1):
    x = torch.randn(rows, width)
    g = np.random.default_rng(rows)
    kv = torch.tensor(g.integers(0, msl + 1, rows // next_n), dtype=torch.int32)
    return d.topk_decode(x, kv, k, next_n=next_n, compress_ratio=cr, max_seq_len=msl)


def test_warmup_covers_calls_and_is_idempotent(tmp_path):
    d, runtime, compiler = fake_dispatcher(cache_dir=tmp_path)
    rows = (2, 4, 64, 200)
    msl = 1 << 18
    assert route_static(H200, rows=2, n_env=msl // 4, k=512).family == "cluster"
    assert route_static(H200, rows=64, n_env=msl // 4, k=512).parts > 1
    rep = d.warmup(
        k=(512, 2048),
        max_seq_len=msl,
        rows=rows,
        next_n=2,
        compress_ratio=4,
        with_values=(False, True),
        progress=False,
    )
    assert rep.compiled and not rep.loaded and not rep.from_memory
    assert len(compiler.compiled) == len(rep.entries) == len({e.name for e in rep.entries})
    assert rep.launch_keys == len(rows) * 2 * 2
    assert rep.workspace_bytes > 0  # 64 rows x 65536 scores route to a split launch
    assert runtime.syncs == 1
    known = {c.name for c in routable_configs(H200)}
    assert {e.name for e in rep.entries} <= known

    again = d.warmup(
        k=(512, 2048),
        max_seq_len=msl,
        rows=rows,
        next_n=2,
        compress_ratio=4,
        with_values=(False, True),
        progress=False,
    )
    assert not again.compiled and not again.loaded
    assert len(again.from_memory) == len(rep.entries)
    assert len(compiler.compiled) == len(rep.entries)

    # Every call inside the envelope now finds its key, even under capture.
    runtime.is_capturing = True
    for r in rows:
        for k in (512, 2048):
            _decode_calls(d, r, 2, 70000, msl, k, cr=4)
    assert len(compiler.compiled) == len(rep.entries)


def test_warmup_without_max_seq_len_covers_growing_decode():
    d, runtime, compiler = fake_dispatcher()
    width = 3000
    d.warmup(k=64, rows=(2,), width=width, progress=False)
    n_compiled = len(compiler.compiled)
    x = torch.randn(2, width)
    before = set(d.launch_keys())
    assert len(before) == 1
    runtime.is_capturing = True
    for longest in (0, 1, 5, 64, 65, 1000, 2999, 3000, 50000):
        d.topk_decode(x, torch.tensor([longest, 3], dtype=torch.int32), 64)
    assert set(d.launch_keys()) == before
    assert len(compiler.compiled) == n_compiled


def test_warmup_compile_only_for_a_spec(tmp_path):
    """``spec=`` compiles for an arch without any device: no launches, no workspaces."""
    d, runtime, compiler = fake_dispatcher(cache_dir=tmp_path)
    rep = d.warmup(k=2048, max_seq_len=1 << 17, rows=(1, 132, 133), spec=B200, progress=False)
    assert {arch for _, arch in compiler.compiled} == {"sm_100a"}
    assert rep.launch_keys == 0 and rep.device == "sm_100a"
    assert d.launch_keys() == [] and runtime.syncs == 0
    assert all(e.arch == "sm_100a" for e in rep.entries)
    assert len(list(tmp_path.rglob("*.o"))) == len(rep.entries)


def test_warmup_argument_errors():
    d, _, _ = fake_dispatcher()
    with pytest.raises(ValueError, match="either device"):
        d.warmup(k=8, max_seq_len=10, spec=H200, device="cpu")
    with pytest.raises(TypeError, match="progress"):
        d.warmup(k=8, max_seq_len=10, progress="yes")
    with pytest.raises(ValueError, match="compress_ratio"):
        d.warmup(k=8, max_seq_len=10, compress_ratio=3)
    # a device string torch cannot parse, or a device of another kind, names the argument
    for bad in ("bogus", "meta", 2.5):
        with pytest.raises(ValueError, match="device must be a CPU or CUDA device"):
            d.warmup(k=8, max_seq_len=10, device=bad, progress=False)


def test_warmup_under_capture_raises():
    d, runtime, _ = fake_dispatcher()
    runtime.is_capturing = True
    with pytest.raises(RuntimeError, match="capture"):
        d.warmup(k=8, max_seq_len=100, progress=False)


def test_warmup_cpu_engine():
    """On a machine without CUDA, ``warmup(device="cpu")`` readies the numba engine."""
    from gvr_dispatch import Dispatcher

    d = Dispatcher(runtime=_NoCuda())
    rep = d.warmup(k=8, width=100, device="cpu")
    assert [e.name for e in rep.entries] == ["cpu_engine"]
    assert d.warmup(k=8, max_seq_len=100).entries[0].source == "memory"
    # a new dispatcher in a process that has the engine loaded says so (not "compiled")
    again = Dispatcher(runtime=_NoCuda()).warmup(k=8, width=100, device="cpu")
    assert again.entries[0].source == "memory"
    assert d.warmup(k=4096, width=100, device="cpu").entries  # the CPU engine takes any K
    # the call flags are checked as on a GPU
    for kw, err, name in (
        (dict(k=0), ValueError, "k"),
        (dict(k=8, modes=("decode", "sideways")), ValueError, "modes"),
        (dict(k=8, with_values="yes"), TypeError, "with_values"),
        (dict(k=8, block_max=2), TypeError, "block_max"),
        (dict(k=8, rows=(-1,)), ValueError, "rows"),
        # ... and so are the shapes
        (dict(k=8, width=0), ValueError, "width"),
        (dict(k=8, width=1 << 26), ValueError, "width"),
        (dict(k=8, width=2.5), TypeError, "width"),
        (dict(k=8, row_stride=-4), ValueError, "row_stride"),
        (dict(k=8, rows=(3,), next_n=2), ValueError, "next_n=2"),
        # the envelope's width, where its calls need one (as a GPU's keys do)
        (dict(k=8), ValueError, r"or max_seq_len is required to warm up 'decode' calls"),
        (dict(k=8, max_seq_len=64, modes=("prefill",)), ValueError, "'prefill' calls"),
        (dict(k=8, max_seq_len=64, modes=("decode", "dense")), ValueError, "'dense' calls"),
    ):
        with pytest.raises(err, match=name):
            d.warmup(device="cpu", **kw)
    # prefill rows need not be multiples of next_n, on the CPU as on a GPU
    rep = d.warmup(k=8, rows=(3,), next_n=2, modes=("prefill",), width=100, device="cpu")
    assert rep.entries


class _NoCuda(FakeRuntime):
    kernel_device_type = "cuda"

    def current_device(self):
        raise RuntimeError("no CUDA device is available")
