"""The registry: listing, explaining and forcing implementations; import isolation."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import numpy as np
import pytest

import portops
import portops.extend as pe
from portops._generic import shift_sum as generic


def test_import_loads_no_optional_backend():
    code = (
        "import sys, portops, numpy as np\n"
        "from portops import _arrays\n"
        "print(_arrays._entry_points_loaded[0])\n"
        "portops.shift_sum(np.ones((2, 3, 4)), 1)\n"
        "print(_arrays._entry_points_loaded[0])\n"
        "print(sorted(m for m in ('torch', 'cupy', 'jax', 'dask') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # neither the import nor a call on a known library reads the entry points
    assert out.stdout.split() == ["False", "False", "[]"]


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
        "strategies": ["blocked", "strided", "sheared", "loop", "rows"],
    }
    row = next(i for i in impls if i.name == "numpy_blocked")
    assert row["libraries"] == ["numpy"] and row["name"] == "numpy_blocked"
    lines = str(impls).splitlines()
    assert lines[0] == "implementations of shift_sum:"
    assert lines[1].split() == [
        "name", "priority", "libraries", "devices", "strategies", "summary"
    ]  # fmt: skip
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
    # The candidates, then the strategy line and each strategy of the chosen one.
    assert len(lines) == len(report.candidates) + 2 + len(report.strategies)
    assert lines[len(report.candidates) + 1].startswith("strategy of numpy_blocked: sheared on")
    assert report.strategy == "sheared" and report.threads == 1 and report.reason


def test_explain_says_why_a_candidate_does_not_apply():
    def refuse(a):
        return "refuses everything (test)"

    with pe.registered(
        "shift_sum", "refuser", lambda a: None, libraries=["numpy"], priority=1000,
        applies=refuse, summary="r",
    ):  # fmt: skip
        report = portops.explain("shift_sum", np.ones((2, 3, 4, 5)), 2)
    refuser = report.candidates[0]
    assert refuser.name == "refuser" and not refuser.applies and not refuser.chosen
    assert refuser.reason == "refuses everything (test)"
    assert report.chosen == "numpy_blocked"
    assert "     refuser: r [does not apply: refuses everything (test)]" in str(report)


def test_prefer_forces_and_restores():
    x = np.arange(24.0).reshape(2, 3, 4)
    calls = []

    def spy(args):
        calls.append(1)
        return generic.forward(args)

    with pe.registered("shift_sum", "spy", spy, libraries=None, priority=-1000, summary="test spy"):
        with portops.prefer(shift_sum="spy"):
            portops.shift_sum(x, 1, channel_axis=0)
        assert calls == [1]
        portops.shift_sum(x, 1, channel_axis=0)
        assert calls == [1]
    assert "spy" not in [i["name"] for i in portops.implementations("shift_sum")]


def test_register_raises_on_a_duplicate_unless_replacing():
    def first(args):
        return generic.forward(args)

    def second(args):
        return generic.forward(args) + 1

    x = np.ones((2, 3, 4))
    ref = portops.shift_sum(x, 1)
    with pe.registered("shift_sum", "dup", first, libraries=["numpy"], priority=-1000):
        with pytest.raises(ValueError, match="'dup' is already registered"):
            pe.register("shift_sum", "dup", second, libraries=["numpy"], priority=-1000)
        with pytest.raises(ValueError, match="'numpy_blocked' is already registered"):
            pe.register("shift_sum", "numpy_blocked", second, libraries=["numpy"], priority=0)
        with (
            pe.registered(
                "shift_sum", "dup", second, libraries=["numpy"], priority=-1000, replace=True
            ),
            portops.prefer(shift_sum="dup"),
        ):
            np.testing.assert_array_equal(portops.shift_sum(x, 1), ref + 1)
        # the replaced implementation is back
        with portops.prefer(shift_sum="dup"):
            np.testing.assert_array_equal(portops.shift_sum(x, 1), ref)
    with pytest.raises(ValueError, match="no implementation of shift_sum named 'dup'"):
        pe.unregister("shift_sum", "dup")


def test_register_checks_its_arguments():
    def f(args):
        return None

    with pytest.raises(ValueError, match="unknown operation 'nope'"):
        pe.register("nope", "x", f, libraries=None, priority=0)
    with pytest.raises(TypeError, match="priority must be an int"):
        pe.register("shift_sum", "x", f, libraries=None, priority=1.5)
    with pytest.raises(TypeError, match="libraries must be names"):
        pe.register("shift_sum", "x", f, libraries=[3], priority=0)
    with pytest.raises(TypeError, match="applies must be callable"):
        pe.register("shift_sum", "x", f, libraries=None, priority=0, applies="yes")
    assert "x" not in [i["name"] for i in portops.implementations("shift_sum")]
    # one library given as a string is that library, not its letters
    with pe.registered("shift_sum", "one", f, libraries="numpy", priority=-1000):
        impl = next(i for i in portops.implementations("shift_sum") if i["name"] == "one")
        assert impl["libraries"] == ["numpy"]


def test_a_new_implementation_is_chosen_at_once_over_kept_plans():
    x = np.arange(24.0).reshape(2, 3, 4)
    expected = portops.shift_sum(x, 1)
    portops.shift_sum(x, 1)  # planned now

    def override(args):
        return generic.forward(args) * 2

    with pe.registered(
        "shift_sum", "override", override, libraries=["numpy"], priority=pe.Priority.OVERRIDE
    ):
        np.testing.assert_array_equal(portops.shift_sum(x, 1), 2 * expected)
        np.testing.assert_array_equal(portops.shift_sum(x, 1), 2 * expected)
    np.testing.assert_array_equal(portops.shift_sum(x, 1), expected)


def test_named_priorities_order_the_levels():
    p = pe.Priority
    assert p.REFERENCE < p.NATIVE < p.BASELINE < p.SPECIALIZED < p.OVERRIDE
    impls = {i["name"]: i["priority"] for i in portops.implementations("shift_sum")}
    assert impls["generic"] == p.REFERENCE
    assert impls["numpy_blocked"] == p.SPECIALIZED
    assert impls["numpy_add_at"] == p.BASELINE


def test_prefer_rejects_what_does_not_apply():
    x = np.ones((2, 3, 4))
    with portops.prefer(shift_sum="dask_blockwise"), pytest.raises(ValueError, match="dask"):
        portops.shift_sum(x, 1)
    with portops.prefer(shift_sum="no_such_impl"), pytest.raises(ValueError, match="no impl"):
        portops.shift_sum(x, 1)
    # The message quotes what the user wrote, strategy part included, and names the part
    # that is unknown.
    expected = r"prefer\(shift_sum='numpy/blocked'\): no implementation 'numpy'; registered: "
    with portops.prefer(shift_sum="numpy/blocked"), pytest.raises(ValueError, match=expected):
        portops.shift_sum(x, 1)
    expected = r"prefer\(shift_sum='dask_blockwise/any'\) does not apply"
    with portops.prefer(shift_sum="dask_blockwise/any"), pytest.raises(ValueError, match=expected):
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
    expected = portops.shift_sum(x, 1)
    errors: list[BaseException] = []
    done = threading.Event()

    def hammer() -> None:
        try:
            for _ in range(200):
                np.testing.assert_array_equal(portops.shift_sum(x, 1), expected)
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    def churn() -> None:
        # each registration empties the candidate lists and plans the callers read
        try:
            i = 0
            while not done.is_set():
                name = f"churn{i % 3}"
                pe.register("shift_sum", name, generic.forward, libraries=None, priority=-1000)
                pe.unregister("shift_sum", name)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    churner = threading.Thread(target=churn)
    churner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    churner.join()
    assert not errors
    assert not any(i["name"].startswith("churn") for i in portops.implementations("shift_sum"))
