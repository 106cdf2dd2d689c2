"""``--profile``: py-spy attached to the worker during a throughput run, summarized.

py-spy samples the worker process from outside (``--nonblocking``: it does not pause
it), writes collapsed stacks, and ``top`` ranks functions by the share of samples in
which they run themselves (self) and in which they are on the stack (inclusive).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path


def start(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        return None
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, int(seconds))),
            "--rate",
            "200",
            "--nonblocking",
            "--threads",
            "--format",
            "raw",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _frames(stack: str) -> list[str]:
    # "thread (idle);func (file.py:12);..." -> function names with their files
    return [
        f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
        if " (" in f
        else f
        for f in stack.split(";")
    ]


def top(collapsed: Path, n: int = 25) -> str:
    """The ``n`` functions with most self samples and most inclusive samples."""
    own, inclusive, total = Counter[str](), Counter[str](), 0
    by_thread = Counter[str]()
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = _frames(stack)
        total += count
        by_thread[frames[0]] += count
        own[frames[-1]] += count
        for frame in set(frames[1:]):
            inclusive[frame] += count
    if not total:
        return "no samples\n"
    lines = [
        f"{total} samples (threads: "
        + ", ".join(f"{t} {c / total:.0%}" for t, c in by_thread.most_common(6))
        + ")",
        "",
        "self%  function",
    ]
    lines += [f"{c / total:6.1%}  {f}" for f, c in own.most_common(n)]
    lines += ["", "incl%  function"]
    lines += [f"{c / total:6.1%}  {f}" for f, c in inclusive.most_common(n)]
    return "\n".join(lines) + "\n"
