"""The public API: ``__all__``, the names the documentation's API page lists, docstrings."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import portops
import portops.adapters
import portops.extend

CONF = Path(__file__).resolve().parents[1] / "docs" / "conf.py"


def _documented(variable: str) -> list[str]:
    """The names of a ``{heading: (name, ...)}`` literal of docs/conf.py, in order."""
    tree = ast.parse(CONF.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == variable for t in node.targets
        ):
            groups = ast.literal_eval(node.value)
            return [name for names in groups.values() for name in names]
    raise AssertionError(f"docs/conf.py defines no {variable}")


@pytest.mark.parametrize(
    ("module", "variable"), [(portops, "API_GROUPS"), (portops.extend, "EXTEND_GROUPS")]
)
def test_all_and_the_api_page_agree(module, variable):
    documented = _documented(variable)
    assert len(documented) == len(set(documented)), "a name is listed twice"
    assert sorted(documented) == sorted(module.__all__)


@pytest.mark.parametrize("module", [portops, portops.extend, portops.adapters])
def test_every_public_name_exists_and_has_a_docstring(module):
    assert module.__doc__
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, str):  # a constant: its value is explained in the module's text
            assert obj in module.__doc__, f"{module.__name__}.{name} ({obj!r}) is not explained"
            continue
        doc = inspect.getdoc(obj)
        assert doc and doc.strip(), f"{module.__name__}.{name} has no docstring"


def test_extend_is_reachable_from_portops():
    assert portops.extend is portops.__dict__["extend"]
    assert "extend" not in portops.__all__  # a submodule, documented in its own section


def _imports_at_module_level(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_doctests_skip_every_module_that_imports_a_gpu_only_library():
    """``nox -s tests`` collects every module for doctests; one importing CuPy or Triton
    (installed on GPU machines only) must be on the noxfile's list of skipped paths."""
    root = Path(portops.__file__).parent
    noxfile = (root.parent / "noxfile.py").read_text()
    for path in sorted(root.rglob("*.py")):
        gpu_only = _imports_at_module_level(path) & {"cupy", "triton"}
        relative = path.relative_to(root.parent).as_posix()
        if gpu_only and relative not in noxfile:
            assert "portops/_backends/cupy" in noxfile and relative.startswith(
                "portops/_backends/cupy/"
            ), f"{relative} imports {sorted(gpu_only)}: add it to the noxfile's doctest skips"


def test_the_ci_scripts_name_only_test_files_that_exist():
    """``.ci/gpu`` runs named test files first and under compute-sanitizer: a renamed or
    removed file would fail the GPU check on its device, where time is short."""
    import re

    root = Path(portops.__file__).parent.parent
    for script in (root / ".ci").iterdir():
        if not script.is_file() or script.suffix:  # the shell scripts (gpu, run)
            continue
        for name in re.findall(r"tests/test_\w+\.py", script.read_text()):
            assert (root / name).is_file(), f"{script.name} names {name}, which does not exist"
