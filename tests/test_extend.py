"""portops.extend: a toy array library added as the CONTRIBUTING.md recipe says.

``ToyArray`` wraps a NumPy array and answers ``__array_namespace__`` with a small
namespace that unwraps its arguments, calls NumPy's array-API namespace and wraps the
results: an array library portops has never heard of.
"""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import array_api_compat.numpy as numpy_namespace
import numpy as np
import pytest
from backends import pythonpath

import portops
import portops.extend as pe
from portops import _arrays


class ToyArray:
    """A NumPy array in a wrapper: only what the array API asks of an array object."""

    def __init__(self, data: Any) -> None:
        self.data = np.asarray(data)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return toy_namespace

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    size = property(lambda self: self.data.size)
    device = property(lambda self: "cpu")

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self.data[_unwrap(key)])

    def __repr__(self) -> str:
        return f"ToyArray({self.data!r})"


def _unwrap(v: Any) -> Any:
    if isinstance(v, ToyArray):
        return v.data
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(i) for i in v)
    return v


def _wrap(v: Any) -> Any:
    if isinstance(v, np.ndarray | np.generic) and not isinstance(v, np.dtype):
        return ToyArray(v)
    if isinstance(v, tuple):
        return tuple(_wrap(i) for i in v)
    return v


def _binary(op: Any, reflected: bool = False) -> Any:
    def method(self: ToyArray, other: Any) -> Any:
        a, b = (other, self) if reflected else (self, other)
        return _wrap(op(_unwrap(a), _unwrap(b)))

    return method


for _name, _op in [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("truediv", operator.truediv),
    ("pow", operator.pow),
    ("gt", operator.gt),
    ("lt", operator.lt),
    ("eq", operator.eq),
]:
    setattr(ToyArray, f"__{_name}__", _binary(_op))
    setattr(ToyArray, f"__r{_name}__", _binary(_op, reflected=True))
ToyArray.__neg__ = lambda self: ToyArray(-self.data)  # type: ignore[attr-defined]


class _ToyNamespace:
    """NumPy's array-API namespace, on ToyArrays."""

    __name__ = "toy_namespace"

    def __getattr__(self, name: str) -> Any:
        target = getattr(numpy_namespace, name)
        if not callable(target) or isinstance(target, type):
            return target  # dtypes and constants

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
            return _wrap(target(*_unwrap(args), **kwargs))

        return call


toy_namespace = _ToyNamespace()


def toy_shift_sum(args: pe.ShiftSumArgs) -> ToyArray:
    """NumPy's shift_sum on the wrapped arrays."""
    mask = None if args.mask is None else args.mask.data
    return ToyArray(
        portops.shift_sum(
            args.array.data,
            list(args.offsets),
            axis=args.axis,
            channel_axis=args.channel_axis,
            mask=mask,
            keepdims=args.keepdims,
        )
    )


def is_toy(x: object) -> bool:
    return isinstance(x, ToyArray)


# ---------------------------------------------------------------------------- the recipe


@pytest.fixture
def toy_backend():
    """The toy library registered as CONTRIBUTING.md's "Add a backend" says."""
    with (
        pe.registered_backend("toy", is_array=is_toy),
        pe.registered(
            "shift_sum",
            "toy_shift_sum",
            toy_shift_sum,
            libraries=["toy"],
            priority=pe.Priority.SPECIALIZED,
        ),
    ):
        yield


def test_toy_backend_dispatches_its_implementation(toy_backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5))
    mask = rng.random((3, 4, 5)) > 0.5
    y = portops.shift_sum(ToyArray(x), 2, mask=ToyArray(mask))
    assert isinstance(y, ToyArray)
    np.testing.assert_allclose(y.data, portops.shift_sum(x, 2, mask=mask))

    report = portops.explain("shift_sum", ToyArray(x), 2)
    assert (report.op, report.library, report.device) == ("shift_sum", "toy", "cpu")
    assert report.chosen == "toy_shift_sum"
    assert "generic" in [c.name for c in report.candidates]  # the reference is its fallback
    impl = next(i for i in portops.implementations("shift_sum") if i["name"] == "toy_shift_sum")
    assert impl["libraries"] == ["toy"] and impl["priority"] == pe.Priority.SPECIALIZED


def test_toy_backend_runs_the_generic_path_where_it_has_no_implementation(toy_backend):
    a, b = np.arange(12.0).reshape(3, 4), np.ones(4)
    got = portops.vecdot(ToyArray(a), ToyArray(b))
    assert isinstance(got, ToyArray)
    np.testing.assert_allclose(got.data, a @ b)
    report = portops.explain("vecdot", ToyArray(a), ToyArray(b))
    assert (report.library, report.chosen) == ("toy", "generic")
    # the adjoint has no toy implementation either: the generic one runs
    y = portops.shift_sum_adjoint(ToyArray(np.ones((4, 7))), 1, channels=3)
    np.testing.assert_allclose(y.data, portops.shift_sum_adjoint(np.ones((4, 7)), 1, channels=3))


def test_a_second_implementation_for_the_toy_backend(toy_backend):
    def toy_vecdot(args: pe.VecdotArgs) -> ToyArray:
        """np.vecdot on the wrapped arrays."""
        return ToyArray(np.vecdot(args.x1.data, args.x2.data, axis=args.axis))

    with pe.registered(
        "vecdot", "toy_vecdot", toy_vecdot, libraries=["toy"], priority=pe.Priority.SPECIALIZED
    ):
        a = ToyArray(np.arange(6.0).reshape(2, 3))
        assert portops.explain("vecdot", a, a).chosen == "toy_vecdot"
        np.testing.assert_allclose(portops.vecdot(a, a).data, [5.0, 50.0])
        with portops.prefer(vecdot="generic"):
            np.testing.assert_allclose(portops.vecdot(a, a).data, [5.0, 50.0])


def test_duplicates_raise(toy_backend):
    with pytest.raises(ValueError, match="backend named 'toy' is already registered"):
        pe.register_backend("toy", is_array=is_toy)
    with pytest.raises(ValueError, match="backend named 'numpy' is already registered"):
        pe.register_backend("numpy", is_array=is_toy)
    with pytest.raises(ValueError, match="'toy_shift_sum' is already registered"):
        pe.register("shift_sum", "toy_shift_sum", toy_shift_sum, libraries=["toy"], priority=0)
    with pytest.raises(TypeError, match="is_array must be callable"):
        pe.register_backend("other", is_array=None)
    with pytest.raises(ValueError, match="no backend named 'other'"):
        pe.unregister_backend("other")


def test_the_scoped_forms_clean_up():
    x = ToyArray(np.ones((2, 3, 4)))
    with pe.registered_backend("toy", is_array=is_toy) as backend:
        assert backend in pe.backends()
        with pe.registered(
            "shift_sum", "toy_shift_sum", toy_shift_sum, libraries=["toy"], priority=10
        ):
            assert portops.explain("shift_sum", x, 1).chosen == "toy_shift_sum"
        assert portops.explain("shift_sum", x, 1).chosen == "generic"
    assert "toy" not in [b.name for b in pe.backends()]
    assert "toy_shift_sum" not in [i["name"] for i in portops.implementations("shift_sum")]
    # unknown again: an array-API object of the library named by its module
    assert portops.explain("shift_sum", x, 1).library == __name__.partition(".")[0]
    with (
        pytest.raises(ValueError, match="'toy_shift_sum'"),
        portops.prefer(shift_sum="toy_shift_sum"),
    ):
        portops.shift_sum(x, 1)


def test_registering_a_builtin_library_implementation_and_replacing_it():
    x = np.arange(24.0).reshape(2, 3, 4)
    expected = portops.shift_sum(x, 1)

    def doubled(args: pe.ShiftSumArgs) -> Any:
        with portops.prefer(shift_sum="numpy_blocked"):  # not this one again
            y = portops.shift_sum(
                args.array, list(args.offsets), axis=args.axis, channel_axis=args.channel_axis
            )
        return 2 * y

    with (
        pe.registered(
            "shift_sum", "numpy_add_at", doubled, libraries=["numpy"], priority=0, replace=True
        ),
        portops.prefer(shift_sum="numpy_add_at"),
    ):
        np.testing.assert_array_equal(portops.shift_sum(x, 1), 2 * expected)
    with portops.prefer(shift_sum="numpy_add_at"):  # the original is back
        np.testing.assert_array_equal(portops.shift_sum(x, 1), expected)


# ---------------------------------------------------------------------------- entry points


class PluginArray(ToyArray):
    """A second wrapper type, met for the first time through an entry point."""


class _EntryPoint:
    def __init__(self, name: str, value: str, load: Any) -> None:
        self.name, self.value, self.load = name, value, load


def test_entry_point_backends_are_loaded_on_first_meeting_an_unknown_array(monkeypatch, tmp_path):
    # The plugin's implementations live in a package that portops imports on first use.
    (tmp_path / "toy_plugin_impls.py").write_text(
        textwrap.dedent(
            """
            import portops.extend as pe
            from test_extend import ToyArray, toy_shift_sum

            pe.register("shift_sum", "plugin_shift_sum", toy_shift_sum,
                        libraries=["plugin"], priority=pe.Priority.SPECIALIZED)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded: list[str] = []

    def load_backend() -> pe.Backend:
        loaded.append("plugin")
        return pe.Backend(
            "plugin", lambda x: isinstance(x, PluginArray), package="toy_plugin_impls"
        )

    def broken() -> Any:
        raise ImportError("no such module")

    def entry_points(*, group: str) -> list[_EntryPoint]:
        assert group == pe.ENTRY_POINT_GROUP == "portops.backends"
        return [
            _EntryPoint("broken", "nowhere:BACKEND", broken),
            _EntryPoint("plugin", "toy_plugin:backend", load_backend),
        ]

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    monkeypatch.setattr(_arrays, "_entry_points_loaded", [False])
    try:
        portops.shift_sum(np.ones((2, 3, 4)), 1)  # a known library: nothing is loaded
        assert loaded == []
        x = PluginArray(np.arange(24.0).reshape(2, 3, 4))
        with pytest.warns(RuntimeWarning, match="entry point 'broken'.*no such module"):
            y = portops.shift_sum(x, 1)
        assert loaded == ["plugin"]
        assert isinstance(y, ToyArray)
        np.testing.assert_array_equal(y.data, portops.shift_sum(x.data, 1))
        assert portops.explain("shift_sum", x, 1).chosen == "plugin_shift_sum"
        portops.shift_sum(x, 1)
        assert loaded == ["plugin"]  # once per process
    finally:
        pe.unregister("shift_sum", "plugin_shift_sum")
        pe.unregister_backend("plugin")
        sys.modules.pop("toy_plugin_impls", None)


def test_entry_point_declared_in_package_metadata(tmp_path):
    """An installed distribution's entry point, read by importlib.metadata itself."""
    dist = tmp_path / "toy_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[portops.backends]\ntoy = toy_plugin:BACKEND\n")
    (tmp_path / "toy_plugin.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import portops.extend as pe

            class Wrapped:
                def __init__(self, data):
                    self.data = np.asarray(data)

            BACKEND = pe.Backend("toy", lambda x: isinstance(x, Wrapped))
            """
        )
    )
    code = textwrap.dedent(
        """
        import sys, portops
        from portops import _arrays
        print("toy_plugin" in sys.modules)
        import toy_plugin
        print(_arrays.library_of(toy_plugin.Wrapped([1.0])))
        """
    )
    root = Path(portops.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": pythonpath(str(tmp_path), str(root))}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.split() == ["False", "toy"]


def test_replacing_an_implementation_of_a_backend_not_yet_loaded():
    """The backend's package is loaded first, so the scoped form restores its version."""
    code = textwrap.dedent(
        """
        import portops, portops.extend as pe

        def mine(args):
            '''mine'''

        with pe.registered("shift_sum", "numpy_add_at", mine, libraries=["numpy"],
                           priority=0, replace=True):
            pass
        impl = next(i for i in portops.implementations("shift_sum")
                    if i["name"] == "numpy_add_at")
        print(impl["summary"])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "np.add.at scatter (alternative, for comparison)"
