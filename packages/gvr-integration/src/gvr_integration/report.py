"""The demo's report: per-configuration results, a table for the terminal, JSON for files."""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["ConfigResult", "LongRowResult", "DemoReport", "RATIO_LINE"]


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
class LongRowResult:
    """One long-row measurement: ``rows`` rows of ``width`` real scores, one K.

    Timings are medians over repetitions of one call, in microseconds.
    """

    source: str
    rows: int
    width: int
    k: int
    exact: bool = False
    gvr_us: float = 0.0
    torch_topk_us: float = 0.0
    first_failure: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


RATIO_LINE = (
    "x torch = torch.topk time / GVR time per call (wall clock, medians); above 1 GVR is "
    "faster. Timings on a shared machine move by tens of percent between runs."
)


@dataclass
class DemoReport:
    """Everything the demo prints and writes."""

    device: str
    engine: str
    sample: str
    torch_version: str
    results: list[ConfigResult] = field(default_factory=list)
    long_rows: list[LongRowResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            bool(self.results)
            and all(r.exact and r.attention_ok for r in self.results)
            and all(r.exact for r in self.long_rows)
        )

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "engine": self.engine,
            "sample": self.sample,
            "torch": self.torch_version,
            "seconds": round(self.seconds, 3),
            "all_exact": all(r.exact for r in self.results),
            "attention_ok": all(r.attention_ok for r in self.results),
            "long_rows_exact": all(r.exact for r in self.long_rows),
            "ok": self.ok,
            "results": [r.to_json() for r in self.results],
            "long_rows": [r.to_json() for r in self.long_rows],
        }

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    # ------------------------------------------------------------------ rendering
    HEADERS = [
        "config",
        "steps",
        "row len",
        "exact",
        "GVR us",
        "torch us",
        "x torch",
        "attn diff",
    ]
    LONG_HEADERS = ["long rows", "rows x len", "K", "exact", "GVR us", "torch us", "x torch"]

    def rows(self) -> list[list[str]]:
        """Cells of the decode table, one list per result."""
        out = []
        for r in self.results:
            label = f"{r.weights[:3]} n={r.next_n} cr={r.compress_ratio} K={r.k}"
            if r.mode != "eager":
                label += f" {r.mode}"
            out.append(
                [
                    label,
                    f"{r.steps}x{r.rows_per_step}",
                    f"{r.min_len}-{r.max_len}",
                    f"{r.exact_steps}/{r.steps}" + ("" if r.exact else " FAIL"),
                    f"{r.gvr_us:.1f}",
                    f"{r.torch_topk_us:.1f}",
                    _ratio(r.torch_topk_us, r.gvr_us),
                    f"{r.attn_max_abs_diff:.1e}" + ("" if r.attention_ok else " FAIL"),
                ]
            )
        return out

    def long_cells(self) -> list[list[str]]:
        """Cells of the long-row table."""
        return [
            [
                r.source,
                f"{r.rows}x{r.width:,}",
                str(r.k),
                "yes" if r.exact else "FAIL",
                f"{r.gvr_us:.1f}",
                f"{r.torch_topk_us:.1f}",
                _ratio(r.torch_topk_us, r.gvr_us),
            ]
            for r in self.long_rows
        ]

    def header_lines(self) -> list[str]:
        return [
            f"GVR DSA decode demo: {self.sample} on {self.device} ({self.engine}), "
            f"torch {self.torch_version}",
            "lightning indexer -> GVR top-K (checked by the oracle's validator) -> sparse "
            "attention, compared with attention over torch.topk's selection",
            RATIO_LINE,
            self._long_row_line(),
        ]

    def _long_row_line(self) -> str:
        widths = [r.width for r in self.long_rows]
        if not widths:
            return "The sample's decode rows hold at most 4,096 scores; no long-row call ran."
        lo, hi = min(widths), max(widths)
        span = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        return (
            "The sample's decode rows hold at most 4,096 scores; the long-row table shows rows "
            f"of {span} scores, the regime the library is for."
        )

    def footer_lines(self) -> list[str]:
        steps = sum(r.steps for r in self.results)
        exact = sum(r.exact_steps for r in self.results)
        ties = sum(r.tie_rows for r in self.results)
        diff = max((r.attn_max_abs_diff for r in self.results), default=0.0)
        tol = min((r.attn_tolerance for r in self.results), default=0.0)
        long_exact = sum(r.exact for r in self.long_rows)
        same = sum(r.rows_same_set for r in self.results)
        total = sum(r.rows_total for r in self.results)
        lines = [
            f"{exact}/{steps} steps exact over {len(self.results)} runs, {long_exact}/"
            f"{len(self.long_rows)} long-row calls exact, in {self.seconds:.1f} s",
            f"attention max|diff| {diff:.2e} (tolerance {tol:.1e}) on the {same}/{total} rows "
            f"with the same selected set as torch.topk; {ties} rows chose another member of the "
            f"K-th value's tie class",
            "verdict: " + ("OK" if self.ok else "FAILED"),
        ]
        if not self.results:
            lines.insert(
                0,
                "no configuration fits the sample (each K must be at most the cache width, and "
                "compress_ratio 1 or the sample's)",
            )
        for r in self.results:
            if r.first_failure:
                lines.append(f"first failure ({r.weights} K={r.k} {r.mode}):\n{r.first_failure}")
        for r in self.long_rows:
            if r.first_failure:
                lines.append(f"first failure ({r.source} {r.width} K={r.k}):\n{r.first_failure}")
        return lines

    def render(self, console=None) -> str:
        """Print the report with ``rich`` when available, else as plain text; return the text.

        The tables take the terminal's width (100 columns when the output is not a terminal)
        and fit in 100."""
        try:
            from rich import box
            from rich.console import Console
            from rich.table import Table
        except ImportError:  # plain text fallback
            return self._render_plain()
        if console is None:
            width = shutil.get_terminal_size((100, 24)).columns
            console = Console(width=max(60, min(width, 160)))
        tables = []
        for headers, cells in ((self.HEADERS, self.rows()), (self.LONG_HEADERS, self.long_cells())):
            if not cells:
                continue
            table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
            for i, h in enumerate(headers):
                table.add_column(h, justify="left" if i == 0 else "right")
            for row in cells:
                table.add_row(*row)
            tables.append(table)
        with console.capture() as cap:
            for line in self.header_lines():
                console.print(line, markup=False, highlight=False)
            for table in tables:
                console.print(table)
            for line in self.footer_lines():
                console.print(line, markup=False, highlight=False)
        text = cap.get()
        print(text, end="", flush=True)
        return text

    def _render_plain(self) -> str:
        lines = list(self.header_lines())
        for headers, body in ((self.HEADERS, self.rows()), (self.LONG_HEADERS, self.long_cells())):
            cells = [headers, *body]
            widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
            for row in cells:
                lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
            lines.append("")
        lines += self.footer_lines()
        text = "\n".join(lines) + "\n"
        print(text, end="")
        return text


def _ratio(torch_us: float, gvr_us: float) -> str:
    return f"{torch_us / gvr_us:.2f}x" if gvr_us > 0 else "n/a"
