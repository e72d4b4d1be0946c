"""Sessions for the GVR monorepo.

The packages install from their local paths in dependency order:
gvr-reference <- gvr-kernels <- gvr-dispatch <- gvr-integration.

Interpreter: every session runs on the Python that runs nox (``python3 -m nox ...``), or on
the one named by ``GVR_NOX_PYTHON`` (a version such as ``3.12`` found on PATH, or a path to
an interpreter). A missing interpreter is an error, never a skipped session that exits 0.

torch is not a dependency of any package: the caller provides a CPU or a CUDA build. The
sessions that need it install ``GVR_TORCH_PIN`` (default ``torch==2.13.0``, the tested
release) before any package that imports it.
"""

from __future__ import annotations

import os
import time

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
# A session whose interpreter is missing fails (nox would otherwise skip it and exit 0).
nox.options.error_on_missing_interpreters = True

PACKAGES = ["gvr-reference", "gvr-kernels", "gvr-dispatch", "gvr-integration"]
TORCH_PIN = os.environ.get("GVR_TORCH_PIN", "torch==2.13.0")
# None: the interpreter running nox.
PYTHON = os.environ.get("GVR_NOX_PYTHON") or None

#: One smoke call per layer, run in a clean venv after its documented install.
SMOKE = {
    "gvr-reference": (
        "import numpy as np; from gvr_reference import cpu_engine; "
        "x = np.arange(10, dtype=np.float32)[None]; "
        "got = cpu_engine.dense(x, 3, sorted=True).tolist(); "
        "assert got == [[9, 8, 7]], got; print('gvr-reference ok', got)"
    ),
    "gvr-kernels": (
        "import gvr_kernels.streaming; from gvr_kernels.registry import routable_configs; "
        "n = len(list(routable_configs())); assert n > 0, n; "
        "print('gvr-kernels ok:', n, 'routable kernel configurations')"
    ),
    "gvr-dispatch": (
        "import torch, gvr_dispatch as gvr; "
        "got = gvr.topk(torch.arange(10.0)[None], 3, sorted=True).tolist(); "
        "assert got == [[9, 8, 7]], got; print('gvr-dispatch ok', got)"
    ),
    "gvr-integration": (
        "import torch, gvr_integration as gi; "
        "got = gi.topk_decode(torch.arange(10.0)[None], torch.tensor([10], dtype=torch.int32),"
        " 3).sort(dim=1).values.tolist(); "
        "assert got == [[7, 8, 9]], got; print('gvr-integration ok', got)"
    ),
}
#: Layers that import torch (the caller installs it first).
NEEDS_TORCH = {"gvr-dispatch", "gvr-integration"}


def _install(session: nox.Session, upto: str = "gvr-integration", extras: str = "") -> None:
    """Install torch (when needed) and the local packages up to ``upto``, in order."""
    wanted = PACKAGES[: PACKAGES.index(upto) + 1]
    if NEEDS_TORCH & set(wanted):
        session.install(TORCH_PIN)
    for name in wanted:
        spec = f"./packages/{name}"
        if name == "gvr-reference" and extras:
            spec += f"[{extras}]"
        session.install("-e", spec)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The CPU suite of every package: oracle, CPU engine, kernel compiles, dispatch, ops."""
    _install(session, extras="test")
    session.install("nvidia-cuda-cuobjdump>=13.0")
    session.run("pytest", "-m", "not gpu and not slow", "-q", "--durations=10", *session.posargs)


@nox.session(python=PYTHON)
def audit(session: nox.Session) -> None:
    """The whole compile audit: every routable configuration for sm_90a and sm_100a, no spills
    (about 1,000 compiles; ``tests`` covers sm_90a). Run it before a kernel or routing change
    lands."""
    _install(session, extras="test")
    session.install("nvidia-cuda-cuobjdump>=13.0")
    session.run("pytest", "-m", "not gpu", "-q", "tests/kernels/test_compile.py", *session.posargs)


@nox.session(python=PYTHON, reuse_venv=False)
@nox.parametrize("layer", PACKAGES)
def install_check(session: nox.Session, layer: str) -> None:
    """Each layer's documented install in a fresh venv, then an import and one smoke call.

    The install is the README's command for the layer: the layer and the layers below it, by
    path, in one ``pip install`` (the siblings are not on any index). For the torch layers the
    packages go in first, the import is checked to fail with the install hint (torch is not a
    dependency, so pip must not have pulled it), then torch is installed and the smoke runs.
    """
    t0 = time.perf_counter()
    paths = [f"./packages/{name}" for name in PACKAGES[: PACKAGES.index(layer) + 1]]
    session.install(*paths)
    module = layer.replace("-", "_")
    if layer in NEEDS_TORCH:
        session.run(
            "python",
            "-c",
            f"""
import importlib.util, sys
assert importlib.util.find_spec("torch") is None, "pip installed torch for {layer}"
try:
    import {module}
except ImportError as e:
    assert "torch" in str(e) and "pip install" in str(e), e
    print("without torch:", e)
else:
    sys.exit("{module} imported without torch")
""",
        )
        session.install(TORCH_PIN)
    session.run("python", "-c", SMOKE[layer])
    session.log(f"install_check({layer}): {time.perf_counter() - t0:.1f} s")


@nox.session(python=PYTHON)
def gpu_tests(session: nox.Session) -> None:
    """The ``gpu``-marked suite, for a machine with an NVIDIA GPU and a CUDA build of torch."""
    session.install(os.environ.get("GVR_GPU_TORCH", "torch"))
    for name in PACKAGES:
        spec = f"./packages/{name}" + ("[test]" if name == "gvr-reference" else "")
        session.install("-e", spec)
    session.run("pytest", "-m", "gpu", "-q", *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main job: the DSA decode pipeline on real input, checked against the oracle."""
    _install(session)
    session.run("python", "-m", "gvr_integration.demo", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Side-by-side top-K benchmarks (GPU for the kernel providers, CPU engine otherwise)."""
    _install(session)
    session.install("matplotlib>=3.7", "rich>=13")
    session.run("python", "benchmarks/bench_topk.py", *session.posargs)


@nox.session(python=PYTHON)
def bench_cpu(session: nox.Session) -> None:
    """The CPU engine, as the dispatcher routes it, against ``torch.topk``."""
    _install(session)
    session.run("python", "benchmarks/bench_cpu_engine.py", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
