"""``tools/sass_census.py`` counts a kernel's SASS (CPU: the counting on ``nvdisasm -c`` text,
and one exported kernel where the disassembler is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from sass_census import MAX_LOOP, Census, census, find_nvdisasm  # noqa: E402


def _sass(body: list[str]) -> str:
    """``nvdisasm -c``-shaped text: labels on their own lines, instructions with offsets."""
    out, at = [], 0
    for item in body:
        if item.endswith(":"):
            out.append(item)
        else:
            out.append(f"        /*{at:04x}*/                   {item} ;")
            at += 16
    return "\n".join(out)


def test_vector_loops_are_the_innermost_back_branches_around_wide_loads():
    ldg = "LDG.E.NA.128.CONSTANT R16, desc[UR6][R16.64]"
    body = (
        ["MOV R1, c[0x0][0x28]", ldg]  # a load in no loop, far from the others
        + ["NOP"] * 45
        + [".L_x_1:", "IADD3 R2, R2, 0x1, RZ", ".L_x_2:", ldg, ldg, "BRA.DIV UR4, `(.L_x_9)"]
        + ["VOTE.ANY R5, PT, P1", "ISETP.NE.AND P0, PT, R2, R3, PT"]
        + ["@P0 BRA `(.L_x_2)", "@P1 BRA `(.L_x_1)"]  # inner loop of 6 instructions, outer of 8
        + ["LDG.E.64.STRONG.GPU R4, desc[UR6][R4.64]"]  # not a vector load
        + [".L_x_9:", "EXIT"]
    )
    c = census(_sass(body))
    assert c == Census(instructions=57, bra_div=1, loops=((6, 2),))


def test_long_back_branches_and_far_loads_are_not_one_loop():
    ldg = "LDG.E.128 R8, desc[UR4][R2.64]"
    body = [".L_x_0:", ldg] + ["NOP"] * 45 + [ldg, "NOP", "@P0 BRA `(.L_x_0)"]
    c = census(_sass(body))
    # two groups (the loads 46 apart), both inside the one back branch
    assert c.loops == ((49, 1), (49, 1))
    far = [".L_x_0:", ldg] + ["NOP"] * MAX_LOOP + ["@P0 BRA `(.L_x_0)"]
    assert census(_sass(far)).loops == ()


@pytest.mark.skipif(find_nvdisasm() is None, reason="no nvdisasm")
def test_census_of_an_exported_kernel(tmp_path):
    pytest.importorskip("cutlass")
    from gvr_kernels.aot import export_config
    from gvr_kernels.compile import target_arch
    from gvr_kernels.register import RegisterConfig
    from sass_census import census_of_export

    with target_arch("sm_90a"):
        so = export_config(RegisterConfig(threads=512, vecs=2), tmp_path, "sm_90a")
    c = census_of_export(so, find_nvdisasm())
    assert c.instructions > 500 and c.bra_div >= 0


def test_routed_groups_print_each_configuration_once_with_its_cells():
    pytest.importorskip("cutlass")
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import H200
    from sass_census import routed_groups

    cells = [(1, 4096, 512), (8, 4096, 512), (1, 4096, 512), (512, 262144, 2048)]
    groups = routed_groups(cells, H200)
    # every cell is listed under its own route, each route once, in first-cell order
    assert sum(len(v) for v in groups.values()) == len(cells)
    for cfg, served in groups.items():
        for b, n, k in served:
            assert route_static(H200, rows=b, n_env=n, k=k).config == cfg
    firsts = [served[0] for served in groups.values()]
    assert firsts == sorted(firsts, key=cells.index)
    big = route_static(H200, rows=512, n_env=262144, k=2048).config
    assert groups[big] == [(512, 262144, 2048)]
    assert big != route_static(H200, rows=1, n_env=4096, k=512).config
