"""The registry: listing, explaining and forcing implementations; import isolation."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import numpy as np
import pytest

import portops
from portops import _dispatch


def test_import_loads_no_optional_backend():
    code = (
        "import sys, portops, numpy as np\n"
        "portops.shift_sum(np.ones((2, 3, 4)), 1)\n"
        "print(sorted(m for m in ('torch', 'cupy', 'jax', 'dask') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_implementations_lists_every_registration():
    impls = portops.implementations("shift_sum")
    names = [i.name for i in impls]
    assert names == impls.names()
    assert "generic" in names and "numpy_blocked" in names and "numpy_add_at" in names
    generic = next(i for i in impls if i.name == "generic")
    assert generic.libraries is None and generic.devices is None
    blocked = next(i for i in impls if i.name == "numpy_blocked")
    assert blocked.libraries == ("numpy",) and blocked.summary
    priorities = [i.priority for i in impls]
    assert priorities == sorted(priorities, reverse=True)
    with pytest.raises(ValueError, match="unknown operation 'nope'"):
        portops.implementations("nope")


def test_implementations_table_reads_as_the_list_of_dicts_it_was():
    impls = portops.implementations("shift_sum")
    dicts = impls.as_dicts()
    assert len(dicts) == len(impls) and dicts[0] == impls[0].as_dict()
    blocked = next(d for d in dicts if d["name"] == "numpy_blocked")
    assert blocked == {
        "name": "numpy_blocked",
        "libraries": ["numpy"],
        "devices": None,
        "priority": blocked["priority"],
        "summary": blocked["summary"],
    }
    row = next(i for i in impls if i.name == "numpy_blocked")
    assert row["libraries"] == ["numpy"] and row["name"] == "numpy_blocked"
    lines = str(impls).splitlines()
    assert lines[0] == "implementations of shift_sum:"
    assert lines[1].split() == ["name", "priority", "libraries", "devices", "summary"]
    assert len(lines) == len(impls) + 2 and repr(impls) == str(impls)
    generic_line = next(line for line in lines if line.split()[0] == "generic")
    assert generic_line.split()[1:4] == ["-100", "any", "any"]


def test_explain_names_the_choice_and_the_alternatives():
    x = np.ones((2, 3, 4, 5))
    report = portops.explain("shift_sum", x, 2)
    assert (report.op, report.library, report.device) == ("shift_sum", "numpy", "cpu")
    assert report.chosen == "numpy_blocked"
    by_name = {c.name: c for c in report.candidates}
    assert by_name["numpy_blocked"].chosen and by_name["numpy_blocked"].applies
    assert by_name["numpy_blocked"].reason == "first that applies"
    add_at = by_name["numpy_add_at"]
    assert not add_at.chosen and add_at.applies and add_at.reason == "applies, lower priority"
    assert [c.chosen for c in report.candidates].count(True) == 1
    with portops.prefer(shift_sum="generic"):
        forced = portops.explain("shift_sum", x, 2)
    assert forced.chosen == "generic"
    assert next(c for c in forced.candidates if c.chosen).reason == "forced by portops.prefer"


def test_explain_reads_as_the_report_it_was():
    x = np.ones((2, 3, 4, 5))
    report = portops.explain("shift_sum", x, 2)
    lines = str(report).splitlines()
    assert lines[0] == "shift_sum on numpy arrays (device cpu):"
    assert lines[1].startswith("  -> numpy_blocked: ") and lines[1].endswith("[first that applies]")
    assert repr(report) == str(report)
    assert len(lines) == len(report.candidates) + 1


def test_explain_says_why_a_candidate_does_not_apply():
    def refuse(a):
        return "refuses everything (test)"

    _dispatch.register(
        "shift_sum", "refuser", libraries=["numpy"], priority=1000, applies=refuse, summary="r"
    )(lambda a: None)
    try:
        report = portops.explain("shift_sum", np.ones((2, 3, 4, 5)), 2)
    finally:
        _dispatch._registry["shift_sum"] = [
            i for i in _dispatch._registry["shift_sum"] if i.name != "refuser"
        ]
        _dispatch._candidates.clear()
    refuser = report.candidates[0]
    assert refuser.name == "refuser" and not refuser.applies and not refuser.chosen
    assert refuser.reason == "refuses everything (test)"
    assert report.chosen == "numpy_blocked"
    assert "     refuser: r [does not apply: refuses everything (test)]" in str(report)


def test_prefer_forces_and_restores():
    x = np.arange(24.0).reshape(2, 3, 4)
    calls = []
    original = next(i for i in _dispatch._registry["shift_sum"] if i.name == "generic")

    def spy(*args):
        calls.append(1)
        return original.func(*args)

    _dispatch.register("shift_sum", "spy", priority=-1000, summary="test spy")(spy)
    try:
        with portops.prefer(shift_sum="spy"):
            portops.shift_sum(x, 1, channel_axis=0)
        assert calls == [1]
        portops.shift_sum(x, 1, channel_axis=0)
        assert calls == [1]
    finally:
        _dispatch._registry["shift_sum"] = [
            i for i in _dispatch._registry["shift_sum"] if i.name != "spy"
        ]
        _dispatch._candidates.clear()


def test_prefer_rejects_what_does_not_apply():
    x = np.ones((2, 3, 4))
    with portops.prefer(shift_sum="dask_blockwise"), pytest.raises(ValueError, match="dask"):
        portops.shift_sum(x, 1)
    with portops.prefer(shift_sum="no_such_impl"), pytest.raises(ValueError, match="no such"):
        portops.shift_sum(x, 1)
    with pytest.raises(ValueError, match="unknown operation"), portops.prefer(not_an_op="x"):
        pass
    with pytest.raises(TypeError, match="implementation name"), portops.prefer(shift_sum=3):
        pass


def test_prefer_is_local_to_threads_and_tasks():
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def worker(name: str, choice: str | None) -> None:
        x = np.ones((2, 3, 4))
        if choice is None:
            barrier.wait()
            seen[name] = portops.explain("shift_sum", x, 1).chosen
            barrier.wait()
        else:
            with portops.prefer(shift_sum=choice):
                barrier.wait()
                seen[name] = portops.explain("shift_sum", x, 1).chosen
                barrier.wait()

    threads = [
        threading.Thread(target=worker, args=("forced", "numpy_add_at")),
        threading.Thread(target=worker, args=("default", None)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"forced": "numpy_add_at", "default": "numpy_blocked"}

    async def task(choice: str) -> str:
        with portops.prefer(shift_sum=choice):
            await asyncio.sleep(0)
            return portops.explain("shift_sum", np.ones((2, 3, 4)), 1).chosen

    async def both() -> list[str]:
        return list(await asyncio.gather(task("generic"), task("numpy_add_at")))

    first, second = asyncio.run(both())
    assert (first, second) == ("generic", "numpy_add_at")


def test_registry_is_thread_safe_under_concurrent_calls():
    x = np.ones((2, 3, 4))
    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            for _ in range(200):
                _dispatch._candidates.clear()
                portops.shift_sum(x, 1)
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
