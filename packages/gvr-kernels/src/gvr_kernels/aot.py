"""Ahead-of-time export and loading of compiled kernels.

A configuration compiled here (on any machine, GPU or not) is exported with
``compiled.export_to_c`` to a host object that embeds the cubin and a TVM-FFI entry point,
then linked into a shared library against the CuTe DSL runtime and ``libtvm_ffi``. The
library loads with ``tvm_ffi.load_module`` on a machine that has the runtime libraries but
not the DSL compiler, and takes torch tensors and Python ints directly.

The persistent compile cache of ``gvr-dispatch`` and the device runs of the test suite both
use this path.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from .registry import config_from_dict, family_of

__all__ = [
    "export_config",
    "export_library",
    "load_library",
    "load_exported",
    "manifest_entry",
    "MANIFEST",
]

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def _runtime_libraries() -> list[str]:
    import cutlass.cute as cute

    return list(cute.runtime.find_runtime_libraries(enable_tvm_ffi=True))


def export_config(config, out_dir: str | os.PathLike, arch: str) -> Path:
    """Compile ``config`` for ``arch`` and write ``<out_dir>/<config.name>.so``.

    The shared object is written to a temporary name and renamed into place, so a reader never
    sees a partial file.

    Args:
        config: the compile key.
        out_dir: destination folder (created if missing).
        arch: ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        The path of the shared library; its entry point is named ``config.name``.

    Raises:
        RuntimeError: linking failed (no ``gcc``/``cc`` on the machine, or the DSL runtime
            libraries are missing).
    """
    from .compile import compile_config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiled = compile_config(config, arch)
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        raise RuntimeError("exporting a kernel needs a C compiler driver (gcc or cc) to link it")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        obj = Path(tmp) / f"{config.name}.o"
        so_tmp = Path(tmp) / f"{config.name}.so"
        compiled.export_to_c(str(obj), function_name=config.name)
        cmd = [cc, "-shared", "-o", str(so_tmp), str(obj), *_runtime_libraries()]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"linking {config.name} failed: {res.stderr.strip()}")
        final = out / f"{config.name}.so"
        os.replace(so_tmp, final)
    return final


def export_library(
    configs: Iterable, out_dir: str | os.PathLike, arch: str = "sm_90a"
) -> dict[str, dict]:
    """Export several configurations and write a manifest beside them.

    Returns:
        The manifest: ``{name: {"file": ..., "arch": ..., "family": ..., "config": {...}}}``.
    """
    out = Path(out_dir)
    manifest: dict[str, dict] = {}
    for cfg in configs:
        path = export_config(cfg, out, arch)
        manifest[cfg.name] = manifest_entry(cfg, path.name, arch)
        log.info("exported %s for %s", cfg.name, arch)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def manifest_entry(config, file: str, arch: str) -> dict:
    """The manifest record of one exported configuration (tagged with its family)."""
    return {"file": file, "arch": arch, "family": family_of(config).name, "config": asdict(config)}


def load_exported(path: str | os.PathLike, name: str):
    """Load the entry point ``name`` of an exported kernel library (needs ``tvm_ffi``)."""
    import tvm_ffi

    module = tvm_ffi.load_module(str(path))
    try:
        return module[name]
    except (KeyError, TypeError, AttributeError):
        return getattr(module, name)


def load_library(out_dir: str | os.PathLike) -> dict:
    """Load every kernel of an exported folder, keyed by its configuration."""
    out = Path(out_dir)
    manifest = json.loads((out / MANIFEST).read_text())
    loaded = {}
    for name, entry in manifest.items():
        cfg = config_from_dict(entry.get("family", "streaming"), entry["config"])
        loaded[cfg] = load_exported(out / entry["file"], name)
    return loaded
