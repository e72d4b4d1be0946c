"""``tools/tune_meet.py`` times each cell's routed launch against the plain workspace split of
the same rows (CPU: the variants it builds)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels import routing  # noqa: E402
from gvr_kernels.spec import H200  # noqa: E402
from tune_meet import CELLS, variants  # noqa: E402


def test_variants_pair_the_route_with_the_workspace_split():
    keep = routing._split_cluster
    clustered = 0
    for rows, n, k, _kind in CELLS:
        got = variants(rows, n, k)
        assert routing._split_cluster is keep  # (restored)
        label, routed, parts = got[0]
        assert label == "routed" and parts >= 1
        if len(got) == 1:
            # already the workspace split
            assert routed.family == "streaming" and routed.split and not routed.cluster
            continue
        ((label, ws, ws_parts),) = got[1:]
        assert label == "wsplit" and ws.family == "streaming" and ws.split and not ws.cluster
        assert ws_parts == routing._static_parts(H200, rows, n) > 1
        clustered += routed.family == "cluster" or bool(getattr(routed, "cluster", 0))
    # the cells the cluster split or the cluster family still serve are among them
    assert clustered >= 6
