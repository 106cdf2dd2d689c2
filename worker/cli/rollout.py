"""``inferlane rollout start | status | promote | abort``: rollouts as rows in SQL.

The workers follow the newest rollout of each model; these commands write and read
those rows (docs/ROLLOUTS.md). Refusals (no such model or candidate, a rollout already
running, none running) exit with code 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from worker.cli.options import Database, database_url
from worker.settings.rollout_plan import Mode, RolloutPlan

if TYPE_CHECKING:
    from storage.rollouts import RolloutEvent, RolloutRecord, RolloutStore
    from worker.models.specs import RegistryFile

rollout_app = typer.Typer(
    help="Model rollouts: start a candidate version, follow it, promote or abort it.",
    no_args_is_help=True,
)
console = Console()
errors = Console(stderr=True)

Model = Annotated[str, typer.Argument(help="Model name in the registry.")]
Reason = Annotated[str | None, typer.Option(help="Why: kept with the decision.")]
# A worker may decide between our read and our write; each retry reads the rollout again.
_DECIDE_TRIES = 5
_EVENTS_SHOWN = 5


@rollout_app.command()
def start(
    model: Model,
    version: Annotated[str, typer.Option(help="A candidate version of MODEL in the registry.")],
    mode: Annotated[Mode | None, typer.Option(help="Default: the candidate's plan.")] = None,
    steps: Annotated[
        str | None, typer.Option(help="Canary shares in percent, e.g. 1,5,25,50,100.")
    ] = None,
    interval: Annotated[
        str | None, typer.Option(help="Analysis interval: 60s, 2m, or seconds.")
    ] = None,
    passes: Annotated[
        int | None, typer.Option(help="Passing intervals before the next step.")
    ] = None,
    sample: Annotated[
        float | None, typer.Option(help="Share of requests run on both versions, 0..1.")
    ] = None,
    models: Annotated[
        Path | None,
        typer.Option(help="Registry TOML (default: INFERLANE_MODELS, else the demo models)."),
    ] = None,
    database: Database = None,
    reason: Reason = None,
) -> None:
    """Start rolling out a candidate version of MODEL.

    The candidate's rollout plan in the registry (or the defaults), overridden by the
    options given."""
    from storage.rollouts import RolloutConflict
    from worker.rollout.begin import begin

    registry = _registry(models)
    primary = next((m for m in registry.models if m.name == model), None)
    if primary is None:
        names = ", ".join(m.name for m in registry.models)
        _refuse(f"no model {model!r} in the registry (it has: {names})")
    candidate = next(
        (c for c in registry.candidates if c.name == model and c.version == version), None
    )
    if candidate is None:
        known = [c.version for c in registry.candidates if c.name == model]
        listed = ", ".join(known) if known else "none"
        _refuse(f"{model} has no candidate version {version!r} in [[candidates]] ({listed})")
    plan = _plan(
        candidate.rollout or RolloutPlan(),
        mode=mode,
        steps=_steps(steps),
        interval_s=_interval_s(interval),
        passes=passes,
        sample=sample,
    )
    with _store(database, create=True) as store:
        try:
            record = begin(store, primary, candidate, plan, reason=reason)
        except RolloutConflict as exc:
            _refuse(str(exc))
    console.print(f"started rollout #{record.id}: {_summary(record)}", markup=False)


@rollout_app.command()
def status(
    model: Annotated[str | None, typer.Argument(help="Only this model.")] = None,
    json: Annotated[bool, typer.Option("--json", help="JSON (docs/ROLLOUTS.md).")] = False,
    database: Database = None,
) -> None:
    """The newest rollout of each model (or of MODEL) and its last decisions."""
    with _store(database) as store:
        if model is None:
            records = store.current()
        else:
            latest = store.latest(model)
            records = [] if latest is None else [latest]
        shown = [(r, store.events(r.id)) for r in records]
    if json:
        out = {"rollouts": [{**asdict(r), "events": [asdict(e) for e in ev]} for r, ev in shown]}
        typer.echo(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
        return
    if not shown:
        console.print("no rollouts" + (f" of {model}" if model else ""), markup=False)
        return
    for record, events in shown:
        console.print(_rollout_table(record, events))
        console.print(_events_table(record, events[-_EVENTS_SHOWN:]))


@rollout_app.command()
def promote(model: Model, database: Database = None, reason: Reason = None) -> None:
    """Make MODEL's running candidate answer every request."""
    from storage.rollouts import PROMOTE, PROMOTED

    record = _decide(model, database, PROMOTE, PROMOTED, reason or "promoted by hand")
    console.print(f"rollout #{record.id} promoted: {_summary(record)}", markup=False)


@rollout_app.command()
def abort(model: Model, database: Database = None, reason: Reason = None) -> None:
    """Stop MODEL's running rollout: the primary answers every request again."""
    from storage.rollouts import ABORT, ABORTED

    record = _decide(model, database, ABORT, ABORTED, reason or "aborted by hand")
    console.print(f"rollout #{record.id} aborted: {_summary(record)}", markup=False)


def _decide(
    model: str, database: str | None, decision: str, state: str, reason: str
) -> RolloutRecord:
    from storage.rollouts import PROMOTED, RUNNING

    with _store(database) as store:
        for _ in range(_DECIDE_TRIES):
            seen = store.latest(model)
            if seen is None or seen.state != RUNNING:
                newest = "" if seen is None else f" (the newest, #{seen.id}, is {seen.state})"
                _refuse(f"no running rollout of {model!r}{newest}")
            promoted = state == PROMOTED
            moved = store.decide(
                seen,
                decision=decision,
                state=state,
                step=len(seen.steps) - 1 if promoted else seen.step,
                share=1.0 if promoted else 0.0,
                passes=seen.passes,
                interval_start=datetime.now(UTC),
                gates={},
                reason=reason,
            )
            if moved is not None:
                return moved
    errors.print(f"the rollout of {model} kept changing: {_DECIDE_TRIES} tries", style="red")
    raise typer.Exit(1)


@contextmanager
def _store(database: str | None, *, create: bool = False) -> Iterator[RolloutStore]:
    """The rollouts' store. ``create``: a database that does not exist yet is made (a
    rollout starts); otherwise it is refused, never created (there is nothing to read)."""
    from storage import ResultStore, StoreUnavailable
    from storage.rollouts import RolloutStore
    from worker.cli.database import existing_database

    url = database_url(database)
    try:
        if create:
            with ResultStore(url) as results:  # migrates a new database
                yield RolloutStore(results.engine)
            return
        with existing_database(url, "rollouts", default=database is None) as engine:
            yield RolloutStore(engine)
    except StoreUnavailable as exc:
        errors.print(f"database unavailable: {exc}", style="red", markup=False)
        raise typer.Exit(1) from None


def _registry(models: Path | None) -> RegistryFile:
    """The registry the worker serves: ``--models``, else its setting, else the demo."""
    from worker.cli.registry import read_registry
    from worker.settings import WorkerSettings

    path = models or WorkerSettings().models
    if path is None:
        from worker.demo.models import ensure_demo_models

        path = ensure_demo_models()
    return read_registry(path)  # one line naming what is wrong, exit 2


def _plan(base: RolloutPlan, **given: Any) -> RolloutPlan:
    from pydantic import ValidationError

    overrides = {k: v for k, v in given.items() if v is not None}
    try:
        return RolloutPlan.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        _refuse(f"invalid rollout plan: {exc}")


def _steps(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise typer.BadParameter(f"--steps takes percents, e.g. 1,5,25,50,100: {text!r}") from None


def _interval_s(text: str | None) -> float | None:
    from worker.drift.views import parse_span_s

    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        span = parse_span_s(text)
    if span is None:
        raise typer.BadParameter(f"--interval takes 60s, 2m or seconds: {text!r}")
    return float(span)


def _refuse(message: str) -> NoReturn:
    errors.print(message, style="red", markup=False, highlight=False)
    raise typer.Exit(2)


def _summary(r: RolloutRecord) -> str:
    steps = ", ".join(f"{s:g}" for s in r.steps)
    return (
        f"{r.model} {r.primary_version} -> {r.candidate_version}, {r.mode}, {r.state}, "
        f"share {r.share:.0%}, steps {steps}%, sample {r.sample:g}, "
        f"interval {r.interval_s:g}s, {r.passes_needed} passes per step"
    )


def _rollout_table(r: RolloutRecord, events: list[RolloutEvent]) -> Table:
    # Names and reasons are shown as they are (Text), never read as rich markup.
    table = Table(show_header=False, title=Text(f"{r.model}: rollout #{r.id}, {r.state}"))
    steps = ", ".join(f"{s:g}" for s in r.steps)
    last = events[-1] if events else None
    rows = {
        "mode": f"{r.mode}, sample {r.sample:.0%}",
        "versions": f"{r.primary_version} -> {r.candidate_version} (primary -> candidate)",
        "step": f"{r.step + 1}/{len(r.steps)} of {steps}%" if r.mode == Mode.CANARY else "-",
        "share": f"{r.share:.1%} answered by {r.candidate_version}",
        "passes": f"{r.passes}/{r.passes_needed} passing intervals at this step",
        "interval": f"{r.interval_s:g}s, this one since {_clock(r.interval_start)} UTC",
        "last decision": "" if last is None else _decision_text(last),
    }
    for key, value in rows.items():
        table.add_row(key, Text(value))
    return table


def _events_table(r: RolloutRecord, events: list[RolloutEvent]) -> Table:
    table = Table("at (UTC)", "decision", "step", "share", "gates", "reason",
                  title=Text(f"{r.model}: rollout #{r.id}, last decisions"))  # fmt: skip
    for e in events:
        table.add_row(*map(Text, (
            _clock(e.at), e.decision, str(e.step + 1), f"{e.share:.1%}", _gates_text(e.gates),
            e.reason or "",
        )))  # fmt: skip
    return table


def _decision_text(e: RolloutEvent) -> str:
    return f"{e.decision}: {e.reason}" if e.reason else e.decision


def _clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%m-%d %H:%M:%S")


def _gates_text(gates: dict[str, Any]) -> str:
    """``name value/threshold pass|FAIL|wait`` per gate, for measured gates as the
    runtime stores them ({value, threshold, verdict}); anything else as it is."""
    parts = []
    for name, gate in gates.items():
        if isinstance(gate, dict) and "value" in gate:
            verdict = {"pass": " pass", "fail": " FAIL", "wait": " wait"}.get(
                str(gate.get("verdict")), ""
            )
            parts.append(f"{name} {_num(gate['value'])}/{_num(gate.get('threshold'))}{verdict}")
        else:
            parts.append(f"{name} {gate}")
    return "\n".join(parts)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)
