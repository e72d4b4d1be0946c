"""Generate ``docs/performance.md`` from the committed benchmark JSON.

    python benchmarks/make_performance_doc.py benchmarks/results/h200/bench.json [more.json ...]

The document is derived data: edit the benchmark, rerun it on the GPU, commit the JSON, rerun
this script. Results that hold upstream GVR V2 (``gvr2``) records get per-cell tables of GVR,
gvr_2 and torch.topk with GVR's time over gvr_2's; older results render as before.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path

GRID_K = (512, 1024, 2048)
GRID_SETS = ("decode-grid", "graph")
PROVIDER_ORDER = (
    "gvr", "gvr-raw", "gvr-fp32", "gvr2", "gvr2-fp32", "flashinfer", "flashinfer-varlen", "torch",
    "amax",
)  # fmt: skip
LABELS = {
    "gvr": "GVR",
    "gvr-raw": "GVR raw",
    "gvr-fp32": "GVR on fp32 copy",
    "gvr2": "gvr_2",
    "gvr2-fp32": "gvr_2 on fp32 copy",
    "flashinfer": "flashinfer.top_k",
    "flashinfer-varlen": "flashinfer top_k_varlen auto",
    "torch": "torch.topk",
    "amax": "read floor (amax)",
}
LEGEND = (
    "In the tables, n/a: outside that provider's contract (the reasons follow the table); "
    "absent: not importable; inexact: not exact on that input, so not timed; untimed: could "
    "not be captured in a CUDA graph; -: not run."
)
SHORT = (
    ("not applicable", "n/a"),
    ("not importable", "absent"),
    ("not timed", "untimed"),
    ("failed", "failed"),
)


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _status(r) -> str:
    """A record as a table cell: its median time, or a word saying why it has none."""
    if r is None:
        return "-"
    if r.get("median_us") is not None:
        return _fmt(r["median_us"])
    if r.get("exact") is False:
        return "inexact"
    note = r.get("note") or ""
    for prefix, word in SHORT:
        if note.startswith(prefix):
            return word
    return "-"


def _has_gvr2(records) -> bool:
    return any(r["provider"] == "gvr2" for r in records)


def _grid_tables(records, timing):
    recs = [r for r in records if r["set"] in GRID_SETS and r["timing"] == timing]
    by = defaultdict(dict)
    for r in recs:
        by[(r["k"], r["rows"], r["n"])][r["provider"]] = r
    ns = sorted({r["n"] for r in recs})
    bs = sorted({r["rows"] for r in recs})
    with_gvr2 = _has_gvr2(recs)
    lines = []
    if with_gvr2:
        lines += [
            "Each cell: GVR us / gvr_2 us / torch.topk us (GVR time / gvr_2 time, GVR speedup "
            "over torch.topk); a ratio below 1 means GVR is faster than gvr_2.",
            "",
        ]
    for k in GRID_K:
        if not any(key[0] == k for key in by):
            continue
        title = (
            "GVR / gvr_2 / torch.topk us (GVR/gvr_2, x torch)"
            if with_gvr2
            else "GVR us / torch.topk us (speedup)"
        )
        lines += [
            f"**K = {k}** — {title}",
            "",
            "| batch | " + " | ".join(f"n = {n}" for n in ns) + " |",
            "|---|" + "---|" * len(ns),
        ]
        for b in bs:
            cells = []
            for n in ns:
                c = by.get((k, b, n), {})
                g, t = c.get("gvr"), c.get("torch")
                if g is None or t is None:
                    cells.append("-")
                    continue
                mark = "" if g.get("exact") else " INEXACT"
                if with_gvr2:
                    g2 = c.get("gvr2")
                    cells.append(
                        f"{_status(g)} / {_status(g2)} / {_status(t)} "
                        f"({_fmt(g.get('ratio_vs_gvr2'), '.2f')}, "
                        f"{_fmt(g.get('speedup_vs_torch'), '.2f')}x){mark}"
                    )
                else:
                    cells.append(
                        f"{_fmt(g['median_us'])} / {_fmt(t['median_us'])} "
                        f"({_fmt(g['speedup_vs_torch'], '.2f')}x){mark}"
                    )
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _flat_table(records, set_name, extra_cols):
    """One line per record (results without gvr_2)."""
    recs = [r for r in records if r["set"] == set_name]
    if not recs:
        return []
    cols = [
        "provider",
        "k",
        "rows",
        "n",
        *extra_cols,
        "median_us",
        "p10_us",
        "p90_us",
        "gbps",
        "speedup_vs_torch",
        "exact",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in recs:
        vals = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, float):
                v = f"{v:.2f}" if c == "speedup_vs_torch" else f"{v:.1f}"
            vals.append("-" if v is None else str(v))
        lines.append("| " + " | ".join(vals) + " |")
    return lines + [""]


def _cell_table(records, set_name, extra_cols):
    """One line per cell: every provider's median time side by side, GVR's time over
    gvr_2's and GVR's speedup over torch.topk; the reasons behind "n/a" cells below."""
    recs = [r for r in records if r["set"] == set_name]
    if not recs:
        return []
    cells: dict = {}
    for r in recs:
        key = (r["timing"], r["k"], r["rows"], r["n"], *(r.get(c) for c in extra_cols))
        cells.setdefault(key, {})[r["provider"]] = r
    present = [p for p in PROVIDER_ORDER if any(r["provider"] == p for r in recs)]
    timings = sorted({r["timing"] for r in recs})
    cols = (
        (["timing"] if len(timings) > 1 else [])
        + ["k", "rows", "n", *extra_cols]
        + [f"{LABELS.get(p, p)} us" for p in present]
        + ["GVR/gvr_2", "GVR x torch"]
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for key, by in cells.items():
        timing, k, rows, n, *extra = key
        g = by.get("gvr") or by.get("gvr-raw")
        vals = ([timing] if len(timings) > 1 else []) + [str(k), str(rows), str(n)]
        vals += ["-" if v is None else str(v) for v in extra]
        vals += [_status(by.get(p)) for p in present]
        vals += [
            _fmt(g.get("ratio_vs_gvr2") if g else None, ".2f"),
            _fmt(g.get("speedup_vs_torch") if g else None, ".2f"),
        ]
        lines.append("| " + " | ".join(vals) + " |")
    lines.append("")
    reasons = defaultdict(int)
    for r in recs:
        note = r.get("note") or ""
        if note.startswith("not applicable") or note.startswith("failed"):
            reasons[(r["provider"], note)] += 1
    for (prov, note), count in sorted(reasons.items()):
        lines.append(f"- {LABELS.get(prov, prov)}, {count} cell(s): {note}")
    if reasons:
        lines.append("")
    return lines


def _clock_line(c: dict) -> str:
    if "error" in c:
        return f"{c.get('stage')}: {c['error']}"

    def num(key, unit):
        v = c.get(key)
        return "?" if v is None else f"{v:.0f} {unit}"

    return (
        f"{c.get('stage')}: SM {num('sm_mhz', 'MHz')} (max {num('max_sm_mhz', 'MHz')}), "
        f"memory {num('mem_mhz', 'MHz')}, {num('power_w', 'W')}, {num('temp_c', 'C')}"
    )


def _meta_lines(meta: dict) -> list[str]:
    lines = [
        f"- device: {meta.get('device')} ({meta.get('sm_count')} SMs), driver "
        f"{meta.get('driver')}, torch {meta.get('torch')} (CUDA {meta.get('cuda')}), "
        f"CuTe DSL {meta.get('cutlass_dsl')}"
        + (f", FlashInfer {meta['flashinfer']}" if meta.get("flashinfer") else ""),
        f"- commit: `{meta.get('commit')}`, date: {meta.get('date')}",
    ]
    warm = meta.get("warmup")
    if isinstance(warm, dict):
        warm = [warm]
    if warm:
        total = sum(w.get("matmuls", 0) for w in warm)
        secs = sum(w.get("seconds", 0.0) for w in warm)
        lines.append(
            f"- clock warm-up: {total} bf16 8192^3 matmuls over {secs:.1f} s in "
            f"{len(warm)} round(s), before each set's first cell"
        )
    clocks = meta.get("clocks") or []
    if clocks:
        lines.append("- GPU clocks seen (nvidia-smi, read only):")
        lines += [f"  - {_clock_line(c)}" for c in clocks]
    lines += [f"- {note}" for note in meta.get("notes") or []]
    return lines + [""]


def render(results: list[tuple[str, dict]], notes: str = "", doc_dir=None) -> str:
    doc_dir = Path(doc_dir) if doc_dir is not None else Path.cwd() / "docs"
    out = [
        "# Performance",
        "",
        "Generated by `benchmarks/make_performance_doc.py` from the JSON committed under "
        "`benchmarks/results/`; every number below was measured side by side in one run "
        "(cold L2, median of the repetitions, CUDA events), and every provider's result was "
        "checked exact before it was timed (a provider that is not exact on an input is "
        "marked so there and not timed). Rerun: `nox -s bench -- --out "
        "benchmarks/results/h200` on the GPU, then this script.",
        "",
    ]
    if notes:
        out += [notes.rstrip(), ""]
    for name, res in results:
        meta, summ, recs = res["metadata"], res.get("summary", {}), res["records"]
        out += [f"## {name}", ""] + _meta_lines(meta)
        headlines = summ.get("headlines") or []
        if headlines:
            out += [f"- {h}" for h in headlines] + [""]
        inexact = res.get("inexact_by_family") or {}
        if inexact:
            parts = [
                f"{LABELS.get(p, p)}: "
                + ", ".join(f"{fam} ({n} cells)" for fam, n in sorted(fams.items()))
                for p, fams in sorted(inexact.items())
            ]
            out += [
                "Inexact cells of providers that do not claim exactness (reported, not timed "
                "there): " + "; ".join(parts),
                "",
            ]
        if summ:
            data = {key: v for key, v in summ.items() if key != "headlines"}
            block = ["```json", json.dumps(data, indent=1), "```"]
            if "by_set" in data:  # long: folded, the headlines above carry the main numbers
                out += ["<details><summary>Summary JSON</summary>", ""] + block
                out += ["", "</details>", ""]
            else:
                out += ["Summary:", "", *block, ""]
        if _has_gvr2(recs):
            out += [LEGEND, ""]
        skipped = sorted(
            {
                f"{r['provider']}: {r['note']}"
                for r in recs
                if (r.get("note") or "").startswith("not importable")
            }
        )
        if skipped:
            out += ["Providers not run here: " + "; ".join(skipped), ""]
        for timing, title in (
            ("eager", "Decode grid, eager calls"),
            ("graph", "Decode grid, CUDA-graph replay"),
        ):
            tables = _grid_tables(recs, timing)
            if tables:
                out += [f"### {title}", ""] + tables
        for set_name, title, extra in (
            ("mtp", "Decode with next_n and compress_ratio", ["next_n", "compress_ratio"]),
            ("prefill", "Prefill windows", []),
            ("real", "Real indexer rows", ["family"]),
            ("adversarial", "Adversarial families", ["family"]),
            ("tail", "Tie-heavy tail beside gaussian rows of the same shapes", ["family"]),
            ("tail-graph", "Tie-heavy tail, CUDA-graph replay", ["family"]),
            ("half", "16-bit logits (bf16 grid, fp16 at n = 262,144)", ["dtype"]),
            ("half-graph", "16-bit logits, CUDA-graph replay", ["dtype"]),
            ("host", "Host time per eager call (us, back-to-back launches)", []),
        ):
            set_recs = [r for r in recs if r["set"] == set_name]
            if _has_gvr2(set_recs) or set_name.startswith("half"):
                t = _cell_table(recs, set_name, extra)
            else:
                t = _flat_table(recs, set_name, extra)
            if t:
                out += [f"### {title}", ""] + t
        pngs = sorted(p.name for p in Path(res["_dir"]).glob(f"{res['_tag']}_*.png"))
        for p in pngs:
            rel = os.path.relpath(Path(res["_dir"]) / p, start=doc_dir)
            out += [f"![{p}]({Path(rel).as_posix()})", ""]
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out", default="docs/performance.md")
    ap.add_argument(
        "--notes",
        action="append",
        default=[],
        help="a markdown file placed after the intro (repeat: placed in the order given)",
    )
    args = ap.parse_args(argv)
    paths = [Path(path).resolve() for path in args.json]
    # (results from several folders, e.g. one a device, are named by folder and stem)
    several = len({p.parent for p in paths}) > 1
    results = []
    for p in paths:
        res = json.loads(p.read_text())
        res["_dir"], res["_tag"] = str(p.parent), p.stem
        results.append((f"{p.parent.name}/{p.stem}" if several else p.stem, res))
    notes = "\n".join(Path(n).read_text().rstrip() + "\n" for n in args.notes)
    out = Path(args.out)
    out.write_text(render(results, notes, doc_dir=out.resolve().parent))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
