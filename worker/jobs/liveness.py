"""What a job's row says about the process running it: alive (a heartbeat), failed (with
the reason), or gone (interrupted, resumable by running the same command again)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from consumers.errors import InferlaneError
from storage.jobs import HEARTBEAT_S, JobConflict, JobStore
from worker.base.blocking import own_thread

log = logging.getLogger(__name__)

_MAX_REASON_CHARS = 2000


class JobFailed(Exception):
    """The job stopped on an error; its row says ``failed`` with this reason."""


@contextmanager
def running(jobs: JobStore, name: str) -> Iterator[None]:
    """Claim the job for this process and beat while the body runs.

    An exception marks the job ``failed`` with its reason and is raised as ``JobFailed``
    (a ``JobConflict``, the job cancelled meanwhile, is raised as it is); Ctrl-C leaves
    it running without a heartbeat, which reads as interrupted at once.
    """
    jobs.claim(name, f"{socket.gethostname()}:{os.getpid()}")
    stop = threading.Event()
    beat = own_thread("job-heartbeat", _beat, jobs, name, stop)
    try:
        yield
    except JobConflict:
        raise
    except Exception as exc:
        stop.set()
        reason = reason_of(exc)
        log.debug("job %s failed", name, exc_info=True)
        _quietly(jobs.fail, name, reason)
        raise JobFailed(f"job {name!r} failed: {reason}") from exc
    except BaseException:  # KeyboardInterrupt, SystemExit: not a failure of the job
        stop.set()
        _quietly(jobs.release, name)
        raise
    finally:
        stop.set()
        beat.join()


def _beat(jobs: JobStore, name: str, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            jobs.heartbeat(name)
        except Exception as exc:  # the job's own writes will meet the same outage
            log.warning("job %s: heartbeat not written: %s", name, exc)


def _quietly(write: Callable[..., None], *args: str) -> None:
    """A last word in the job's row; if the database refuses it, the heartbeat stops
    anyway and the job reads as interrupted."""
    try:
        write(*args)
    except Exception as exc:
        log.warning("job %s: state not written: %s", args[0], exc)


def reason_of(exc: Exception) -> str:
    """An exception as one line for a job's (or chunk's) row: its code when it has one."""
    if isinstance(exc, InferlaneError):
        text = f"{exc.code}: {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:_MAX_REASON_CHARS]
