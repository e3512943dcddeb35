#!/usr/bin/env python3
"""The helpers of ``.ci/gpu``: the wheel folder's check, the run's summary, the output limits.

    python .ci/gpu_report.py wheels --dir .gpu-wheels --list .ci/gpu-wheels.txt [--prune]
    python .ci/gpu_report.py installed --list .ci/gpu-wheels.txt
    python .ci/gpu_report.py env
    python .ci/gpu_report.py summary --out DIR --work DIR
    python .ci/gpu_report.py finish --out DIR --work DIR
    python .ci/gpu_report.py criteria TIMING.json
    python .ci/gpu_report.py selftest

``summary`` reads what the steps left (``WORK/status.tsv``, the logs, the JUnit XML, the
timing JSON) and writes ``OUT/summary.txt``: per step its state, counts and first failure
lines, then the GPU timings against the targets of the GPU acceptance list. ``finish``
writes the summary, packs the raw results into ``OUT/raw.tar.gz``, cuts logs that are too
long (keeping their head and tail) and checks the folder's limits: at most MAX_FILES files,
each under MAX_BYTES, named in letters, digits, '.', '_' and '-'. Needs only the standard
library, and ``packaging`` for the wheel checks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAX_FILES = 8
MAX_BYTES = 16 * 10**6  # under 16 MB (and so under 16 MiB)
LOG_BYTES = 3 * 10**6  # a log longer than this keeps its head and tail
# The files of a run, in the order `summary.txt` lists them; raw.tar.gz holds the rest.
FILES = {
    "summary.txt": "this summary",
    "env.txt": "GPU, driver, versions, the wheels' install",
    "tests.log": "the test suite's log (pytest -q, short tracebacks, slowest tests)",
    "tests.xml": "the test suite's JUnit XML",
    "memcheck.log": "compute-sanitizer memcheck over the kernels' tests",
    "timing.txt": "benchmarks.gpu_timing: its log and table",
    "bench.txt": "the CUDA bench sessions (quick) and the CPU sweep sample: logs, tables",
    "raw.tar.gz": "timing.json, the benchmark JSONs and charts, logs that were cut, uncut",
}
NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")

# The packages of the GPU machine's image (its package list as last read, 2026-11): the
# carried wheels' requirements must be among these or carried themselves.
PROVIDED = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
    diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
    frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
    meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
    narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir
    onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
    pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
    sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
    torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
    typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
    xarray xxhash yarl zipp""".split()
)
# Requirements of carried wheels that the GPU check never uses there, and why.
NOT_NEEDED = {"virtualenv": "nox runs there with --no-venv, creating no environment"}
# Where the GPU check runs: CPython 3.12 on manylinux x86_64.
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- wheels


def read_list(path: Path) -> dict[str, str]:
    """``name==version`` lines (comments and blank lines skipped) -> {canonical name: version}."""
    wanted: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise SystemExit(f"{path}:{n}: expected NAME==VERSION, got {line!r}")
        if canonical(name) in wanted:
            raise SystemExit(f"{path}:{n}: {name} is listed twice")
        wanted[canonical(name)] = version.strip()
    return wanted


def target_tags() -> set[Any]:
    from packaging import tags

    platforms = [f"manylinux_2_{m}_x86_64" for m in range(39, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    platforms.append("linux_x86_64")
    found = set(tags.cpython_tags((3, 12), platforms=platforms))
    return found | set(tags.compatible_tags((3, 12), "cp312", platforms))


def wheel_requirements(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    head = text.split("\n\n", 1)[0]
    return [
        line.split(":", 1)[1].strip()
        for line in head.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def check_wheels(folder: Path, listing: Path, prune: bool = False) -> list[str]:
    """Problems with `folder` against `listing` (empty when it is ready to travel)."""
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename
    from packaging.version import Version

    wanted = read_list(listing)
    problems: list[str] = []
    if not folder.is_dir():
        return [f"{folder}/ is missing: run .ci/gpu-wheels"]
    supported = target_tags()
    found: dict[str, list[tuple[Path, str]]] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix != ".whl":
            problems.append(f"{path.name}: not a wheel")
            continue
        name, version, _build, wheel_tags = parse_wheel_filename(path.name)
        key = canonical(name)
        if key not in wanted or Version(wanted[key]) != version:
            if prune:
                path.unlink()
                print(f"removed {path.name} (not in {listing.name})")
            else:
                problems.append(f"{path.name}: not in {listing.name} (.ci/gpu-wheels removes it)")
            continue
        if not set(wheel_tags) & supported:
            problems.append(f"{path.name}: not installable on CPython 3.12, manylinux x86_64")
        found.setdefault(key, []).append((path, str(version)))
    for key, version in wanted.items():
        have = found.get(key, [])
        if not have:
            problems.append(f"{key}=={version}: no wheel in {folder}/ (run .ci/gpu-wheels)")
        elif len(have) > 1:
            problems.append(f"{key}: {len(have)} wheels ({', '.join(p.name for p, _ in have)})")
    for key, have in found.items():
        for path, _ in have[:1]:
            for text in wheel_requirements(path):
                req = Requirement(text)
                if req.marker is not None and not req.marker.evaluate(TARGET_ENV):
                    continue
                dep = canonical(req.name)
                if dep in wanted:
                    if not req.specifier.contains(wanted[dep], prereleases=True):
                        problems.append(f"{key} needs {text}; the list has {dep}=={wanted[dep]}")
                elif dep not in PROVIDED and dep not in NOT_NEEDED:
                    problems.append(
                        f"{key} needs {req.name}, neither listed nor on the GPU machine"
                    )
    return problems


def check_installed(listing: Path) -> list[str]:
    """On the GPU machine, after the install: each listed package imports at its version,
    and every requirement of theirs that the check uses is met by what is installed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    problems = []
    env = {k: v for k, v in TARGET_ENV.items() if k != "python_full_version"}
    env["python_version"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    env["python_full_version"] = ".".join(map(str, sys.version_info[:3]))
    for key, version in read_list(listing).items():
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            problems.append(f"{key}: not installed")
            continue
        if dist.version != version:
            problems.append(f"{key}: {dist.version} found first on the path, not {version}")
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if canonical(req.name) in NOT_NEEDED:
                continue
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{key} needs {text}: not installed")
                continue
            if not req.specifier.contains(have, prereleases=True):
                problems.append(f"{key} needs {text}: {have} is installed")
    return problems


# --------------------------------------------------------------------------- env


def env_report() -> list[str]:
    """``key: value`` lines: Python, the libraries' versions, what torch and CuPy see."""
    from importlib import metadata

    lines = [f"python: {sys.version.split()[0]} ({sys.executable})", f"cpus: {os.cpu_count()}"]
    names = """torch triton cupy-cuda13x cupy-cuda12x jax jaxlib numpy dask distributed
        array-api-compat array-api-strict opt-einsum scipy pylops nox pytest pytest-xdist
        pytest-timeout pytest-benchmark hypothesis packaging""".split()
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    lines.append("versions: " + ", ".join(found))
    try:
        import torch

        cuda = torch.cuda.is_available()
        name = torch.cuda.get_device_name() if cuda else "none"
        lines.append(f"torch sees: {name} (CUDA {torch.version.cuda})")
    except Exception as exc:
        lines.append(f"torch sees: error {type(exc).__name__}: {exc}")
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        lines.append(
            f"cupy sees: {n} device(s), CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}"
        )
    except Exception as exc:
        lines.append(f"cupy sees: error {type(exc).__name__}: {exc}")
    return lines


# --------------------------------------------------------------------------- summary


def read_status(work: Path) -> list[dict[str, str]]:
    """The steps' records: ``step state rc seconds box note`` tab-separated, one a line."""
    rows = []
    path = work / "status.tsv"
    for line in path.read_text().splitlines() if path.is_file() else []:
        parts = line.split("\t")
        keys = ["step", "state", "rc", "seconds", "box", "note"]
        rows.append(dict(zip(keys, (parts + [""] * 6)[:6], strict=True)))
    return rows


def tail_lines(path: Path, n: int) -> list[str]:
    if not path.is_file():
        return []
    with path.open("rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 200_000))
        return f.read().decode("utf-8", "replace").splitlines()[-n:]


def pytest_counts(lines: list[str]) -> str | None:
    """pytest's closing line, e.g. ``3 failed, 7521 passed, 40 skipped in 171.2s``."""
    pattern = re.compile(r"\d+ (passed|failed|error|errors|skipped|deselected)\b.* in [\d.]+s")
    for line in reversed(lines):
        if pattern.search(line):
            return line.strip("= \n")
    return None


def junit(path: Path) -> dict[str, Any] | None:
    """Counts of a JUnit XML and its failures grouped by their message's first line."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return {"broken": str(exc)}
    counts: Counter[str] = Counter()
    groups: dict[str, list[str]] = {}
    for case in root.iter("testcase"):
        counts["tests"] += 1
        classname, name = case.get("classname", ""), case.get("name", "")
        node = (classname.replace(".", "/") + ".py::" if classname else "") + name
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is None:
                continue
            counts[kind] += 1
            if kind != "skipped":
                message = (el.get("message") or (el.text or "").strip() or kind).strip()
                first = message.splitlines()[0][:200] if message else kind
                groups.setdefault(f"{kind}: {first}", []).append(node)
            break
    counts["passed"] = counts["tests"] - counts["failure"] - counts["error"] - counts["skipped"]
    return {"counts": counts, "groups": groups}


def progress(path: Path) -> dict[str, Any] | None:
    """What junit() gives, from .ci/pytest_progress.py's log (written test by test)."""
    if not path.is_file():
        return None
    counts: Counter[str] = Counter()
    groups: dict[str, list[str]] = {}
    for line in path.read_text("utf-8", "replace").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r["outcome"] == "failed":
            kind = "failure" if r["when"] == "call" else "error"
            message = (r.get("message") or kind).splitlines()[0][:200]
            if kind == "error":
                message = f"failed on {r['when']}: {message}"
            groups.setdefault(f"{kind}: {message}", []).append(r["nodeid"])
            counts[kind] += 1
        elif r["when"] == "call" or r["outcome"] == "skipped":
            counts["passed" if r["outcome"] == "passed" else "skipped"] += 1
    counts["tests"] = sum(counts.values())
    return {"counts": counts, "groups": groups}


def digest_tests(out: Path, work: Path) -> list[str]:
    lines = []
    closing = pytest_counts(tail_lines(out / "tests.log", 400))
    if closing:
        lines.append(f"pytest: {closing}")
    data, source = junit(out / "tests.xml"), "JUnit"
    if data is None or "broken" in data:
        if data is not None:
            lines.append(f"tests.xml unreadable: {data['broken']}")
        data, source = progress(work / "tests-progress.jsonl"), "no JUnit XML; progress log"
    if data:
        c = data["counts"]
        lines.append(
            f"{source}: {c['tests']} tests, {c['passed']} passed, {c['failure']} failed, "
            f"{c['error']} errors, {c['skipped']} skipped"
        )
        groups = sorted(data["groups"].items(), key=lambda kv: -len(kv[1]))
        if groups:
            lines.append(f"failures and errors by message ({len(groups)} kinds):")
        for message, nodes in groups[:12]:
            lines.append(f"  {len(nodes):5d}x {message}")
            lines += [f"         {node}" for node in nodes[:3]]
        if len(groups) > 12:
            lines.append(f"  ... {len(groups) - 12} more kinds (tests.xml, tests.log)")
    if not closing:
        shown = [ln for ln in tail_lines(out / "tests.log", 50) if re.search(r"\[\s*\d+%\]", ln)]
        if shown:
            lines.append("no closing line (stopped?); last progress: " + shown[-1].strip()[-60:])
    slowest = []
    if (out / "tests.log").is_file():
        with (out / "tests.log").open(encoding="utf-8", errors="replace") as f:
            timed = re.compile(r"^\d+\.\d+s (call|setup|teardown) ")
            slowest = [re.sub(r"\s+", " ", ln.strip()) for ln in f if timed.match(ln)]
    if slowest:
        lines.append("slowest: " + "; ".join(slowest[:4]))
    if not data:
        failed = [ln for ln in tail_lines(out / "tests.log", 3000) if ln.startswith("FAILED ")]
        lines += ["  " + ln[:200] for ln in failed[:15]]
    return lines


MEMCHECK_ERROR = re.compile(
    r"^========= (Invalid|Program hit|Malloc|Free|Address|Misaligned|Out-of-range|Uninitialized|"
    r"Race|Barrier|Leaked|Cuda API|Error)"
)


def digest_memcheck(out: Path, work: Path) -> list[str]:
    """Per backend: the sanitizer's error count (or the error lines seen, when it was
    stopped before its summary), the first errors, and how the tests under it went."""
    path = out / "memcheck.log"
    if not path.is_file():
        return []
    text = path.read_text("utf-8", "replace")
    if "### memcheck " not in text:
        return text.splitlines()[:5]
    lines = []
    # One section per backend, each opened by a `### memcheck <backend> ...` line.
    for section in re.split(r"^(?=### memcheck )", text, flags=re.M):
        if not section.startswith("### memcheck "):
            continue
        head, *body = section.splitlines()
        name = " ".join(head.split()[1:3])
        summary = re.findall(r"ERROR SUMMARY: (\d+) error", section)
        errors = [ln for ln in body if MEMCHECK_ERROR.match(ln)]
        closing = pytest_counts(body)
        if closing and " collected" in closing:  # a dry run: collected, not run
            lines.append(f"{name}: {closing}")
            continue
        if summary:
            found = f"{summary[-1]} errors (the sanitizer's summary)"
        else:
            found = f"no ERROR SUMMARY (stopped at the box?): {len(errors)} error lines seen"
        outcome = Counter(re.findall(r"^\S+::\S+ (PASSED|FAILED|ERROR|SKIPPED)\b", section, re.M))
        tests = closing or ", ".join(f"{n} {w.lower()}" for w, n in outcome.items()) or "none ran"
        lines.append(f"{name}: {found}; tests: {tests}")
        for err in errors[:5]:
            i = body.index(err)
            lines += ["    " + ln[:160] for ln in body[i : i + 3]]
        lines += ["    " + ln[:200] for ln in body if ln.startswith(("FAILED ", "ERROR "))][:5]
        if not closing:
            reached = [
                ln for ln in body if re.match(r"\S+::\S+ (PASSED|FAILED|ERROR|SKIPPED)\b", ln)
            ]
            if reached:
                lines.append("    last test reached: " + reached[-1].split(" ")[0][:150])
    return lines


def digest_timing(out: Path, work: Path) -> list[str]:
    path = work / "timing.json"
    if not path.is_file():
        return [ln for ln in tail_lines(out / "timing.txt", 12)]
    data = json.loads(path.read_text() or "{}")
    lines = []
    bw = ", ".join(f"{k} {v / 1e12:.2f} TB/s" for k, v in (data.get("bandwidth") or {}).items())
    lines.append(f"device: {data.get('device')}; copy bandwidth (read + write): {bw or '—'}")
    if data.get("partial"):
        lines.append("PARTIAL: the run was stopped before it ended; what was timed is below")
    for err in data.get("errors") or []:
        lines.append(f"not timed: {err[:200]}")
    lines += criteria(data)
    return lines


def _targets() -> tuple[list[str], dict[str, float]]:
    """The case tags of the acceptance list and the forward+backward bound of each."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu_timing import CASES, case_tag

    tags = [case_tag(c) for c in CASES]
    return tags, {case_tag(c): 4.0 if c[0] <= 16 else 3.0 for c in CASES}


LIMIT_RATIO, HOST_US, NATIVE_RATIO = 1.25, 25.0, 1.05
JUDGED_OPS = ("forward", "forward + mask", "adjoint", "pinv + mask")
HOST_PATH = ("shift_sum", "shift_sum + mask", "adjoint", "pinv", "pinv + mask")


def criteria(data: dict[str, Any]) -> list[str]:
    """The timing targets of the GPU acceptance list: a count, each miss, then a table of
    every judged group (GPU time, x limit, host time, x the best native, verdict). On a dry
    run's plan, whether gpu_timing plans every group judged here (the names are the
    contract between the two)."""
    tags, fwd_bwd = _targets()
    by_group: dict[str, dict[str, dict[str, Any]]] = {}
    for e in data.get("entries") or []:
        by_group.setdefault(e["group"], {})[e["name"]] = e
    plan = data.get("planned") or {"torch": [], "cupy": []}
    planned = {g for groups in plan.values() for g in groups}
    table: dict[str, dict[str, Any]] = {}  # group -> its row: figures and verdicts
    misses: list[str] = []

    def judge(group: str, measure: str, value: float | None, bound: float, call: str = "") -> None:
        row = table.setdefault(group, {"verdicts": []})
        what = f"{group}{f' {call}' if call else ''}: {measure}"
        if value is None:
            row["verdicts"].append("MISSING")
        elif value > bound:
            row["verdicts"].append("MISS")
            misses.append(f"MISS    {what} {value:.2f} > {bound:g}")
        else:
            row["verdicts"].append("PASS")

    for lib in plan:
        for tag in tags:
            for op in JUDGED_OPS:
                group = f"{lib} {op} {tag}"
                e = by_group.get(group, {}).get("portops")
                table[group] = {"verdicts": [], "entry": e}
                judge(group, "x limit", e and e["ratio"], LIMIT_RATIO)
                judge(group, "host us/call", e and e["host_us"], HOST_US)
            if lib == "torch":
                group = f"torch forward+backward + mask {tag}"
                e = by_group.get(group, {}).get("portops")
                table[group] = {"verdicts": [], "entry": e}
                judge(group, "x the forward's limit", e and e["ratio"], fwd_bwd[tag])
        group = f"{lib} host path (1,4,8,8)"
        calls = {n: e for n, e in by_group.get(group, {}).items() if n in HOST_PATH}
        worst = max(calls.values(), key=lambda e: e["host_us"], default=None)
        table[group] = {"verdicts": [], "entry": worst}
        for name in HOST_PATH:
            e = calls.get(name)
            judge(group, "host us/call", e and e["host_us"], HOST_US, call=name)
    order = [g for groups in plan.values() for g in groups] + sorted(set(by_group) - planned)
    for group in (g for g in order if " vecdot " in g or " einsum " in g):
        members = dict(by_group.get(group, {}))
        mine = members.pop("portops", None)
        best = min(members.values(), key=lambda e: e["gpu_us"], default=None)
        ratio = mine["gpu_us"] / best["gpu_us"] if mine and best else None
        table[group] = {"verdicts": [], "entry": mine, "native": ratio, "best": best}
        judge(group, f"x the best native ({best['name'] if best else '?'})", ratio, NATIVE_RATIO)

    if data.get("dry_run"):
        unplanned = sorted(g for g in table if g not in planned)
        if unplanned:
            return ["criteria name groups that gpu_timing does not plan: " + ", ".join(unplanned)]
        checks = sum(len(r["verdicts"]) for r in table.values())
        return [f"criteria: {checks} checks, every group they judge planned by gpu_timing"]
    counts = Counter(v for r in table.values() for v in r["verdicts"])
    if not data.get("entries"):
        return [f"targets: nothing was timed ({counts['MISSING']} checks not made)"]
    lines = [
        f"targets: {counts['PASS']} pass, {counts['MISS']} miss, {counts['MISSING']} not timed "
        f"(x limit <= {LIMIT_RATIO}, host <= {HOST_US:g} us/call, forward+backward <= "
        + " / ".join(f"{b:g}x ({t.split()[0]})" for t, b in fwd_bwd.items())
        + f" the forward's limit, vecdot and einsum <= {NATIVE_RATIO}x the best native)",
        *("  " + m for m in misses[:30]),
        *([f"  ... {len(misses) - 30} more"] if len(misses) > 30 else []),
        f"  {'group':<46} {'GPU us':>9} {'x limit':>8} {'host us':>8} {'x native':>8}  verdict",
    ]

    def figure(value: float | None, spec: str) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        return format(value, spec)

    for group, row in table.items():
        e = row.get("entry") or {}
        verdict = next((v for v in ("MISS", "MISSING") if v in row["verdicts"]), "PASS")
        host = figure(e.get("host_us"), ".1f")
        if group.endswith("(1,4,8,8)") and e:
            host = f"{host} max"
        lines.append(
            f"  {group:<46} {figure(e.get('gpu_us'), '.1f'):>9} {figure(e.get('ratio'), '.2f'):>8} "
            f"{host:>8} {figure(row.get('native'), '.2f'):>8}  {verdict}"
        )
    return lines


def digest_bench(out: Path, work: Path) -> list[str]:
    """The CUDA bench sessions' and the sweep sample's outcome lines from bench.txt."""
    lines = []
    text = tail_lines(out / "bench.txt", 20000)
    section = ""
    for ln in text:
        if ln.startswith(("### bench ", "### sweep", "### dry run")):
            section = ln[4:].split(":")[0]
            continue
        keep = (
            re.match(r"nox > Session \S+ (was successful|failed|skipped)", ln)
            or ln.startswith(("FAILED ", "ERROR ", "Every sweep together"))
            or "is required (--bench-require)" in ln
            or (ln.startswith("## ") and " sweep (" in ln)
            or pytest_counts([ln])
        )
        if keep:
            lines.append(f"  [{section or '?'}] {ln.strip()[:200]}")
    misses = [ln for ln in text if ln.startswith("|") and " MISS" in ln]
    if misses:
        lines.append(f"  sweep misses ({len(misses)}):")
        lines += ["    " + re.sub(r"\s+", " ", ln)[:160] for ln in misses[:10]]
    return lines


def digest_env(out: Path, work: Path) -> list[str]:
    """The env step's problems: the wheels' and the dry run's checks, errors, a missing GPU."""
    lines = tail_lines(out / "env.txt", 400)
    marks = ("  - ", "ERROR", "error", "over the", "not found", "gpu: none")
    return [ln.rstrip()[:200] for ln in lines if ln.startswith(marks) or "over the " in ln][:20]


DIGESTS = {
    "env": digest_env,
    "tests": digest_tests,
    "memcheck": digest_memcheck,
    "timing": digest_timing,
    "bench": digest_bench,
    "sweep": None,  # in bench's digest: both write bench.txt
}


def write_summary(out: Path, work: Path) -> str:
    status = read_status(work)
    meta = json.loads((work / "meta.json").read_text()) if (work / "meta.json").is_file() else {}
    env_lines = tail_lines(out / "env.txt", 200)
    keys = ("gpu:", "versions:", "torch sees:", "cupy sees:", "wheels:")
    env = [ln for ln in env_lines if ln.startswith(keys)]
    bad = [r for r in status if r["state"] not in ("ok", "dry-ok")]
    if bad:
        verdict = "NOT OK: " + ", ".join(f"{r['step']} {r['state']}" for r in bad)
    else:
        verdict = "ALL STEPS OK" if status else "NO STEP RAN"
    total = sum(float(r["seconds"] or 0) for r in status if r["step"] != "memcheck")
    lines = [
        f"portops GPU check ({meta.get('mode', '?')}) {meta.get('started', '')}, "
        f"commit {meta.get('commit', '?')}",
        f"result: {verdict}",
        f"time: {meta.get('elapsed', round(total))} s (budget {meta.get('budget', '?')} s)",
        *env,
        "",
        f"{'step':<9} {'state':<8} {'rc':>4} {'time':>6} {'box':>5}  note",
    ]
    for r in status:
        time = f"{r['seconds']:>5}s {r['box']:>4}s"
        lines.append(f"{r['step']:<9} {r['state']:<8} {r['rc']:>4} {time}  {r['note']}")
    ran = {r["step"] for r in status}
    for step, digest in DIGESTS.items():
        if step not in ran or digest is None:
            continue
        try:
            body = digest(out, work)
        except Exception as exc:  # a summary must still be written
            body = [f"(could not read its results: {type(exc).__name__}: {exc})"]
        if body:
            title = "bench and sweep" if step == "bench" else step
            lines += ["", f"== {title}", *body]
    if "sweep" in ran and "bench" not in ran:
        lines += ["", "== sweep", *digest_bench(out, work)]
    rerun = sorted({r["step"] for r in bad if r["step"] != "env"})
    lines += [
        "",
        "files: " + ", ".join(f for f in FILES if (out / f).exists() or f == "summary.txt"),
    ]
    if rerun:
        flag = meta.get("flag", "--quick")
        lines.append(f"rerun the failing part: .ci/gpu {flag} --only {','.join(rerun)}")
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text)
    return text


# --------------------------------------------------------------------------- finish


def cut(path: Path, limit: int = LOG_BYTES) -> bool:
    """Keep a log's first fifth and last four fifths of `limit` bytes; True if cut."""
    size = path.stat().st_size
    if size <= limit:
        return False
    with path.open("rb") as f:
        head = f.read(limit // 5)
        f.seek(size - (limit - limit // 5))
        tail = f.read()
    note = f"\n\n[... {size - limit} bytes cut here: the whole log is in raw.tar.gz ...]\n\n"
    path.write_bytes(head + note.encode() + tail)
    return True


def finish(out: Path, work: Path) -> list[str]:
    """Summary, raw.tar.gz, logs cut to size; returns the limits' problems (none: ok)."""
    problems = []
    logs = [p for p in sorted(out.iterdir()) if p.suffix in (".log", ".txt")]
    long_logs = [p for p in logs if p.stat().st_size > LOG_BYTES]
    xml = out / "tests.xml"
    big_xml = xml.is_file() and xml.stat().st_size >= MAX_BYTES
    raw = out / "raw.tar.gz"
    for with_logs in (True, False):  # the uncut logs only while the archive stays small
        with tarfile.open(raw, "w:gz") as tar:
            for p in sorted(work.iterdir()):
                if p.suffix in (".json", ".jsonl", ".png", ".txt"):
                    tar.add(p, arcname=p.name)
            for p in long_logs if with_logs else []:
                tar.add(p, arcname="uncut-" + p.name)
            if big_xml:
                tar.add(xml, arcname=xml.name)
        if raw.stat().st_size < MAX_BYTES:
            break
    if big_xml:
        xml.unlink()
        problems.append("tests.xml was over the size limit: it is in raw.tar.gz only")
    for p in long_logs:
        cut(p)
    write_summary(out, work)
    files = [p for p in out.rglob("*") if p.is_file()]
    if len(files) > MAX_FILES:
        names = ", ".join(p.name for p in files)
        problems.append(f"{len(files)} files in {out}, over {MAX_FILES}: {names}")
    for p in files:
        if p.stat().st_size >= MAX_BYTES:
            problems.append(f"{p.name}: {p.stat().st_size} bytes, over {MAX_BYTES}")
        if not NAME_OK.match(p.name):
            problems.append(f"{p.name}: a name of other characters than letters, digits, . _ -")
    return problems


# --------------------------------------------------------------------------- self-test


def selftest() -> list[str]:
    """The summary's readers on made-up results (no GPU): JUnit, memcheck, timing."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out, work = Path(tmp, "out"), Path(tmp, "work")
        out.mkdir()
        work.mkdir()
        (work / "status.tsv").write_text(
            "env\tok\t0\t9\t30\t\ntests\tFAIL\t1\t100\t180\t\nmemcheck\tTIMEOUT\t124\t180\t180\t\n"
            "timing\tok\t0\t80\t110\t\n"
        )
        (out / "tests.xml").write_text(
            '<testsuites><testsuite name="pytest" tests="3">'
            '<testcase classname="tests.test_a" name="test_x[cupy]"/>'
            '<testcase classname="tests.test_a" name="test_y[cupy]">'
            '<failure message="ValueError: bad&#10;more">trace</failure></testcase>'
            '<testcase classname="tests.test_b" name="test_z"><skipped message="no"/></testcase>'
            "</testsuite></testsuites>"
        )
        (out / "tests.log").write_text("....F\n1 failed, 1 passed, 1 skipped in 3.00s\n")
        (out / "memcheck.log").write_text(
            "### memcheck torch_cuda (box 180 s)\n"
            "tests/test_a.py::test_x[torch_cuda] PASSED\n"
            "========= Invalid __global__ write of size 4 bytes\n"
            "=========     at _forward_kernel+0x1d0\n"
            "========= ERROR SUMMARY: 1 error\n"
            "### memcheck cupy (box 180 s)\n"
            "tests/test_a.py::test_x[cupy] PASSED\n"
        )
        tags, _ = _targets()
        timed = {"gpu_us": 50.0, "host_us": 20.0, "ratio": 1.2, "name": "portops"}
        entries = [
            timed | {"group": f"{lib} {op} {tag}"}
            for lib in ("torch", "cupy")
            for tag in tags
            for op in JUDGED_OPS
        ]
        entries[0]["ratio"] = 1.3
        timing = {"device": "X", "entries": entries, "planned": {"torch": [], "cupy": []}}
        (work / "timing.json").write_text(json.dumps(timing))
        text = write_summary(out, work)
        expect = [
            "result: NOT OK: tests FAIL, memcheck TIMEOUT",
            "1x failure: ValueError: bad",
            "tests/test_a.py::test_y[cupy]",
            "memcheck torch_cuda: 1 errors (the sanitizer's summary); tests: 1 passed",
            "Invalid __global__ write",
            "memcheck cupy: no ERROR SUMMARY (stopped at the box?): 0 error lines seen",
            "last test reached: tests/test_a.py::test_x[cupy]",
            "targets: ",
            f"MISS    torch forward {tags[0]}: x limit 1.30 > 1.25",
            "1 miss, 12 not timed",
            "rerun the failing part: .ci/gpu --quick --only memcheck,tests",
        ]
        problems += [f"summary lacks {e!r}" for e in expect if e not in text]
        if problems:
            problems.append("the summary was:\n" + text)
        # Stopped before its end: no JUnit XML, the progress log instead.
        (out / "tests.xml").unlink()
        (out / "tests.log").write_text("..F\n")
        (work / "tests-progress.jsonl").write_text(
            '{"nodeid": "tests/test_a.py::test_x", "when": "call", "outcome": "passed"}\n'
            '{"nodeid": "tests/test_a.py::test_y", "when": "setup", "outcome": "failed", '
            '"message": "Failed: backend cupy was requested"}\n'
        )
        text = write_summary(out, work)
        expect = [
            "no JUnit XML; progress log: 2 tests, 1 passed, 0 failed, 1 errors",
            "1x error: failed on setup: Failed: backend cupy was requested",
        ]
        problems += [f"summary lacks {e!r}" for e in expect if e not in text]
        for i in range(MAX_FILES + 1):
            (out / f"f{i}.log").write_text("x" * (LOG_BYTES + 10 if i == 0 else 10))
        found = finish(out, work)
        if not any("files in" in p for p in found):
            problems.append(f"finish did not flag {MAX_FILES + 1}+ files: {found}")
        if (out / "f0.log").stat().st_size > LOG_BYTES + 200:
            problems.append("finish did not cut a long log")
    return problems


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wheels", help="check the wheel folder against the list")
    w.add_argument("--dir", default=".gpu-wheels")
    w.add_argument("--list", default=".ci/gpu-wheels.txt")
    w.add_argument("--prune", action="store_true", help="remove wheels the list does not name")
    i = sub.add_parser("installed", help="on the GPU machine: the listed packages import")
    i.add_argument("--list", default=".ci/gpu-wheels.txt")
    sub.add_parser("env", help="versions and devices, as key: value lines")
    for name in ("summary", "finish"):
        s = sub.add_parser(name)
        s.add_argument("--out", required=True)
        s.add_argument("--work", required=True)
    c = sub.add_parser("criteria", help="the timing targets, from gpu_timing's JSON")
    c.add_argument("json")
    sub.add_parser("selftest")
    args = parser.parse_args(argv)

    if args.command == "wheels":
        problems = check_wheels(Path(args.dir), Path(args.list), prune=args.prune)
        n = len(read_list(Path(args.list)))
        size = (
            sum(p.stat().st_size for p in Path(args.dir).glob("*.whl"))
            if Path(args.dir).is_dir()
            else 0
        )
        ready = "each present once, for CPython 3.12 manylinux x86_64, requirements covered"
        state = f"{len(problems)} problems" if problems else ready
        print(f"wheels: {n} listed, {size / 2**20:.1f} MiB in {args.dir}/; {state}")
    elif args.command == "installed":
        problems = check_installed(Path(args.list))
        print(
            "wheels: installed, "
            + ("every requirement met" if not problems else f"{len(problems)} problems")
        )
    elif args.command == "env":
        print("\n".join(env_report()))
        return 0
    elif args.command == "summary":
        print(write_summary(Path(args.out), Path(args.work)), end="")
        return 0
    elif args.command == "finish":
        problems = finish(Path(args.out), Path(args.work))
    elif args.command == "criteria":
        print("\n".join(criteria(json.loads(Path(args.json).read_text()))))
        return 0
    else:
        problems = selftest()
        print("selftest: " + ("ok" if not problems else "FAILED"))
    for p in problems:
        print(f"  - {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
