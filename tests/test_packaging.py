"""Packaging: what ``pip install .`` puts into site-packages, and the metadata it carries.

The repository keeps ``integrations/`` beside ``pb_accountant/``, but it installs as
``pb_accountant.integrations``: a generic top-level name would be shadowed by (or
overwrite) a user's own ``integrations`` package.
"""
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel ``pip install .`` builds (numpy/scipy reused from here)."""
    where = tmp_path_factory.mktemp("fresh_install")
    env_dir = where / "venv"
    venv.create(env_dir, system_site_packages=False, with_pip=True)
    python = env_dir / "bin" / "python"
    # numpy and scipy come from this environment (no download); the project from the tree
    pth = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                    ).stdout.strip())
    deps = {Path(__import__(name).__file__).resolve().parents[1] for name in ("numpy", "scipy")}
    (pth / "_host_deps.pth").write_text("\n".join(str(d) for d in sorted(deps)) + "\n")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    wheels = where / "wheels"
    proc = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                 str(ROOT)], cwd=where, env=env)
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}")
    wheel = next(wheels.glob("pb_accountant-*.whl"))
    proc = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                cwd=where, env=env)
    if proc.returncode != 0:
        pytest.fail(f"pip install of the wheel failed:\n{proc.stdout}\n{proc.stderr}")
    return python, pth, where


def test_no_top_level_integrations_package(installed):
    python, purelib, _ = installed
    top_level = sorted(p.name for p in purelib.iterdir())
    assert "integrations" not in top_level, top_level
    assert "pb_accountant" in top_level
    assert (purelib / "pb_accountant" / "integrations" / "cli.py").is_file()
    assert (purelib / "pb_accountant" / "py.typed").is_file()
    # every subpackage of the source tree is in the wheel
    for init in (ROOT / "pb_accountant").rglob("__init__.py"):
        rel = init.relative_to(ROOT)
        assert (purelib / rel).is_file(), f"{rel} missing from the wheel"


def test_installed_integrations_import_outside_the_tree(installed):
    python, _, where = installed
    # a user's own folder named "integrations" must not shadow ours
    own = where / "integrations"
    own.mkdir(exist_ok=True)
    (own / "__init__.py").write_text("MINE = True\n")
    proc = _run([str(python), "-c",
                 "import sys, integrations, pb_accountant; "
                 "from pb_accountant.integrations import BudgetTracker, BudgetGuard; "
                 "from pb_accountant.comparison import kov_delta, rdp_from_pair; "
                 "assert integrations.MINE; assert 'torch' not in sys.modules; "
                 "print(pb_accountant.__version__)"], cwd=where)
    assert proc.returncode == 0, proc.stderr
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in meta["project"]["dynamic"]
    from pb_accountant import __version__
    assert proc.stdout.strip() == __version__
    script = python.parent / "pb-accountant"
    out = _run([str(script), "epsilon", "--sigma", "1", "--sample-rate", "0.05", "--steps", "5",
                "--delta", "1e-5", "--json"], cwd=where)
    assert out.returncode == 0, out.stderr


def test_metadata_fit_for_an_index():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert any(c.startswith("Programming Language :: Python :: 3") for c in meta["classifiers"])
    assert "Typing :: Typed" in meta["classifiers"]
    assert meta["scripts"]["pb-accountant"] == "pb_accountant.integrations.cli:main"
    # the peers of `pb-accountant compare` have an extra of their own
    assert any(d.startswith("dp-accounting") for d in meta["optional-dependencies"]["compare"])
