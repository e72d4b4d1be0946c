"""What a new user meets first: a missing torch, ``device_spec`` on a CPU machine, arguments
the CPU path ignores or cannot serve, and the one-time numba compile notice."""

from __future__ import annotations

import logging
import sys
import types

import gvr_dispatch
import pytest
import torch
from gvr_dispatch import _torch, cpu
from gvr_reference import cpu_engine


def test_missing_torch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ImportError, match="gvr-dispatch needs torch >= 2.4") as e:
        _torch.require_torch("gvr-dispatch")
    assert "download.pytorch.org/whl/cpu" in str(e.value) and "pip install torch" in str(e.value)


def test_old_torch_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.3.1+cpu"))
    with pytest.raises(ImportError, match=r"found torch 2\.3\.1\+cpu"):
        _torch.require_torch("gvr-integration")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.13.0"))
    _torch.require_torch("gvr-integration")  # no error


@pytest.mark.parametrize(
    "device, exc, match",
    [
        ("cpu", ValueError, "device must be a CUDA device, got 'cpu'"),
        (torch.device("cpu"), ValueError, "device must be a CUDA device"),
        ("bogus", ValueError, "device must name a CUDA device, got 'bogus'"),
        (1.5, TypeError, "got float 1.5"),
        (True, TypeError, "got bool True"),
        (-1, ValueError, "index >= 0, got -1"),
    ],
)
@pytest.mark.parametrize("fn", ["device_spec", "workspace_bytes", "workspace_for"])
def test_device_spec_bad_device(fn, device, exc, match):
    """The device functions refuse what is not a CUDA device, naming the argument (on a
    machine with CUDA too: ``"cpu"`` is never read as the current GPU)."""
    with pytest.raises(exc, match=match):
        getattr(gvr_dispatch, fn)(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("fn", ["device_spec", "workspace_bytes", "workspace_for"])
def test_device_spec_without_cuda(fn):
    for device in (None, 0, "cuda"):
        with pytest.raises(RuntimeError, match=f"{fn} needs a CUDA device and none is available"):
            getattr(gvr_dispatch, fn)(device)


def test_cpu_workspace_of_a_wrong_type_is_refused():
    x = torch.randn(2, 50)
    out = torch.full((2, 4), 7, dtype=torch.int32)
    with pytest.raises(TypeError, match="workspace must be a Workspace or a torch.Tensor, got str"):
        gvr_dispatch.topk(x, 4, out=out, workspace="abc")
    assert (out == 7).all()
    # a tensor is accepted (and unused) on the CPU
    gvr_dispatch.topk(x, 4, out=out, workspace=torch.zeros(4, dtype=torch.int32))
    assert sorted(out[0].tolist()) == sorted(torch.topk(x[0], 4).indices.tolist())


def test_cpu_k_past_int32_is_refused():
    x = torch.randn(2, 50)
    with pytest.raises(ValueError, match=r"k must be <= 2\*\*31 - 1 for CPU tensors.*2147483648"):
        gvr_dispatch.topk(x, 2**31)
    with pytest.raises(ValueError, match="k must be <= 2"):
        gvr_dispatch.topk_decode(x, torch.tensor([50, 50], dtype=torch.int32), 2**40)


def test_cpu_outputs_that_do_not_fit_raise_memory_error(monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(torch, "empty", no_memory)
    with pytest.raises(MemoryError, match=r"\[rows=3, k=1073741824\] need 24\.0 GiB"):
        cpu.outputs(3, 2**30, None, None, True)


def test_first_compile_is_announced(monkeypatch, caplog):
    monkeypatch.setattr(cpu_engine, "_kernels_on_disk", lambda: False)
    with caplog.at_level(logging.WARNING, logger="gvr_reference.cpu_engine"):
        cpu_engine._announce_compile()
    assert any("compiling the numba CPU engine" in r.getMessage() for r in caplog.records)
    assert any("10-60 s, once" in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr(cpu_engine, "_kernels_on_disk", lambda: True)
    with caplog.at_level(logging.WARNING, logger="gvr_reference.cpu_engine"):
        cpu_engine._announce_compile()
    assert not caplog.records


def test_kernels_on_disk_reads_numba_cache():
    cpu_engine.warmup()  # compiled or loaded: either way the cache index exists now
    assert cpu_engine._kernels_on_disk() is True
