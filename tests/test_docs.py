"""Every ``python`` code block of README.md, docs/*.md and packages/*/README.md runs as
written. A block whose first line is ``# needs a GPU`` runs only where CUDA is available;
every other block must run on a CPU-only machine. Signature listings use ``text`` fences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS += sorted((ROOT / "packages").glob("*/README.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
GPU_MARK = "# needs a GPU"


def _blocks():
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(1), id=f"{path.relative_to(ROOT)}:{line}")


BLOCKS = list(_blocks())


def test_the_docs_have_code_blocks():
    # the fence pattern finds the blocks (a test over no block would pass for nothing)
    assert len(BLOCKS) >= 12
    ids = {p.id for p in BLOCKS}
    assert any(i.startswith("README.md:") for i in ids)
    assert any(i.startswith("docs/api.md:") for i in ids)


@pytest.mark.parametrize("code", BLOCKS)
def test_code_block_runs(code):
    if code.startswith(GPU_MARK) and not torch.cuda.is_available():
        pytest.skip("the block is marked as needing a GPU")
    exec(compile(code, "<doc block>", "exec"), {"__name__": "__doc_block__"})
