"""``python -m bench --docs``: a run's tables into the docs, each between its markers.

docs/BENCHMARKS.md gets the run's summary (``report.markdown``) and its PNGs between
``<!-- bench:results -->`` and ``<!-- /bench:results -->``; README.md gets a short
table between ``<!-- bench:performance -->`` and ``<!-- /bench:performance -->``. The
text outside the markers is left as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bench import report

REPO = Path(__file__).resolve().parents[1]
RESULTS, PERFORMANCE = "results", "performance"
# The run's PNGs and their names in docs/ (only those the run wrote are copied).
PNGS = {"results.png": "benchmarks.png", "sparse_priority.png": "sparse_priority.png"}
STEP_LOAD_PNG = "step_load-*.png"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with what lies between ``name``'s markers replaced by ``body``."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"expected {start} and {end} once each")
    head, rest = text.split(start)
    if end not in rest:
        raise ValueError(f"{end} comes before {start}")
    _, tail = rest.split(end)
    return f"{head}{start}\n{body.strip()}\n{end}{tail}"


def copy_pngs(out: Path, docs: Path) -> list[str]:
    """The run's PNGs copied from ``out`` into ``docs``: their names there."""
    pairs = [(out / src, dst) for src, dst in PNGS.items()]
    pairs += [(png, png.name) for png in sorted(out.glob(STEP_LOAD_PNG))]
    copied = []
    for src, dst in pairs:
        if src.exists():
            shutil.copyfile(src, docs / dst)
            copied.append(dst)
    return copied


def results_section(doc: dict[str, Any], pngs: list[str]) -> str:
    images = [f"![{name.removesuffix('.png')}]({name})" for name in pngs]
    return report.markdown(doc) + "\n" + " ".join(images)


# README's rows: (label, where in results.json, with {m} for the model, digits shown).
ROWS = (
    ("inferlane, requests/s", "ratios.{m}.inferlane_rps", 0),
    ("over a per-message consumer loop", "ratios.{m}.inferlane_over_naive", 2),
    ("over a thread pool, one request per forward pass", "ratios.{m}.inferlane_over_threadpool", 2),
    ("over the forward pass alone, timed beside it", "ratios.{m}.inferlane_over_ceiling_beside", 3),
    ("high-lane p99 under a saturating backlog, ms", "ratios.priority.{m}_high_p99_ms", 1),
    ("that backlog's rate over its rate alone", "ratios.priority.{m}_low_over_solo", 3),
    ("p50 at low load, ms", "scenarios.low_load.{m}.p50_ms", 1),
)


def lookup(doc: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of ``doc``, or None where a step is missing."""
    node: Any = doc
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def performance_table(doc: dict[str, Any]) -> str:
    """README's short table: inferlane against the baselines, and its latency under load."""
    models = doc["meta"]["plan"]["models"]
    lines = [
        f"{report.header(doc)}:",
        "",
        "| | " + " | ".join(models) + " |",
        "|---|" + "---:|" * len(models),
    ]
    for label, path, digits in ROWS:
        values = [report.fmt(lookup(doc, path.format(m=m)), digits) for m in models]
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    met = [t["met"] for t in doc["targets"].values() if t["met"] is not None]
    lines += [
        "",
        f"{sum(met)} of the {len(met)} targets this run judged were met. Every target, the "
        "method and the full tables: [docs/BENCHMARKS.md](docs/BENCHMARKS.md).",
    ]
    return "\n".join(lines)


def check(docs: Path, readme: Path) -> None:
    """Raises ValueError unless both files hold their markers once each, in order."""
    replace_section((docs / "BENCHMARKS.md").read_text(), RESULTS, "")
    replace_section(readme.read_text(), PERFORMANCE, "")


def write(doc: dict[str, Any], out: Path, docs: Path, readme: Path) -> None:
    """The run in ``out`` (``doc``: its results.json) into ``docs``/BENCHMARKS.md, its
    PNGs into ``docs``, and README's Performance table."""
    check(docs, readme)
    benchmarks = docs / "BENCHMARKS.md"
    section = results_section(doc, copy_pngs(out, docs))
    benchmarks.write_text(replace_section(benchmarks.read_text(), RESULTS, section))
    readme.write_text(replace_section(readme.read_text(), PERFORMANCE, performance_table(doc)))
