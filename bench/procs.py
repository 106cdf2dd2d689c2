"""Systems under test as subprocesses: black-box, and each with its own RSS."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from bench.measure import RssSampler
from worker.intake.broker import terminate

# Tansu holds a group's first join for half the session timeout: the worker's default
# (30 s) makes every start wait 15 s. 6 s (the least the worker accepts) joins in 3 s.
WORKER_ENV = {"INFERLANE_KAFKA__SESSION_TIMEOUT_MS": "6000"}

# The systems under test import this checkout's packages, first on their path: the
# `inferlane` script alone would import the tree it was installed from (editable), and
# a bench run in another worktree would then measure that tree's worker.
REPO = Path(__file__).resolve().parents[1]


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)


def inferlane_command(
    bootstrap: str,
    database: Path,
    *,
    torch_threads: int,
    extra: tuple[str, ...] = (),
    baseline: str | None = None,
) -> list[str]:
    """``inferlane run``: the console script installed beside this interpreter; with a
    ``baseline``, ``bench.baseline_worker`` (the same flags)."""
    script = Path(sys.executable).with_name("inferlane")
    if not script.exists():
        raise FileNotFoundError(f"{script} not found: install the repo (pip install -e .)")
    start = [str(script), "run"]
    if baseline is not None:
        start = [sys.executable, "-m", "bench.baseline_worker", baseline]
    return [
        *start,
        "--bootstrap", bootstrap,
        "--database", f"sqlite:///{database}",
        "--torch-threads", str(torch_threads),
        "--http-port", "0",  # no HTTP unless ``extra`` names a port (its later flag wins)
        *extra,
    ]  # fmt: skip


def baseline_command(kind: str, bootstrap: str, model: str, *, torch_threads: int) -> list[str]:
    return [
        sys.executable, "-m", "bench.baselines", kind,
        "--bootstrap", bootstrap,
        "--model", model,
        "--torch-threads", str(torch_threads),
    ]  # fmt: skip


@dataclass
class Service:
    """A subprocess with its output in ``log`` and its RSS sampled every 0.5 s."""

    command: list[str]
    log: Path
    rss: RssSampler | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __enter__(self) -> Service:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **WORKER_ENV, "PYTHONPATH": _pythonpath()},
            )
        self.rss = RssSampler(self._proc.pid).start()
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def cpu_s(self) -> float:
        """CPU seconds (user + system, all threads) the process has used so far."""
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.command[0]} exited with {self._proc.returncode}:\n{tail}")

    def stop(self, grace_s: float = 0.5) -> None:
        """SIGTERM (the worker drains), then SIGKILL after ``grace_s``: a benchmark that
        stopped reading early does not wait for a backlog to drain."""
        if self.rss is not None:
            self.rss.stop()
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, grace_s=grace_s)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
