"""Every user mistake on the command line: one line on stderr saying what is wrong and what to
do, exit status 2, nothing written; the traceback only under --debug.

Each case runs the real ``fedload`` command of this environment in a subprocess. The cases are
started together (one module fixture) and each test reads its own outcome: a ``fedload`` start
takes a second or two of imports. Further mistakes run through the same wrapper in this process.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from sqlalchemy.exc import OperationalError

from app.cli import cli
from app.cli_errors import run
from app.db.session import unit_of_work
from app.java import JavaMissing, java_major, require_java
from app.participants.schemas import ParticipantCreate
from app.participants.service import create_participant
from app.server import serve_in_thread
from app.settings import Settings, get_settings
from tests.support.snapshot import registry_snapshot

FEDLOAD = str(Path(sys.executable).with_name("fedload"))
ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 180  # generous: a loaded 2-core CI machine, eight Python starts at once
UNREACHABLE_DB = "postgresql://fedload@127.0.0.1:1/registry"  # nothing listens on port 1


@dataclass(frozen=True)
class Case:
    args: list[str]
    expect: list[str]  # words the one line must hold: what is wrong and what to do
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    drop_env: tuple[str, ...] = ()


@dataclass
class Outcome:
    case: Case
    status: int
    stdout: str
    stderr: str


@dataclass
class World:
    """What the cases share: a migrated registry with one participant, a held port, a live
    service, and a directory outside the checkout."""

    work: Path
    db_url: str
    busy_port: int
    service: str
    before: object  # the registry's rows before the cases ran
    outcomes: dict[str, Outcome] = field(default_factory=dict)


def _cases(world: World) -> dict[str, Case]:
    """The mistakes issue 15 names, each through the real command."""
    work, busy = world.work, world.busy_port
    empty_path = work / "no-java-here"
    empty_path.mkdir()
    agent = ["agent", "--participant", "A", "--api", world.service]
    agent += ["--data-dir", str(work / "agent")]
    return {
        "negative capacity": Case(
            ["participants", "create", "E", "--capacity", "-5"],
            ["capacity", "greater than 0"],
            env={"DATABASE_URL": f"sqlite:///{work / 'never-created.db'}"},
        ),
        "serve on a port in use": Case(
            ["serve", "--port", str(busy)],
            [f"127.0.0.1:{busy} is already in use", "choose another --port"],
        ),
        "agent on a port in use": Case(
            [*agent, "--key", "fl_x", "--listen", f"127.0.0.1:{busy}"],
            [f"127.0.0.1:{busy} is already in use", "choose another --listen"],
        ),
        "agent with a wrong key": Case(
            [*agent, "--key", "fl_wrong"],
            ["refused the API key", "401", "--key"],
        ),
        "demo outside the checkout": Case(
            ["demo", "--no-ui"],
            ["contracts/demo.yaml not found", "checkout", "--federation"],
            cwd=work,
        ),
        "no Java": Case(
            ["whatif", "--large", "20", "--k", "2", "--out", str(work / "whatif-no-java")],
            ["Java is not installed", "apt-get install openjdk-17-jre-headless"],
            env={"PATH": str(empty_path)},
            drop_env=("JAVA_HOME",),
        ),
        "unreachable database": Case(
            ["db", "upgrade"],
            ["cannot reach the database", "127.0.0.1:1", "Connection refused", "DATABASE_URL"],
            env={"DATABASE_URL": UNREACHABLE_DB},
        ),
        "bad federation file": Case(
            ["contracts", "apply", str(_bad_federation(work))],
            ["broken.yaml:5:", "contracts[0].between[1]", "'Q'", "nothing was written"],
        ),
    }


def _bad_federation(work: Path) -> Path:
    path = work / "broken.yaml"
    path.write_text(
        "federation: broken\nparticipants:\n  - {name: A, capacity: 100}\n"
        "contracts:\n  - {between: [A, Q], price_min: 0.2, price_max: 0.3}\n"
    )
    return path


def _busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[World]:
    work = tmp_path_factory.mktemp("cli-errors")
    db = work / "registry.db"
    shutil.copy(sqlite_template, db)
    db_url = f"sqlite:///{db}"
    with unit_of_work(db_url) as session:  # so that a wrong key meets a real participant
        create_participant(session, ParticipantCreate(name="A", capacity=100), actor="test")
    settings = Settings(database_url=db_url, admin_key="cli-admin", environment="test")
    # No colour and no traceback from the environment, and a narrow terminal: the one line
    # must not be wrapped.
    plain = ("FEDLOAD_DEBUG", "FORCE_COLOR", "NO_COLOR")
    base = {k: v for k, v in os.environ.items() if k not in plain}
    base |= {"DATABASE_URL": db_url, "COLUMNS": "80"}
    with _busy_port() as holder, serve_in_thread(settings) as service:
        world = World(work, db_url, holder.getsockname()[1], service, registry_snapshot(db_url))
        cases = _cases(world)
        running = {}
        for name, case in cases.items():
            env = {k: v for k, v in base.items() if k not in case.drop_env} | case.env
            running[name] = subprocess.Popen(
                [FEDLOAD, *case.args],
                env=env,
                cwd=case.cwd or ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        for name, process in running.items():
            try:
                stdout, stderr = process.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            world.outcomes[name] = Outcome(cases[name], process.returncode, stdout, stderr)
        yield world


CASES = [
    "negative capacity",
    "serve on a port in use",
    "agent on a port in use",
    "agent with a wrong key",
    "demo outside the checkout",
    "no Java",
    "unreachable database",
    "bad federation file",
]


@pytest.mark.parametrize("name", CASES)
def test_a_mistake_is_one_line_on_stderr_and_exit_status_2(world: World, name: str) -> None:
    outcome = world.outcomes[name]
    assert outcome.status == 2, (outcome.status, outcome.stderr[-3000:])
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr[-3000:]
    assert lines[0].startswith("error: "), lines[0]
    for words in outcome.case.expect:
        assert words in lines[0], f"{words!r} not in {lines[0]!r}"


def test_every_case_is_checked(world: World) -> None:
    assert sorted(world.outcomes) == sorted(CASES)


def test_mistakes_write_nothing(world: World) -> None:
    assert registry_snapshot(world.db_url) == world.before
    assert not (world.work / "never-created.db").exists()  # validated before migrating
    assert not (world.work / "agent").exists()  # the agent's --data-dir


# The same wrapper in this process (no new interpreter each): more mistakes, the colour, the
# traceback under --debug, and a bug's line.


@pytest.fixture
def registry_env(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DATABASE_URL", world.db_url)
    for name in ("FEDLOAD_DEBUG", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    status = run(cli, args)
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: "), err
    return err.strip()


@pytest.mark.usefixtures("registry_env")
def test_more_mistakes_in_one_line(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    line = _one_line(capsys, ["participants", "create", "--capacity", "5"])
    assert "Missing argument 'NAME'" in line or "Missing argument 'name'" in line
    assert "fedload participants create --help" in line
    line = _one_line(capsys, ["participants", "create", "A", "--capacity", "5"])
    assert "name: a participant named 'A' already exists" in line
    line = _one_line(capsys, ["contracts", "apply", str(world.work / "nope.yaml")])
    assert "nope.yaml" in line and "No such file" in line
    monkeypatch.setenv("DATABASE_URL", "postgress://fedload@127.0.0.1/registry")
    get_settings.cache_clear()
    line = _one_line(capsys, ["db", "upgrade"])
    assert "DATABASE_URL is not a database URL" in line and "postgresql://" in line
    assert registry_snapshot(world.db_url) == world.before


def test_an_old_java_is_named_with_how_to_install_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jdk-11"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    with pytest.raises(JavaMissing) as raised:
        require_java()
    assert raised.value.line() == (
        f"{java} is Java 11; Spark 4 needs Java 17 or newer; install Java 17 or newer "
        "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
    )
    assert java_major('java version "1.8.0_402"') == 8
    assert java_major('openjdk version "21" 2023-09-19') == 21


@pytest.mark.usefixtures("registry_env")
def test_the_line_is_red_on_a_colour_terminal(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert run(cli, ["contracts", "apply", str(_bad_federation(world.work))]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    line = err.strip()
    assert "unknown participant 'Q'" in line
    assert line.startswith("\x1b[1;31merror:\x1b[0m \x1b[31m"), repr(line)  # bold red, then red


@pytest.mark.usefixtures("registry_env")
def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE_DB)
    get_settings.cache_clear()
    with pytest.raises(OperationalError):  # uncaught: Python prints the traceback
        run(cli, ["db", "upgrade", "--debug"])
    monkeypatch.setenv("FEDLOAD_DEBUG", "1")
    with pytest.raises(OperationalError):
        run(cli, ["db", "upgrade"])


def test_a_bug_is_one_line_that_points_to_debug(capsys: pytest.CaptureFixture[str]) -> None:
    app = typer.Typer()

    @app.command()
    def broken() -> None:
        raise ZeroDivisionError("division by zero")

    assert run(app, []) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: unexpected ZeroDivisionError: division by zero "
        "(a bug: run again with --debug for the traceback, and report it)"
    ]
    with pytest.raises(ZeroDivisionError):
        run(app, ["--debug"])
