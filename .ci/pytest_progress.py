"""A pytest plugin of ``.ci/gpu``: each test's outcome as one JSON line, written as it comes.

pytest writes its JUnit XML and its summary only when the session ends; a run stopped at its
time box, or while its workers shut down, leaves neither. This file is appended to after
every test (by the controller only, under pytest-xdist), so that such a run still says
which tests ran and how each failed. Enabled by ``-p pytest_progress`` with this folder on
``PYTHONPATH`` and the file named by ``PORTOPS_PROGRESS_LOG``.
"""

from __future__ import annotations

import json
import os
from typing import Any

PATH = os.environ.get("PORTOPS_PROGRESS_LOG")
_controller = True


def pytest_configure(config: Any) -> None:
    global _controller
    _controller = not hasattr(config, "workerinput")  # an xdist worker reports to it


def _message(report: Any) -> str:
    """The failure's one line, as JUnit's `message`: the crash message, else the last line."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    lines = [ln for ln in str(longrepr).splitlines() if ln.strip()]
    return lines[-1] if lines else report.outcome


def pytest_runtest_logreport(report: Any) -> None:
    if not PATH or not _controller or (report.when != "call" and report.passed):
        return
    record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}
    if report.failed:
        record["message"] = _message(report)[:500]
    with open(PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
