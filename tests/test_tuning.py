"""The tuning tables and the machine profile: every speed constant is in a table with
its reason, measured values round-trip through the tuning file, and the profile can be
read, overridden and loaded from ``PORTOPS_MACHINE``."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest
from backends import pythonpath

import portops
from portops import _machine, _tuning

PACKAGE = pathlib.Path(portops.__file__).parent
# Module-level numbers that are not speed choices, each with why (anything else that
# decides speed belongs in a tuning table).
NOT_SPEED = {
    "_MAX_GRID_Y": "CUDA's limit on a grid's y dimension",
    "WARP": "threads in a CUDA warp",
    "GRAIN": "torch's at::internal::GRAIN_SIZE: its CPU kernels use one thread below it",
    "INT32_LIMIT": "the largest index 32-bit kernel arithmetic may reach",
    "OUTER_SLOTS": "kernel argument slots of the CUDA sources",
    "INNER_SLOTS": "kernel argument slots of the CUDA sources",
    "_SUBLIST_BASE": "label numbering of einsum's sublist form",
    "_SUM": "an embedding_bag mode code",
    "_GIL_FREE_VECTORS": "NumPy's loops release the GIL past 500 iterations",
    "MIN_BYTES": "buffer cache policy (memory kept, documented in portops._buffers)",
    "RECENT": "buffer cache policy (memory kept, documented in portops._buffers)",
    "_CACHE_MAX": "a memory bound of a cache",
    # einsum's path search budgets (as opt_einsum's "auto"): they bound planning time,
    # which grows factorially with the operands, and do not depend on the machine.
    "_EXHAUSTIVE_MAX": "einsum path search budget",
    "_SUBSETS_MAX": "einsum path search budget",
    "_SEARCH_MAX": "einsum path search budget",
    "_SHORTLIST": "einsum path search budget",
    "_SHORTLIST_RATIO": "einsum path search budget",
}


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": pythonpath(str(PACKAGE.parent)), **env}
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code], env=environ, capture_output=True, text=True
    )


def _numeric(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    return isinstance(node, ast.UnaryOp) and _numeric(node.operand)


def test_every_parameter_says_why_and_where():
    params = [p for t in portops.tuning().values() for p in t.params.values()]
    assert 0 < len(params) <= 30
    for p in params:
        assert p.reason and p.unit and p.measured_on, p.name
        assert isinstance(p.default, (int, float)) and p.default > 0, p.name
    text = str(portops.tuning())
    assert all(p.name in text for p in params)


def test_no_speed_constant_outside_the_tables() -> None:
    """A module-level number in the package is a tuning parameter or a stated fact."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_tables.py":
            continue
        for node in ast.parse(path.read_text("utf-8")).body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and value is not None and _numeric(value):
                if target.id.lstrip("_").isupper() and target.id not in NOT_SPEED:
                    found.append(f"{path.relative_to(PACKAGE)}: {target.id}")
    assert found == []


def test_measurements_name_importable_functions():
    for table in portops.tuning().values():
        for p in table.params.values():
            if p.measure is not None:
                module, _, name = p.measure.partition(":")
                assert callable(getattr(__import__(module, fromlist=[name]), name)), p.measure


def test_tuned_values_are_saved_and_loaded_by_the_next_process(tmp_path):
    path = tmp_path / "tuning.json"
    code = "import portops; print(portops.tune()['numpy.vecdot_short'])"
    first = _run(code, PORTOPS_TUNING=str(path))
    assert first.returncode == 0, first.stderr
    data = json.loads(path.read_text())
    assert data["values"]["numpy.vecdot_short"] == int(first.stdout)
    # A chosen value, then read by a process that only calls an operation's rules.
    data["values"]["numpy.vecdot_short"] = 7
    path.write_text(json.dumps(data))
    code = "from portops._tables import NUMPY; print(NUMPY['vecdot_short'])"
    second = _run(code, PORTOPS_TUNING=str(path))
    assert second.returncode == 0 and second.stdout.strip() == "7", second.stderr


def test_another_machines_file_is_ignored_and_a_broken_one_warns(tmp_path):
    path = tmp_path / "tuning.json"
    other = {"machine": {"cpu": "elsewhere"}, "values": {"numpy.vecdot_short": 7}}
    path.write_text(json.dumps(other))
    code = "from portops._tables import NUMPY; print(NUMPY['vecdot_short'])"
    out = _run(code, PORTOPS_TUNING=str(path))
    assert out.stdout.strip() == "32" and out.returncode == 0
    path.write_text("{not json")
    out = _run(code, PORTOPS_TUNING=str(path))
    assert out.stdout.strip() == "32" and "tuning file" in out.stderr


def test_overridden_values_hold_within_the_block_only():
    from portops._tables import NUMPY

    before = NUMPY["vecdot_short"]
    with _tuning.overridden({"numpy.vecdot_short": before + 5}):
        assert NUMPY["vecdot_short"] == before + 5
        assert "(tuned here)" in str(portops.tuning()["numpy"])
    assert NUMPY["vecdot_short"] == before


def test_the_detected_profile_is_plausible():
    m = _machine.detect()
    assert m.cores >= 1 and m.l2 >= 1 and m.line >= 16 and m.memory >= 1 << 20
    assert m.l3 >= 0 and m.l3_shared_by >= 1
    assert str(m.cores) in str(m) and m.source in str(m)


def test_a_mac_without_sysfs_reads_sysctl(monkeypatch):
    values = {
        "hw.perflevel0.l1dcachesize": 128 << 10,
        "hw.perflevel0.l2cachesize": 16 << 20,
        "hw.cachelinesize": 128,
        "hw.memsize": 16 << 30,
    }
    monkeypatch.setattr(_machine.sys, "platform", "darwin")
    monkeypatch.setattr(_machine, "_sysfs_cache", lambda: None)
    monkeypatch.setattr(_machine, "_sysctl", values.get)
    m = _machine.detect()
    assert (m.source, m.l1, m.l2, m.l3, m.line) == ("sysctl", 128 << 10, 16 << 20, 0, 128)
    assert m.cache == m.l2 * m.cores  # no L3: the cores' L2s are the last level


def test_nothing_readable_gives_the_stated_defaults(monkeypatch):
    monkeypatch.setattr(_machine, "_sysfs_cache", lambda: None)
    monkeypatch.setattr(_machine, "_sysconf_cache", lambda: None)
    m = _machine.detect()
    assert m.source == "defaults" and m.l2 == 1 << 20


def test_overrides_are_scoped_and_checked():
    base = portops.machine()
    with portops.machine(cores=64, l2=2 << 20, l3=64 << 20) as m:
        assert portops.machine().cores == 64 == m.l3_shared_by
        assert portops.get_num_threads() == 64 and "+override" in m.source
    assert portops.machine() == base
    with pytest.raises(TypeError, match="unknown field 'cache'"):
        portops.machine(cache=1)
    with pytest.raises(TypeError, match="cores must be an int"):
        portops.machine(cores=2.0)
    with pytest.raises(ValueError, match="l2 must be at least 1"):
        portops.machine(l2=0)


def test_the_machine_file_sets_the_process_profile(tmp_path):
    path = tmp_path / "machine.json"
    path.write_text(json.dumps({"cores": 48, "l2": 1 << 20}))
    code = "import portops; m = portops.machine(); print(m.cores, m.l2, m.source)"
    out = _run(code, PORTOPS_MACHINE=str(path))
    cores, l2, source = out.stdout.split()
    assert (cores, l2) == ("48", str(1 << 20)) and source.endswith("+file"), out.stderr
    path.write_text(json.dumps({"cores": -1}))
    out = _run(code, PORTOPS_MACHINE=str(path))
    assert out.returncode == 0 and "PORTOPS_MACHINE" in out.stderr
