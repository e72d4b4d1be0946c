"""Resource audit of compiled kernels: registers, stack, spills, from the cubin itself.

An exported kernel object (``compiled.export_to_c``) embeds its device code as an ELF image of
machine type 190 (``EM_CUDA``). :func:`embedded_cubins` cuts those images out of the host
object; :func:`resource_usage` reads them with ``cuobjdump --dump-resource-usage`` (from the
``nvidia-cuda-cuobjdump`` wheel or a CUDA toolkit on ``PATH``). No GPU is needed, so CI audits
every configuration for spills.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ResourceUsage",
    "embedded_cubins",
    "resource_usage",
    "audit_config",
    "find_cuobjdump",
    "find_cuda_tool",
]

EM_CUDA = 190
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ResourceUsage:
    """Per-kernel resources as ``cuobjdump`` reports them.

    Attributes:
        function: mangled kernel name.
        registers: registers per thread.
        stack: stack frame bytes per thread.
        local: local-memory bytes per thread (spills land here).
        shared: static shared memory bytes.
    """

    function: str
    registers: int
    stack: int
    local: int
    shared: int

    @property
    def spills(self) -> bool:
        """Whether the kernel uses local memory or a stack frame."""
        return self.local > 0 or self.stack > 0


def find_cuda_tool(name: str, env: str) -> str | None:
    """Path of the CUDA binary utility ``name`` (``cuobjdump``, ``nvdisasm``): ``$<env>``,
    ``PATH``, or the ``nvidia-cuda-<name>`` wheel's ``bin`` folder."""
    given = os.environ.get(env)
    if given and Path(given).exists():
        return given
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia

        for root in getattr(nvidia, "__path__", []):
            for cand in Path(root).glob(f"*/bin/{name}"):
                return str(cand)
    except ImportError:
        pass
    return None


def find_cuobjdump() -> str | None:
    """Path of ``cuobjdump``: ``$CUOBJDUMP``, ``PATH``, or the ``nvidia-cuda-cuobjdump`` wheel."""
    return find_cuda_tool("cuobjdump", "CUOBJDUMP")


def _elf64_extent(blob: bytes, at: int) -> int:
    """Bytes an ELF64 image starting at ``at`` spans: the furthest of its section table, its
    sections' data and its segments."""
    (shoff,) = struct.unpack_from("<Q", blob, at + 40)
    (phoff,) = struct.unpack_from("<Q", blob, at + 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", blob, at + 54)
    end = shoff + shentsize * shnum
    for i in range(shnum):
        o = at + shoff + i * shentsize
        (sh_type,) = struct.unpack_from("<I", blob, o + 4)
        off, size = struct.unpack_from("<QQ", blob, o + 24)
        if sh_type != 8:  # SHT_NOBITS occupies no file space
            end = max(end, off + size)
    for i in range(phnum):
        o = at + phoff + i * phentsize
        off, _, _, filesz = struct.unpack_from("<QQQQ", blob, o + 8)
        end = max(end, off + filesz)
    return end


def embedded_cubins(blob: bytes) -> list[bytes]:
    """The ELF64 device images (machine ``EM_CUDA``) embedded in a host object or library."""
    images = []
    at = blob.find(_ELF_MAGIC, 1)
    while at != -1:
        head = blob[at : at + 64]
        if len(head) == 64 and head[4] == 2 and struct.unpack_from("<H", head, 18)[0] == EM_CUDA:
            size = _elf64_extent(blob, at)
            if 0 < size <= len(blob) - at:
                images.append(blob[at : at + size])
        at = blob.find(_ELF_MAGIC, at + 1)
    return images


_USAGE = re.compile(
    r"Function (?P<fn>\S+):\s*REG:(?P<reg>\d+) STACK:(?P<stack>\d+) SHARED:(?P<shared>\d+) "
    r"LOCAL:(?P<local>\d+)"
)


def resource_usage(cubin: bytes, cuobjdump: str | None = None) -> list[ResourceUsage]:
    """Resource usage of every kernel in a cubin.

    Raises:
        RuntimeError: ``cuobjdump`` is not available or failed.
    """
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run(
            [tool, "--dump-resource-usage", f.name], capture_output=True, text=True
        )
    if res.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {res.stderr.strip()}")
    text = " ".join(res.stdout.split())
    return [
        ResourceUsage(m["fn"], int(m["reg"]), int(m["stack"]), int(m["local"]), int(m["shared"]))
        for m in _USAGE.finditer(text)
    ]


_ELF_ARCH = re.compile(r"\bsm=(\d+a?)\b")


def cubin_arch(cubin: bytes, cuobjdump: str | None = None) -> str:
    """The target of a cubin as ``cuobjdump -elf`` reports it (``"sm_90a"``, ``"sm_100a"``).

    Raises:
        RuntimeError: ``cuobjdump`` is not available, failed, or names no target.
    """
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-elf", f.name], capture_output=True, text=True)
    m = _ELF_ARCH.search(res.stdout)
    if res.returncode != 0 or m is None:
        raise RuntimeError(f"cuobjdump -elf named no target: {res.stderr.strip()}")
    return f"sm_{m[1]}"


def audit_config(config, arch: str) -> list[ResourceUsage]:
    """Compile ``config`` for ``arch``, export it, and report the resources of its kernels.

    Raises:
        RuntimeError: no device image, or one built for another target than ``arch``.
    """
    from .compile import compile_config

    compiled = compile_config(config, arch)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "k.o"
        compiled.export_to_c(str(obj), function_name=config.name)
        cubins = embedded_cubins(obj.read_bytes())
    if not cubins:
        raise RuntimeError(f"no device image found in the export of {config.name}")
    for c in cubins:
        got = cubin_arch(c)
        if got != arch:
            raise RuntimeError(f"{config.name} was compiled for {got}, not {arch}")
    return [u for c in cubins for u in resource_usage(c)]
