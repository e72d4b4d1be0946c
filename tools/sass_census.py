"""A census of a kernel's SASS, on any machine (no GPU): its instruction count, its convergence
checks (``BRA.DIV``: the compiler could not prove the warp converged before a warp-wide
instruction) and the loops that load whole 16-byte vectors, for comparing builds of one
configuration or two configurations of a family (``benchmarks/results/h100/ragged_handout.log``,
section 8)::

    CUTE_DSL_ARCH=sm_90a python tools/sass_census.py --cells 256,262144,512 256,65536,512
    CUTE_DSL_ARCH=sm_90a python tools/sass_census.py --grid      # the decode grid's routes
    python tools/sass_census.py --exports <export dir>          # every kernel of an export

A cell ``rows,n,K`` is routed with the H200's tables (``gvr_kernels.spec.H200``) and its
configuration exported into a temporary folder (``gvr_kernels.aot.export_config``). The cubin
embedded in each export (``gvr_kernels.audit.embedded_cubins``) is disassembled with
``nvdisasm -c`` (the ``nvidia-cuda-nvdisasm`` wheel, ``$NVDISASM`` or ``PATH``). A *vector loop*
is the innermost backward branch around a group of 16-byte global loads (``LDG`` with ``.128``;
loads fewer than :data:`GROUP_GAP` instructions apart form one group); it is printed as its size
in instructions and its loads, in code order. ``--grid`` takes the cells of the benchmark's
decode grid (``benchmarks/bench_topk.py``: ``GRID_B`` x ``GRID_N`` x ``GRID_K``) and prints each
distinct configuration once, with the cells it serves (code size per route:
``benchmarks/results/cpu/sass_decode_grid.log``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: Loads at most this many instructions apart belong to one group (one tile's loads).
GROUP_GAP = 40
#: A backward branch spanning more than this many instructions is not a vector loop (the
#: kernel's error paths jump back across whole phases).
MAX_LOOP = 2000

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"\bBRA\b.*?(\.L_x_\d+)")


@dataclass(frozen=True)
class Census:
    """One kernel's counts: ``instructions``, ``bra_div`` (convergence checks) and ``loops``
    (``(size, loads)`` of each vector loop, in code order)."""

    instructions: int
    bra_div: int
    loops: tuple[tuple[int, int], ...]


def find_nvdisasm() -> str | None:
    """Path of ``nvdisasm``: ``$NVDISASM``, ``PATH``, or the ``nvidia-cuda-nvdisasm`` wheel."""
    from gvr_kernels.audit import find_cuda_tool

    return find_cuda_tool("nvdisasm", "NVDISASM")


def census(sass: str) -> Census:
    """Count ``nvdisasm -c`` output (one kernel)."""
    instrs: list[str] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = _INSTR.search(line)
        if m:
            instrs.append(m.group(1))
    loads = [i for i, s in enumerate(instrs) if re.search(r"\bLDG\S*\.128\b", s)]
    groups: list[list[int]] = []
    for i in loads:
        if groups and i - groups[-1][-1] < GROUP_GAP:
            groups[-1].append(i)
        else:
            groups.append([i])
    back = []  # (start, end) of every backward branch
    for i, s in enumerate(instrs):
        m = _TARGET.search(s)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            back.append((labels[m.group(1)], i))
    loops = []
    for g in groups:
        around = [(a, b) for a, b in back if a <= g[0] and b >= g[-1] and b - a < MAX_LOOP]
        if around:
            a, b = min(around, key=lambda ab: ab[1] - ab[0])
            loops.append((b - a + 1, len(g)))
    bra_div = sum(1 for s in instrs if s.startswith("BRA.DIV"))
    return Census(len(instrs), bra_div, tuple(loops))


def census_of_export(path: Path, nvdisasm: str) -> Census:
    """The census of the first kernel embedded in an exported shared object or object file."""
    from gvr_kernels.audit import embedded_cubins

    cubins = embedded_cubins(path.read_bytes())
    if not cubins:
        raise ValueError(f"{path}: no cubin embedded")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubins[0])
        f.flush()
        res = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {path}: {res.stderr.strip()}")
    return census(res.stdout)


def routed_groups(cells, spec) -> dict:
    """``{configuration: [cell, ...]}`` of decode cells ``(rows, n, K)`` routed for ``spec``
    (``gvr_kernels.routing.route_static``), configurations in the order of their first cell."""
    from gvr_kernels.routing import route_static

    groups: dict = {}
    for b, n, k in cells:
        cfg = route_static(spec, rows=b, n_env=n, k=k).config
        groups.setdefault(cfg, []).append((b, n, k))
    return groups


def describe(name: str, c: Census) -> str:
    loops = " ".join(f"{size}({n})" for size, n in c.loops)
    return f"{name}: {c.instructions} instructions, {c.bra_div} BRA.DIV, vector loops {loops}"


def main() -> None:
    from cold_code import parse_cell

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cells", nargs="*", type=parse_cell, default=[], help="rows,n,K routed decode cells"
    )
    ap.add_argument("--grid", action="store_true", help="the decode grid's routed configurations")
    ap.add_argument("--exports", default=None, help="an export folder: every kernel in it")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args()
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    if args.exports:
        for so in sorted(Path(args.exports).glob("*.so")):
            print(describe(so.stem, census_of_export(so, nvdisasm)), flush=True)
    cells = list(args.cells)
    if args.grid:
        sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
        import bench_topk as bt

        cells += [(b, n, k) for b in bt.GRID_B for n in bt.GRID_N for k in bt.GRID_K]
    if cells:
        from gvr_kernels.aot import export_config
        from gvr_kernels.spec import H200

        for cfg, served in routed_groups(cells, H200).items():
            with tempfile.TemporaryDirectory() as d:
                so = export_config(cfg, d, args.arch)
                line = describe(cfg.name, census_of_export(so, nvdisasm))
            if args.grid:
                line += " | cells " + " ".join(",".join(map(str, c)) for c in served)
            print(line, flush=True)


if __name__ == "__main__":
    main()
