"""Sphinx configuration of the portops documentation (``nox -s docs``)."""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document this checkout, installed or not

import portops  # noqa: E402
import portops.adapters  # noqa: E402
import portops.extend  # noqa: E402

project = "portops"
author = "Seed 4d6d0dab maintainers"
copyright = f"2026, {author}"
release = version = portops.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "**/*.codeobj.json"]
html_theme = "furo"
html_title = f"portops {release}"
html_static_path: list[str] = []
nitpicky = False

autodoc_typehints = "none"  # the numpydoc sections say it in words
numpydoc_show_class_members = False
numpydoc_xref_param_type = False

# No network during the build (CI machines may have none): no intersphinx inventories.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

# The gallery runs every example at its CI size; each one renders its figures.
os.environ.setdefault("MPLBACKEND", "Agg")
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "reset_modules": ("matplotlib",),
    "abort_on_example_error": True,
    "show_memory": False,
}

# --------------------------------------------------------------- generated pages

GENERATED = DOCS / "generated"

# Headings of the API page; a public name missing here is listed under "More".
# Names listed here but not (yet) public are left out. tests/test_public_api.py checks
# that these groups and ``portops.__all__`` agree.
API_GROUPS = {
    "CASSI dispersion": (
        "shift_sum",
        "shift_sum_adjoint",
        "shift_sum_pinv",
        "Dispersion",
        "shear",
        "unshear",
    ),
    "Contractions": ("einsum", "einsum_path", "vecdot"),
    "Dispatch": ("implementations", "explain", "prefer"),
    "The machine and its tuning": ("machine", "tuning", "tune"),
    "Threads, plans and caches": (
        "threads",
        "get_num_threads",
        "set_num_threads",
        "plan_stats",
        "cache_info",
        "clear_cache",
        "set_cache_limit",
    ),
}


EXTEND_TITLE = "Extending portops (portops.extend)"
# Headings of the extension API's section, every name of ``portops.extend.__all__``.
EXTEND_GROUPS = {
    "Implementations": ("register", "unregister", "registered", "Priority"),
    "Backends": (
        "register_backend",
        "unregister_backend",
        "registered_backend",
        "backends",
        "Backend",
        "ENTRY_POINT_GROUP",
    ),
    "Normalised arguments": ("ShiftSumArgs", "ShearArgs", "VecdotArgs", "EinsumArgs"),
}


def _directive(module: str, name: str) -> str:
    obj = getattr(sys.modules[module], name)
    if inspect.isclass(obj):
        return f".. autoclass:: {module}.{name}\n   :members:\n"
    if callable(obj):
        return f".. autofunction:: {module}.{name}\n"
    return f".. autodata:: {module}.{name}\n   :annotation:\n"


def _section(title: str, module: str, names: list[str]) -> str:
    text = f"{title}\n{'-' * len(title)}\n\n"
    return text + "\n".join(_directive(module, n) for n in names) + "\n"


def write_api_page() -> None:
    """``generated/api.rst``: every name of ``portops.__all__`` and the adapters'."""
    public = list(portops.__all__)
    listed = {n for names in API_GROUPS.values() for n in names}
    parts = [
        "API reference\n=============\n\n",
        "Every public name of ``portops`` (its ``__all__``) and of ``portops.adapters``.\n\n",
    ]
    for title, names in API_GROUPS.items():
        present = [n for n in names if n in public]
        if present:
            parts.append(_section(title, "portops", present))
    more = sorted(n for n in public if n not in listed)
    if more:
        parts.append(_section("More", "portops", more))
    parts.append(
        f"{EXTEND_TITLE}\n{'-' * len(EXTEND_TITLE)}\n\n"
        ".. automodule:: portops.extend\n   :no-members:\n\n"
        "See also ``CONTRIBUTING.md`` for the recipes.\n\n"
    )
    for title, names in EXTEND_GROUPS.items():
        text = _section(title, "portops.extend", list(names))
        parts.append(text.replace("-" * len(title), "~" * len(title), 1))
    parts.append(
        _section(
            "Operator adapters (portops.adapters)",
            "portops.adapters",
            list(portops.adapters.__all__),
        )
    )
    (GENERATED / "api.rst").write_text("".join(parts))


def write_benchmark_results() -> None:
    """``generated/performance_results.inc``: the recorded benchmark runs and the last
    ``nox -s bench`` of this machine, with their charts (``benchmarks/docs_page.py``)."""
    from benchmarks import docs_page

    docs_page.write(GENERATED)


# The operations in the order of the Implementations page.
OPERATIONS = (
    "shift_sum",
    "shift_sum_adjoint",
    "shift_sum_pinv",
    "shear",
    "unshear",
    "einsum",
    "vecdot",
)


def _plain(text: str) -> str:
    """`text` with the characters reST would read as markup escaped."""
    for char in "\\*`|":
        text = text.replace(char, "\\" + char)
    return re.sub(r"_(?=\W|$)", r"\\_", text)  # ``scatter_add_`` is not a reference


def _strategy_summaries(op: str) -> dict[str, dict[str, str]]:
    """Implementation name -> {strategy name: summary}, read from the registry (empty
    where the registry's layout is not the one expected: the table then lists names)."""
    from portops import _dispatch

    found: dict[str, dict[str, str]] = {}
    for impl in getattr(_dispatch, "_registry", {}).get(op, []):
        strategies = getattr(impl, "strategies", None)
        if strategies is not None:
            found[impl.name] = {s.name: s.summary for s in strategies}
    return found


def write_implementations_table() -> None:
    """``generated/implementations.inc``: every implementation registered on the machine
    that builds the pages, per operation, with its strategies (``portops.implementations``)."""
    backends = portops.extend.backends()
    present = ", ".join(b.name for b in backends if b.installed())
    absent = ", ".join(b.name for b in backends if not b.installed())
    missing = f" ({absent} not installed: its implementations are not listed)" if absent else ""
    parts = [
        f"Generated from the registry when these pages were built, with {present} "
        f"installed{missing}. ``print(portops.implementations(op))`` gives the same on "
        "your machine.\n"
    ]
    header = ["implementation", "arrays", "priority", "what it does"]
    for op in OPERATIONS:
        table = portops.implementations(op)  # loads the installed backends first
        summaries = _strategy_summaries(op)
        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 18 16 8 58", ""]
        lines += [f"   * - {header[0]}", *(f"     - {h}" for h in header[1:])]
        for row in table:
            libs = "any library" if row.libraries is None else ", ".join(row.libraries)
            devices = "" if row.devices is None else f" ({', '.join(row.devices)})"
            lines += [f"   * - ``{row.name}``", f"     - {libs}{devices}", f"     - {row.priority}"]
            lines.append(f"     - {_plain(row.summary)}")
            if len(row.strategies) > 1:
                lines.append("")
                known = summaries.get(row.name, {})
                for name in row.strategies:
                    text = f": {_plain(known[name])}" if name in known else ""
                    lines.append(f"       - ``{name}``{text}")
        parts.append(f"``{op}``\n{'~' * (len(op) + 4)}\n\n" + "\n".join(lines) + "\n")
    (GENERATED / "implementations.inc").write_text("\n".join(parts))


GENERATED.mkdir(exist_ok=True)
write_api_page()
write_implementations_table()
write_benchmark_results()
