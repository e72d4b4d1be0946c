"""The compile cache: compiled kernels in memory, and their exported objects on disk.

In memory, a compiled kernel is keyed by ``(config, arch)`` (a configuration of any registered
family). On disk, each kernel is the host object ``compiled.export_to_c`` writes (cubin
embedded, TVM-FFI entry point named after the configuration), loaded back with
``cutlass.runtime.load_module(path, enable_tvm_ffi=True)``, which needs neither a compiler nor
a linker. The on-disk key is a fingerprint of

- every source file that shapes a compiled kernel (``gvr_kernels.registry.kernel_source_files``:
  each family's kernel and config modules, the compile entry, the launch ABI, and every project
  module they import, ``gvr_reference.model`` and ``ladder`` included),
- the CuTe DSL and TVM-FFI versions,
- the target architecture and the configuration name,

laid out as ``<cache_dir>/<arch>/<fingerprint>/<config name>.o``. Writes go to a temporary file
in the same folder and are renamed into place, so concurrent processes never read a partial
object. An entry that fails to load is logged, removed and recompiled.

The location is ``cache_dir`` when given (:meth:`KernelCache.set_cache_dir`), else the
environment variable ``GVR_CACHE_DIR``, else ``~/.cache/gvr``; ``GVR_CACHE_DISABLE=1`` or
``set_cache_dir(None)`` turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gvr_kernels.registry import kernel_source_files, package_roots

__all__ = ["KernelCache", "CacheEntry", "FROM_ENV", "default_cache_dir", "source_fingerprint"]

logger = logging.getLogger("gvr.cache")

#: ``source`` values of a :class:`CacheEntry`.
SOURCES = ("memory", "disk", "compiled")

#: Default of ``cache_dir`` arguments: "the location the environment asks for" (unlike ``None``,
#: which turns the disk cache off).
FROM_ENV = object()


def default_cache_dir() -> Path | None:
    """The cache folder the environment asks for: ``None`` if ``GVR_CACHE_DISABLE`` is set to
    a true value, else ``$GVR_CACHE_DIR``, else ``~/.cache/gvr``."""
    if os.environ.get("GVR_CACHE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    env = os.environ.get("GVR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "gvr"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def source_fingerprint(roots: dict[str, Path] | None = None) -> str:
    """Hex digest of everything a compiled kernel depends on besides its configuration and
    arch: the sources that shape kernels (``gvr_kernels.registry.kernel_source_files``) and the
    CuTe DSL / TVM-FFI versions.

    Args:
        roots: ``{package: folder}`` of the project packages to read (default: where they are
            imported from); tests point this at edited copies.
    """
    roots = dict(roots) if roots is not None else package_roots()
    h = hashlib.sha256()
    for path in kernel_source_files(roots):
        h.update(_relative_name(path, roots).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    h.update(f"\0cutlass-dsl={_version('nvidia-cutlass-dsl')}".encode())
    h.update(f"\0tvm-ffi={_version('apache-tvm-ffi')}".encode())
    return h.hexdigest()[:24]


def _relative_name(path: Path, roots: dict[str, Path]) -> str:
    """``package/relative/path.py`` of a source file (stable across install locations)."""
    for name, root in roots.items():
        if path.is_relative_to(root):
            return f"{name}/{path.relative_to(root).as_posix()}"
    return path.name


def _compile(config, arch: str | None):
    from gvr_kernels.compile import SUPPORTED_ARCHS, compile_config

    # Archs the DSL cannot be pointed at by name (e.g. sm_103a) compile for the visible GPU.
    return compile_config(config, arch if arch in SUPPORTED_ARCHS else None)


def _load_object(path: Path, name: str):
    import cutlass.runtime

    module = cutlass.runtime.load_module(str(path), enable_tvm_ffi=True)
    return module, module[name]


def _store_object(compiled, path: Path, name: str) -> None:
    compiled.export_to_c(str(path), function_name=name)


@dataclass
class CacheEntry:
    """A ready kernel.

    Attributes:
        fn: the TVM-FFI callable (see ``gvr_kernels.compile`` for its arguments).
        config: its compile key.
        arch: its target.
        source: where it came from the first time: ``"disk"`` or ``"compiled"``.
        seconds: what getting it cost then.
        keepalive: objects the callable needs alive (the loaded module).
    """

    fn: Callable
    config: object
    arch: str
    source: str
    seconds: float
    keepalive: object = None


class KernelCache:
    """Compiled kernels in memory and on disk (see the module docstring).

    Args:
        compile_fn: ``compile_fn(config, arch) -> compiled`` (default: ``gvr_kernels``'
            ``compile_config``); the result is callable and has ``export_to_c``.
        load_fn: ``load_fn(path, name) -> (keepalive, callable)`` for an exported object.
        store_fn: ``store_fn(compiled, path, name)`` writes an exported object.
        cache_dir: the disk location (a path, or ``None`` for no disk cache); default from the
            environment (:func:`default_cache_dir`).

    Attributes:
        stats: how many lookups were served from ``"memory"``, ``"disk"`` or ``"compiled"``.
    """

    def __init__(
        self,
        compile_fn: Callable | None = None,
        load_fn: Callable | None = None,
        store_fn: Callable | None = None,
        cache_dir: str | os.PathLike | None | object = FROM_ENV,
    ):
        self._compile = compile_fn or _compile
        self._load = load_fn or _load_object
        self._store = store_fn or _store_object
        self._dir: Path | None = (
            default_cache_dir() if cache_dir is FROM_ENV else _as_dir(cache_dir)
        )
        self._memory: dict[tuple[object, str], CacheEntry] = {}
        self._fingerprint: str | None = None
        self._lock = threading.RLock()
        self.stats = dict.fromkeys(SOURCES, 0)

    # ------------------------------------------------------------------ location
    @property
    def cache_dir(self) -> Path | None:
        """The disk cache folder, or ``None`` when the disk cache is off."""
        return self._dir

    def set_cache_dir(self, cache_dir: str | os.PathLike | None) -> None:
        """Use ``cache_dir`` for the disk cache from now on (``None``: no disk cache).
        Kernels already in memory stay there."""
        self._dir = _as_dir(cache_dir)

    def fingerprint(self) -> str:
        """The source/version fingerprint of the on-disk keys (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = source_fingerprint()
        return self._fingerprint

    def path_for(self, config, arch: str) -> Path | None:
        """Where the exported object of ``config`` for ``arch`` lives (``None``: no disk)."""
        if self._dir is None:
            return None
        return self._dir / arch / self.fingerprint() / f"{config.name}.o"

    # ------------------------------------------------------------------ lookups
    def lookup(self, config, arch: str) -> CacheEntry | None:
        """The kernel if it is in memory, else ``None`` (never compiles or reads the disk)."""
        return self._memory.get((config, arch))

    def get(self, config, arch: str) -> tuple[CacheEntry, str]:
        """The kernel for ``config`` on ``arch``: from memory, else from disk, else compiled
        (and then stored on disk).

        Returns:
            ``(entry, source)`` with ``source`` in ``("memory", "disk", "compiled")`` for this
            lookup.

        Raises:
            Whatever the compiler raises for a configuration it cannot build.
        """
        key = (config, arch)
        entry = self._memory.get(key)
        if entry is not None:
            self.stats["memory"] += 1
            return entry, "memory"
        with self._lock:
            entry = self._memory.get(key)
            if entry is not None:
                self.stats["memory"] += 1
                return entry, "memory"
            entry = self._from_disk(config, arch)
            if entry is None:
                entry = self._compile_and_store(config, arch)
            self._memory[key] = entry
            self.stats[entry.source] += 1
            return entry, entry.source

    def _from_disk(self, config, arch: str) -> CacheEntry | None:
        path = self.path_for(config, arch)
        if path is None or not path.is_file():
            return None
        t0 = time.perf_counter()
        try:
            keepalive, fn = self._load(path, config.name)
        except Exception as exc:  # a truncated, foreign or stale object: rebuild it
            logger.warning(
                "gvr: cached kernel %s is unloadable (%s: %s); recompiling",
                path,
                type(exc).__name__,
                exc,
            )
            _remove(path)
            return None
        return CacheEntry(fn, config, arch, "disk", time.perf_counter() - t0, keepalive)

    def _compile_and_store(self, config, arch: str) -> CacheEntry:
        t0 = time.perf_counter()
        compiled = self._compile(config, arch)
        seconds = time.perf_counter() - t0
        path = self.path_for(config, arch)
        if path is not None:
            try:
                self._write(compiled, path, config, arch)
            except Exception as exc:  # a read-only or full disk must not fail the call
                logger.warning(
                    "gvr: could not store kernel %s in %s (%s: %s)",
                    config.name,
                    path.parent,
                    type(exc).__name__,
                    exc,
                )
        return CacheEntry(compiled, config, arch, "compiled", seconds)

    def _write(self, compiled, path: Path, config, arch: str) -> None:
        folder = path.parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{config.name}.", suffix=".o", dir=folder)
        os.close(fd)
        try:
            self._store(compiled, Path(tmp), config.name)
            os.replace(tmp, path)
        finally:
            _remove(Path(tmp))
        meta = folder / "meta.json"
        if not meta.exists():
            _write_text_atomic(
                meta,
                json.dumps(
                    {
                        "arch": arch,
                        "fingerprint": self.fingerprint(),
                        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
                        "tvm_ffi": _version("apache-tvm-ffi"),
                    },
                    indent=1,
                    sort_keys=True,
                ),
            )

    def clear_memory(self) -> None:
        """Forget every in-memory kernel (the disk cache is untouched)."""
        with self._lock:
            self._memory.clear()

    def __len__(self) -> int:
        return len(self._memory)


def _as_dir(cache_dir) -> Path | None:
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(
            f"cache_dir must be a path or None, got {type(cache_dir).__name__} {cache_dir!r}"
        )
    return Path(cache_dir).expanduser()


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.debug("could not remove %s: %s", path, exc)


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        _remove(Path(tmp))
