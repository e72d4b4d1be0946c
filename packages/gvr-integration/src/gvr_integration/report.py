"""The demo's report: per-configuration results, a table for the terminal, JSON for files."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["ConfigResult", "DemoReport"]


@dataclass
class ConfigResult:
    """One configuration run in one mode (``"eager"`` or ``"graph"``) over all its steps.

    Timings are medians over steps of the per-step time per call, in microseconds.
    """

    k: int
    next_n: int
    compress_ratio: int
    weights: str
    batch: int
    mode: str
    steps: int = 0
    rows_per_step: int = 0
    min_len: int = 0
    max_len: int = 0
    exact_steps: int = 0
    rows_total: int = 0
    rows_same_set: int = 0
    tie_rows: int = 0
    attn_max_abs_diff: float = 0.0
    tie_attn_max_abs_diff: float = 0.0
    attn_tolerance: float = 0.0
    gvr_us: float = 0.0
    torch_topk_us: float = 0.0
    first_failure: str | None = None
    gvr_us_steps: list[float] = field(default_factory=list, repr=False)
    torch_us_steps: list[float] = field(default_factory=list, repr=False)

    @property
    def exact(self) -> bool:
        return self.steps > 0 and self.exact_steps == self.steps

    @property
    def attention_ok(self) -> bool:
        return self.attn_max_abs_diff <= self.attn_tolerance

    def finish(self) -> None:
        """Fold the per-step timings into medians."""
        if self.gvr_us_steps:
            self.gvr_us = statistics.median(self.gvr_us_steps)
        if self.torch_us_steps:
            self.torch_topk_us = statistics.median(self.torch_us_steps)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("gvr_us_steps")
        d.pop("torch_us_steps")
        d["exact"] = self.exact
        d["attention_ok"] = self.attention_ok
        return d


@dataclass
class DemoReport:
    """Everything the demo prints and writes."""

    device: str
    engine: str
    sample: str
    torch_version: str
    results: list[ConfigResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.exact and r.attention_ok for r in self.results)

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "engine": self.engine,
            "sample": self.sample,
            "torch": self.torch_version,
            "seconds": round(self.seconds, 3),
            "all_exact": all(r.exact for r in self.results),
            "attention_ok": all(r.attention_ok for r in self.results),
            "ok": self.ok,
            "results": [r.to_json() for r in self.results],
        }

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    # ------------------------------------------------------------------ rendering
    def rows(self) -> list[list[str]]:
        """Table cells, one list per result."""
        out = []
        for r in self.results:
            speed = r.torch_topk_us / r.gvr_us if r.gvr_us > 0 else float("nan")
            out.append(
                [
                    r.weights,
                    str(r.next_n),
                    str(r.compress_ratio),
                    str(r.k),
                    r.mode,
                    f"{r.steps}x{r.rows_per_step}",
                    f"{r.min_len}-{r.max_len}",
                    f"{r.exact_steps}/{r.steps}" + ("" if r.exact else " FAIL"),
                    f"{r.gvr_us:.1f}",
                    f"{r.torch_topk_us:.1f}",
                    f"{speed:.2f}x",
                    f"{r.attn_max_abs_diff:.2e}" + ("" if r.attention_ok else " FAIL"),
                    f"{r.rows_same_set}/{r.rows_total}",
                ]
            )
        return out

    HEADERS = [
        "weights",
        "next_n",
        "cr",
        "K",
        "mode",
        "steps x rows",
        "row len",
        "exact steps",
        "GVR us/call",
        "torch.topk us/call",
        "topk/GVR",
        "attn max|diff|",
        "same set rows",
    ]

    def header_lines(self) -> list[str]:
        return [
            f"GVR DSA decode demo: {self.sample} on {self.device} ({self.engine}), "
            f"torch {self.torch_version}",
            "lightning indexer -> GVR top-K (checked by the oracle's validator) -> sparse "
            "attention, compared with attention over torch.topk's selection",
        ]

    def footer_lines(self) -> list[str]:
        steps = sum(r.steps for r in self.results)
        exact = sum(r.exact_steps for r in self.results)
        ties = sum(r.tie_rows for r in self.results)
        diff = max((r.attn_max_abs_diff for r in self.results), default=0.0)
        tol = min((r.attn_tolerance for r in self.results), default=0.0)
        lines = [
            f"{exact}/{steps} steps exact over {len(self.results)} runs in {self.seconds:.1f} s",
            f"attention max|diff| {diff:.2e} (tolerance {tol:.1e}) on rows with the same "
            f"selected set; {ties} rows chose another member of the K-th value's tie class",
            "verdict: " + ("OK" if self.ok else "FAILED"),
        ]
        if not self.results:
            lines.insert(0, "no configuration fits the sample (K must be <= the cache width)")
        for r in self.results:
            if r.first_failure:
                lines.append(f"first failure ({r.weights} K={r.k} {r.mode}):\n{r.first_failure}")
        return lines

    def render(self, console=None) -> str:
        """Print the report with ``rich`` when available, else as plain text; return the text."""
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:  # plain text fallback
            return self._render_plain()
        table = Table(show_lines=False)
        for h in self.HEADERS:
            table.add_column(h, justify="right" if h not in ("weights", "mode") else "left")
        for cells in self.rows():
            table.add_row(*cells)
        console = console or Console(width=160)
        with console.capture() as cap:
            for line in self.header_lines():
                console.print(line, markup=False, highlight=False)
            console.print(table)
            for line in self.footer_lines():
                console.print(line, markup=False, highlight=False)
        text = cap.get()
        print(text, end="")
        return text

    def _render_plain(self) -> str:
        cells = [self.HEADERS, *self.rows()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.HEADERS))]
        lines = list(self.header_lines())
        for row in cells:
            lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        lines += self.footer_lines()
        text = "\n".join(lines) + "\n"
        print(text, end="")
        return text
