"""Sessions for the GVR monorepo.

The packages install from their local paths in dependency order:
gvr-reference <- gvr-kernels <- gvr-dispatch <- gvr-integration.

On a CPU-only machine torch comes from ``pip install torch==2.13.0`` (a local CPU build);
a bare ``torch`` requirement would download a CUDA build of several GB, so every session
that needs torch installs that pin before any package that depends on it.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ["gvr-reference", "gvr-kernels", "gvr-dispatch", "gvr-integration"]
TORCH_PIN = os.environ.get("GVR_TORCH_PIN", "torch==2.13.0")
PYTHON = os.environ.get("GVR_NOX_PYTHON", "3.11")


def _install(session: nox.Session, upto: str = "gvr-integration", extras: str = "") -> None:
    """Install torch (when needed) and the local packages up to ``upto``, in order."""
    wanted = PACKAGES[: PACKAGES.index(upto) + 1]
    if "gvr-dispatch" in wanted:
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
    session.run("pytest", "-m", "not gpu and not slow", "-q", *session.posargs)


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
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
