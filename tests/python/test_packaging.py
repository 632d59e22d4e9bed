"""The source distribution: `pip install normkit-<version>.tar.gz` (and `python -m build`, which builds
the wheel from the sdist) must find every file the extension's sources include, for the CUDA build
as for the CPU one. setuptools puts only the sources listed in setup.py and the Python packages in an
sdist; the headers come from MANIFEST.in. And `python -m normkit`, the installed package's report and
self-check."""
import os
import re
import subprocess
import sys
import tarfile

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE_DIRS = [os.path.join(ROOT, "include"), os.path.join(ROOT, "src")]  # setup.py's include_dirs
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def extension_sources():
    """Every source either build mode of setup.py compiles (src/, python/csrc)."""
    found = []
    for top in ("src", os.path.join("python", "csrc")):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            found += [os.path.join(folder, f) for f in files if f.endswith((".cpp", ".cu"))]
    return found


def include_closure(sources):
    """The repository files the sources include, directly or through other headers ("" and <>
    forms, resolved as the compiler would: the including file's folder, then the include dirs;
    system headers resolve to nothing here and are left out)."""
    seen, todo = set(), list(sources)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        with open(path, encoding="utf-8") as f:
            names = _INCLUDE.findall(f.read())
        for name in names:
            for base in [os.path.dirname(path)] + INCLUDE_DIRS:
                candidate = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(candidate):
                    todo.append(candidate)
                    break
    return {os.path.relpath(p, ROOT) for p in seen}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    # egg_info's folder in the temporary one, so that the checkout is left as it was
    cmd = [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(out), "sdist", "--dist-dir", str(out)]
    env = dict(os.environ, NORMKIT_FORCE_CPU="1")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (archive,) = out.glob("normkit-*.tar.gz")
    return archive


def test_sdist_carries_every_file_the_build_includes(sdist):
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        members = {name[len(top) + 1:] for name in tar.getnames()}
    needed = include_closure(extension_sources())
    assert any(p.endswith(".cuh") for p in needed) and "include/normkit/normkit.h" in needed  # the scan works
    missing = sorted(needed - members)
    assert not missing, f"{sdist.name} lacks files the extension includes: {missing}"
    assert not [m for m in members if m.endswith((".o", ".so"))], "build products in the sdist"


def test_pip_installs_the_sdist_and_it_runs(sdist, tmp_path):
    """The whole user path from the archive: pip builds it (the CPU extension: the CUDA build of the
    same files is what the include check above covers) and the installed package computes a norm."""
    target = tmp_path / "site"
    env = dict(os.environ, NORMKIT_FORCE_CPU="1", MAX_JOBS=os.environ.get("MAX_JOBS", str(os.cpu_count() or 2)))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--target",
           str(target), str(sdist)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    probe = ("import torch, normkit\n"
             "assert normkit.__file__.startswith(%r), normkit.__file__\n"
             "x = torch.randn(3, 16, dtype=torch.float64); w = torch.randn(16, dtype=torch.float64)\n"
             "err = (normkit.layer_norm(x, (16,), w) - torch.nn.functional.layer_norm(x, (16,), w)).abs().max()\n"
             "assert err < 1e-12, err\n"
             "print('ok')\n" % str(target))
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(target)))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_python_m_normkit_reports_and_self_checks(tmp_path):
    """`python -m normkit`: the build, torch, device and planner table, and a self-check against
    torch.nn.functional that exits 1 when something fails (here: a planner table that does not load)."""
    run = subprocess.run([sys.executable, "-m", "normkit"], capture_output=True, text=True, timeout=600,
                         cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "self-check: ok" in run.stdout and "planner table: built-in" in run.stdout, run.stdout
    bad = subprocess.run([sys.executable, "-m", "normkit"], capture_output=True, text=True, timeout=600,
                         cwd=str(tmp_path), env=dict(os.environ, NORMKIT_PLANNER_TABLE=str(tmp_path / "missing.table")))
    assert bad.returncode == 1 and "self-check: FAILED" in bad.stdout and "cannot open planner table" in bad.stdout, \
        bad.stdout + bad.stderr


def test_planner_table_names_the_table_in_use(tmp_path):
    """normkit.planner_table(): the current device's built-in table (the H100 SXM has its own, every other
    GPU and the CPU path take the H200's), or the file NORMKIT_PLANNER_TABLE names; a file that does not
    load raises RuntimeError naming its line."""
    import torch
    import normkit
    expected = "built-in (H200)"
    if normkit.built_with_cuda() and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        if "H100 80GB HBM3" in props.name and props.multi_processor_count == 132:
            expected = "built-in (H100 SXM)"
    if not os.environ.get("NORMKIT_PLANNER_TABLE"):  # (a table named for the whole run replaces it)
        assert normkit.planner_table() == expected

    def planner_table_under(path):
        return subprocess.run([sys.executable, "-c", "import normkit; print(normkit.planner_table())"],
                              capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                              env=dict(os.environ, NORMKIT_PLANNER_TABLE=str(path)))

    table = tmp_path / "three-rows.table"
    table.write_text("simple_max_rows = 3\n")
    run = planner_table_under(table)
    assert run.returncode == 0 and run.stdout.strip() == str(table), run.stdout + run.stderr
    bad = tmp_path / "bad.table"
    bad.write_text("simple_max_rows = 3\nno_such_key = 1\n")
    run = planner_table_under(bad)
    assert run.returncode != 0 and "RuntimeError" in run.stderr and "line 2" in run.stderr \
        and "no_such_key" in run.stderr, run.stderr
