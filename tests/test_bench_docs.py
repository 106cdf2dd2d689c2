"""``python -m bench --docs`` writes only between its markers, in tables that parse; the
docs stay short and free of dated runs.

The writer is fed a results object built the way ``bench.__main__`` builds it
(``report.scenarios_json``, ``ratios``, ``targets``) from a few synthetic measurements:
no bench run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bench import docs, report
from bench.scenarios.common import END_TO_END, SERVER, Measured

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS_MAX_LINES = 250
# A date followed by a time of day ("2026-12-03 13:05", "2026-12-01, 16:00"): a diary
# entry. ISO timestamps in example output ("2026-11-30T05:00:00") are not matched.
DATED_RUN = re.compile(r"\b20\d\d-\d\d-\d\d,? (at )?\d{1,2}:\d\d")
NUMBER = re.compile(r"^(-|-?[\d,]+(\.\d+)?)$")
CELL = re.compile(r"(?<!\\)\|")  # a cell boundary: a pipe not escaped


def _measured(scenario: str, model: str, system: str, rps: float, **extra: Any) -> Measured:
    basis = SERVER if scenario in ("throughput", "soak") else END_TO_END
    return Measured(scenario, model, system, rps, 12.5, 40.0, 500.0, 1000, 5.0, basis, extra)


def _doc() -> dict[str, Any]:
    ceiling = {
        "digits": {
            "best_batch": 1024,
            "throughput_rps": 2_000_000.0,
            "p50_ms": 0.5,
            "p99_ms": 0.8,
            "peak_rss_mb": 450.0,
            "by_batch": {"1": {"p50_ms": 0.05, "after_idle_p50_ms": 0.3}},
        }
    }
    measured = [
        _measured("throughput", "digits", "naive", 400.0),
        _measured("throughput", "digits", "threadpool", 2_500.0),
        _measured("throughput", "digits", "inferlane", 11_600.0, ceiling_beside_rps=1.9e6),
        _measured(
            "priority",
            "digits",
            "inferlane-lanes",
            8_800.0,
            low_rps_while_high=8_800.0,
            low_over_solo=0.92,
        ),
        _measured("low_load", "digits", "inferlane", 20.0),
        _measured(
            "soak",
            "digits",
            "inferlane",
            8_300.0,
            rss_end_mb=610.0,
            rss_warm_mb=615.0,
            rss_growth=-0.008,
        ),
    ]
    scenarios = report.scenarios_json(ceiling, measured)
    ratios = report.ratios(scenarios)
    meta = {
        "mode": "full",
        "command": "python -m bench --docs",
        "started_at": "2026-12-06T10:00:00+0000",
        "commit": "abc1234",
        "duration_s": 100.0,
        "torch_threads": 2,
        "machine": {"cpu": "Test CPU", "cores": 2, "torch": "2.x", "gpu": None},
        "load_avg_start": [0.1, 0.1, 0.1],
        "load_avg_end": [1.0, 1.0, 1.0],
        "plan": {"models": ["digits"]},
    }
    doc = {"meta": meta, "scenarios": scenarios, "ratios": ratios}
    return report.finite({**doc, "targets": report.targets(ratios)})


def _tables(text: str) -> list[list[list[str]]]:
    """Each markdown table of ``text`` (outside code blocks) as rows of cells, header
    first; asserts that every row has the header's cell count (a ``|`` inside a cell must
    be escaped, even in code) and that the second row is the separator."""
    tables: list[list[list[str]]] = []
    block: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        fenced ^= line.startswith("```")
        if line.startswith("|") and not fenced:
            block.append(line)
            continue
        if block:
            rows = [[c.strip() for c in CELL.split(r.strip().strip("|"))] for r in block]
            assert all(len(r) == len(rows[0]) for r in rows), block
            assert all(re.fullmatch(r":?-{3,}:?", c) for c in rows[1]), block[1]
            tables.append([rows[0], *rows[2:]])
            block = []
    return tables


def _between(text: str, name: str) -> str:
    start, end = docs.markers(name)
    return text[text.index(start) + len(start) : text.index(end)]


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    out, docs_dir = tmp_path / "out", tmp_path / "docs"
    out.mkdir()
    docs_dir.mkdir()
    (out / "results.png").write_bytes(b"\x89PNG results")
    (out / "step_load-digits.png").write_bytes(b"\x89PNG step")
    (docs_dir / "BENCHMARKS.md").write_text(
        "# Benchmarks\n\nmethod text\n\n<!-- bench:results -->\nOLD-RESULTS\n"
        "<!-- /bench:results -->\n\n## Noise\n\nafter\n"
    )
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n\n## Performance\n\n<!-- bench:performance -->\nOLD-PERFORMANCE\n"
        "<!-- /bench:performance -->\n\n## Layout\n\nrest\n"
    )
    return out, docs_dir, readme


def test_the_writer_replaces_exactly_the_marked_sections(tmp_path: Path) -> None:
    out, docs_dir, readme = _files(tmp_path)
    doc = _doc()
    docs.write(doc, out, docs_dir, readme)

    text = (docs_dir / "BENCHMARKS.md").read_text()
    assert text.startswith("# Benchmarks\n\nmethod text\n\n<!-- bench:results -->\n")
    assert text.endswith("<!-- /bench:results -->\n\n## Noise\n\nafter\n")
    section = _between(text, docs.RESULTS)
    assert "OLD-RESULTS" not in section
    assert section.strip().startswith("`python -m bench --docs` (mode `full`), 2026-12-06")
    assert "commit abc1234" in section and "Test CPU (2 cores), no GPU" in section
    assert "| digits | inferlane | 11,600.0 |" in section
    assert "![benchmarks](benchmarks.png) ![step_load-digits](step_load-digits.png)" in section
    assert (docs_dir / "benchmarks.png").read_bytes() == b"\x89PNG results"
    assert (docs_dir / "step_load-digits.png").read_bytes() == b"\x89PNG step"
    assert not (docs_dir / "sparse_priority.png").exists()  # not in this run

    readme_text = readme.read_text()
    assert readme_text.startswith("# x\n\n## Performance\n\n<!-- bench:performance -->\n")
    assert readme_text.endswith("<!-- /bench:performance -->\n\n## Layout\n\nrest\n")
    performance = _between(readme_text, docs.PERFORMANCE)
    assert "OLD-PERFORMANCE" not in performance
    (table,) = _tables(performance)
    assert table[0] == ["", "digits"]
    rows = dict(table[1:])
    assert rows["inferlane, requests/s"] == "11,600"
    assert rows["over a per-message consumer loop"] == "29.00"
    assert rows["that backlog's rate over its rate alone"] == "0.920"


def test_a_second_run_replaces_the_first(tmp_path: Path) -> None:
    out, docs_dir, readme = _files(tmp_path)
    doc = _doc()
    docs.write(doc, out, docs_dir, readme)
    doc["meta"]["commit"] = "def5678"
    docs.write(doc, out, docs_dir, readme)
    text = (docs_dir / "BENCHMARKS.md").read_text()
    assert "def5678" in text and "abc1234" not in text
    assert text.count("| model | scenario |") == 1


def test_the_written_tables_parse(tmp_path: Path) -> None:
    out, docs_dir, readme = _files(tmp_path)
    docs.write(_doc(), out, docs_dir, readme)
    section = _between((docs_dir / "BENCHMARKS.md").read_text(), docs.RESULTS)
    measured, ratios, targets = _tables(section)
    assert measured[0][:3] == ["model", "scenario", "throughput (req/s)"]
    assert ratios[0] == ["ratio", "value"] and targets[0] == ["target", "value", "met"]
    for row in measured[1:]:  # throughput, p50, p99, peak RSS
        assert all(NUMBER.match(cell) for cell in row[2:6]), row
    for row in ratios[1:] + targets[1:]:
        assert NUMBER.match(row[1]), row
    assert {row[2] for row in targets[1:]} <= {"yes", "**no**", "not run"}


@pytest.mark.parametrize(
    ("share", "warned"), [(0.012, False), (report.STEAL_WARN, True), (0.33, True)]
)
def test_the_summary_names_the_cpu_steal_of_the_run(share: float, warned: bool) -> None:
    doc = _doc()
    doc["meta"]["cpu_steal_share"] = share
    first = report.markdown(doc).splitlines()[0]
    assert f"CPU steal {100 * share:.1f}% of the run" in first
    assert ("figures run low" in first) is warned


def test_a_run_from_before_steal_was_recorded_says_so() -> None:
    assert "CPU steal not recorded" in report.markdown(_doc()).splitlines()[0]


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        "<!-- bench:results -->\n<!-- bench:results -->\n<!-- /bench:results -->\n",
        "<!-- /bench:results -->\n<!-- bench:results -->\n",
    ],
)
def test_missing_doubled_or_reversed_markers_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="bench:results"):
        docs.replace_section(text, docs.RESULTS, "new")


def test_the_repository_docs_hold_the_markers_and_their_tables_parse() -> None:
    docs.check(REPO / "docs", REPO / "README.md")
    benchmarks = (REPO / "docs" / "BENCHMARKS.md").read_text()
    assert [t[0][:2] for t in _tables(_between(benchmarks, docs.RESULTS))][:3] == [
        ["model", "scenario"],
        ["ratio", "value"],
        ["target", "value"],
    ]
    assert _tables(_between((REPO / "README.md").read_text(), docs.PERFORMANCE))
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        _tables(page.read_text())  # every table of every page: one cell count per row


def test_benchmarks_md_is_short() -> None:
    lines = (REPO / "docs" / "BENCHMARKS.md").read_text().count("\n")
    assert lines <= BENCHMARKS_MAX_LINES


def test_no_page_records_a_dated_run() -> None:
    found = [
        f"{page.name}: {match.group(0)}"
        for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for match in DATED_RUN.finditer(page.read_text())
    ]
    assert not found, "a run's date and time belong in git history, not in the docs"
