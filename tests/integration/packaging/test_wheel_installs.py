"""The wheel built from this checkout, installed in a fresh virtual environment outside it,
runs the operator's commands: the migrations, the Alembic configuration and the federation JSON
Schema travel inside the package (issue 14, item 6).

The environment is new and holds only the wheel. Its dependencies are linked in from this
test's own environment (everything in its site-packages except fedload itself), so that the
test needs no network and no half-gigabyte reinstall of PySpark; ``pip check`` then proves the
wheel's declared requirements are all met there. The commands run from a temporary directory
with no PYTHONPATH, so nothing of the checkout can be found by accident: a test asserts that
the installed ``app`` and its data are the environment's.
"""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.resources import BUNDLED

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 300  # a loaded 2-core machine; each step takes seconds when it is quiet

FEDERATION = """\
federation: packaged
description: "Three participants; A starts overloaded and sheds to B and C."
participants:
  - {name: A, capacity: 100, cost_model: {kind: mm1}}
  - {name: B, capacity: 100, cost_model: {kind: mm1}}
  - {name: C, capacity: 100, cost_model: {kind: mm1}}
contracts:
  - {between: [A, B], price_min: 0.24, price_max: 0.26, min_move_seconds: 30}
  - {between: [A, C], price_min: 0.24, price_max: 0.26, min_move_seconds: 30}
tasks:
  - {name: A.q01, owner: A, load: 30}
  - {name: A.q02, owner: A, load: 30}
  - {name: A.q03, owner: A, load: 30}
  - {name: B.q01, owner: B, load: 20}
"""


@dataclass(frozen=True)
class Installed:
    venv: Path
    work: Path  # the commands' working directory, outside the checkout
    env: dict[str, str]

    @property
    def fedload(self) -> str:
        return str(self.venv / "bin" / "fedload")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.fedload, *args],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )


def _check(step: str, completed: subprocess.CompletedProcess[str]) -> None:
    assert completed.returncode == 0, (
        f"{step} failed ({completed.returncode}):\n{completed.stdout[-2000:]}\n"
        f"{completed.stderr[-4000:]}"
    )


def _link_dependencies(site_packages: Path) -> None:
    """Everything this environment has installed, except fedload itself (its editable hook
    points at the checkout, which the new environment must not see)."""
    ours = Path(sysconfig.get_path("purelib"))
    for entry in ours.iterdir():
        name = entry.name
        if name.startswith(("fedload", "__editable__", "__pycache__")):
            continue
        (site_packages / name).symlink_to(entry)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("packaging")
    dist, venv, work = base / "dist", base / "venv", base / "work"
    work.mkdir()
    # sdist first, then the wheel from the sdist (python -m build's way): MANIFEST.in must
    # carry what setup.py bundles, or this build fails.
    _check(
        "python -m build",
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        ),
    )
    wheel = next(dist.glob("fedload-*.whl"))
    # No pip inside (ensurepip would add seconds): this environment's pip installs into it.
    _check(
        "python -m venv",
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        ),
    )
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    _link_dependencies(site_packages)
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    _check(
        "pip install the wheel",
        subprocess.run(
            [*pip, "install", "--no-index", "--no-deps", "--no-compile", str(wheel)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        ),
    )
    _check(
        "pip check",
        subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=TIMEOUT_S),
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DATABASE_URL")
        and not k.startswith("FEDLOAD_")
    }
    env |= {
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "DATABASE_URL": f"sqlite:///{work / 'registry.db'}",
        "FEDLOAD_REPORTS_DIR": str(work / "reports"),
    }
    (work / "federation.yaml").write_text(FEDERATION)
    yield Installed(venv, work, env)


def test_setup_py_bundles_what_app_resources_reads() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        if node.targets[0].id == "BUNDLED"
    }
    assert assigned["BUNDLED"] == BUNDLED


def test_the_installed_package_reads_its_own_data(installed: Installed) -> None:
    probe = (
        "import app, app.resources as r, app.api_docs as d; "
        "print(app.__file__); print(r.data_root()); print(r.federation_schema_path()); "
        "print(r.alembic_ini()); print(sorted(p.name for p in (r.migrations_dir() / 'versions')"
        ".glob('*.py'))[0]); print(d.assets_dir())"
    )
    completed = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", probe],
        cwd=installed.work,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    _check("probe", completed)
    package, root, schema, ini, first, _assets = completed.stdout.splitlines()
    assert Path(package).is_relative_to(installed.venv), package
    assert Path(root) == Path(package).parent / "_bundled"
    assert Path(schema).is_file() and Path(ini).is_file()
    assert first.startswith("0001_")


def test_db_upgrade_then_contracts_apply(installed: Installed) -> None:
    upgraded = installed.run("db", "upgrade")
    _check("fedload db upgrade", upgraded)
    assert "to head" in " ".join(upgraded.stdout.split())  # rich wraps long paths
    applied = installed.run("contracts", "apply", "federation.yaml")
    _check("fedload contracts apply", applied)
    assert "participant A: created" in applied.stdout
    again = installed.run("contracts", "apply", "federation.yaml")
    _check("fedload contracts apply (again)", again)
    assert "no changes" in again.stdout
    # The JSON Schema is in force from the package: a bad file is refused, naming the field.
    broken = installed.work / "broken.yaml"
    broken.write_text(FEDERATION.replace("capacity: 100, cost_model", "capacity: -1, cost_model"))
    refused = installed.run("contracts", "apply", "broken.yaml")
    assert refused.returncode == 2, refused.stderr
    assert "participants[0].capacity" in refused.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_answers_healthz_and_its_docs(installed: Installed) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [installed.fedload, "serve", "--port", str(port)],
        cwd=installed.work,
        env=installed.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert server.poll() is None, server.communicate()[0][-4000:]
            try:
                health = httpx.get(f"{base}/healthz", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "fedload serve did not answer in time"
                time.sleep(0.5)
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        # The docs' assets come from the installed dependencies, not a CDN.
        asset = httpx.get(f"{base}/docs/assets/swagger-ui-bundle.js", timeout=30)
        assert asset.status_code == 200 and len(asset.content) > 100_000
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_agent_help(installed: Installed) -> None:
    helped = installed.run("agent", "--help")
    _check("fedload agent --help", helped)
    for option in ("--participant", "--api", "--key", "--listen", "--advertise", "--data-dir"):
        assert option in helped.stdout


def test_whatif_on_a_small_federation(installed: Installed) -> None:
    out = installed.work / "reports" / "packaged"
    simulated = installed.run("whatif", "federation.yaml", "--out", str(out))
    _check("fedload whatif", simulated)
    assert (out / "summary.json").is_file()
    assert (out / "report.html").is_file()
    said = " ".join(simulated.stderr.split())  # whatif reports on stderr, wrapped by rich
    assert "packaged: acceptable:" in said, said  # the verdict line comes first
