"""The family registry: the one list of kernel families, and what reads it.

Compilation (``gvr_kernels.compile``), ahead-of-time export and loading (``gvr_kernels.aot``),
the cubin resource audit (``gvr_kernels.audit``), the list of routable configurations
(:func:`routable_configs`), the test kernel provider (``gvr_kernels.testing``) and the compile
cache's source fingerprint (:func:`kernel_source_files`) all go through :data:`FAMILIES`, so a
family cannot be half-registered and an edited kernel source can never load a stale binary.

Adding a family: its own package (config + kernel + ``FAMILY``), one entry below, its routing
rule in ``gvr_kernels.routing``, its tests (``docs/kernels.md``, "Adding a family").
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path

from . import cluster, register, streaming
from .family import Family
from .spec import B200, H200, DeviceSpec

__all__ = [
    "FAMILIES",
    "Family",
    "family_of",
    "config_from_dict",
    "routable_configs",
    "kernel_source_files",
    "package_roots",
    "COMPILE_TARGETS",
]

#: Every kernel family, by name.
FAMILIES: dict[str, Family] = {
    f.name: f for f in (streaming.FAMILY, register.FAMILY, cluster.FAMILY)
}

#: Specs the compile tests cover, by target arch.
COMPILE_TARGETS = {"sm_90a": H200, "sm_100a": B200}

#: Modules that shape every compiled kernel besides the families' own: the compile entry and
#: the launch ABI (fake arguments).
_COMMON_ROOTS = ("gvr_kernels.compile", "gvr_kernels.abi")
#: Project packages whose modules can shape a kernel (imports elsewhere are third-party).
PROJECT_PACKAGES = ("gvr_kernels", "gvr_reference")


def family_of(config) -> Family:
    """The registry entry of a configuration.

    Raises:
        TypeError: ``config`` is not a configuration of a registered family.
    """
    fam = FAMILIES.get(getattr(config, "family", None))
    if fam is None or type(config) is not fam.config_type:
        raise TypeError(f"not a configuration of a registered kernel family: {config!r}")
    return fam


def config_from_dict(family: str, fields: Mapping) -> object:
    """Rebuild a configuration from its family name and fields (AOT manifests)."""
    try:
        fam = FAMILIES[family]
    except KeyError:
        raise ValueError(f"unknown kernel family {family!r}; known: {sorted(FAMILIES)}") from None
    return fam.config_type(**fields)


def routable_configs(spec: DeviceSpec = H200) -> Iterator:
    """Every compile configuration a call can route to on ``spec`` (each distinct route in each
    call mode, with and without values, default and deterministic ties), each checked with its
    family's ``can_implement``."""
    from .routing import routed_configs

    for config in routed_configs(spec):
        if not family_of(config).can_implement(config, spec):
            raise AssertionError(f"the router chose {config.name}, which {spec.name} cannot run")
        yield config


# ---------------------------------------------------------------------------- source files
def package_roots() -> dict[str, Path]:
    """Where the project packages are imported from: ``{package: folder}``."""
    roots = {}
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"package {name} is not importable")
        roots[name] = Path(next(iter(spec.submodule_search_locations)))
    return roots


def _module_file(module: str, roots: Mapping[str, Path]) -> Path | None:
    top, *rest = module.split(".")
    if top not in roots:
        return None
    base = roots[top].joinpath(*rest)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(module: str, path: Path) -> Iterator[str]:
    """Project modules a module imports (absolute and relative, with ``from x import mod``)."""
    package = module if _is_package(path) else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{anchor}.{node.module}" if node.module else anchor
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                yield f"{target}.{alias.name}"


def kernel_source_files(roots: Mapping[str, Path] | None = None) -> list[Path]:
    """Every project source file that shapes a compiled kernel: each family's kernel and config
    modules, the compile entry and the ABI, and every project module they import
    (transitively), with the ``__init__.py`` of every package on the way.

    Args:
        roots: ``{package: folder}`` for ``gvr_kernels`` and ``gvr_reference`` (default: where
            they are imported from); tests point this at edited copies.

    Returns:
        The files, sorted.
    """
    roots = dict(roots) if roots is not None else package_roots()
    start = list(_COMMON_ROOTS)
    for fam in FAMILIES.values():
        start += [fam.kernel_module, fam.config_type.__module__]
    files: set[Path] = set()
    walked: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module in walked:
            continue
        walked.add(module)
        path = _module_file(module, roots)
        if path is None:
            continue
        files.add(path)
        todo += [m for m in _imports(module, path) if m.split(".")[0] in roots]
        # Parent packages run on import: their own files count, their imports do not (a
        # package __init__ re-exports for users; it cannot change what a kernel traces).
        parts = module.split(".")
        for i in range(1, len(parts)):
            parent = _module_file(".".join(parts[:i]), roots)
            if parent is not None:
                files.add(parent)
    return sorted(files)
