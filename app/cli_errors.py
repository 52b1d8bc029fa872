"""How ``fedload`` ends on a mistake: one red line on stderr saying what is wrong and what to
do, exit status 2; the traceback only under ``--debug`` (or ``FEDLOAD_DEBUG=1``).

``run`` wraps the Typer app (``app/cli.py`` ``main``): it parses the command line with Click's
standalone mode off, so usage errors and exceptions come back here instead of being printed as
Click's usage block or Typer's boxed traceback, and ``user_error`` translates the exceptions a
user can cause (bad values, a file, the database, the service, the port, Java) into one line.
Anything else is a bug: one line naming it, exit status 1, and ``--debug`` shows where.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape

from app.user_errors import UserError

try:  # Typer 0.2x vendors Click as typer._click, and raises that copy's exceptions
    from typer._click import exceptions as click_exceptions
except ImportError:  # older Typer uses Click itself
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

USER_ERROR_STATUS = 2
BUG_STATUS = 1
INTERRUPTED_STATUS = 130
DEBUG_FLAG = "--debug"


def debug_requested(args: Sequence[str]) -> bool:
    return DEBUG_FLAG in args or os.environ.get("FEDLOAD_DEBUG", "") not in ("", "0")


def run(app: typer.Typer, args: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (``main`` passes it to ``sys.exit``)."""
    given = list(sys.argv[1:] if args is None else args)
    debug = debug_requested(given)
    # --debug is accepted anywhere on the line, so that it can be added to any failing command.
    command = typer.main.get_command(app)
    try:
        result = command.main(
            args=[a for a in given if a != DEBUG_FLAG], prog_name="fedload", standalone_mode=False
        )
    except click_exceptions.NoArgsIsHelpError as error:
        # The help, as without the wrapper: Typer's rich mode has printed it while building
        # the error (its message is then empty); plain Click puts it in the message.
        if error.format_message().strip():
            typer.echo(error.format_message())
        return error.exit_code
    except click_exceptions.UsageError as error:
        if debug:
            raise
        where = error.ctx.command_path if error.ctx is not None else "fedload"
        return _say(f"{error.format_message()} (see {where} --help)", USER_ERROR_STATUS)
    except (typer.Abort, KeyboardInterrupt):
        if debug:
            raise
        return _say("interrupted", INTERRUPTED_STATUS)
    except Exception as error:
        if debug:
            raise
        known = user_error(error)
        if known is not None:
            return _say(known.line(), USER_ERROR_STATUS)
        return _say(
            f"unexpected {type(error).__name__}: {error or '(no message)'} "
            f"(a bug: run again with {DEBUG_FLAG} for the traceback, and report it)",
            BUG_STATUS,
        )
    # With standalone mode off Click returns the status of typer.Exit, or the command's value.
    return result if isinstance(result, int) else 0


def _say(message: str, status: int) -> int:
    # soft_wrap: never break the line at the terminal's width; markup escaped: a message may
    # hold brackets (a list, an IPv6 address) that rich would otherwise read as styles.
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print(f"[bold red]error:[/] [red]{escape(' '.join(message.split()))}[/]")
    return status


def user_error(error: BaseException) -> UserError | None:
    """The one-line form of an exception a user caused, or None for a bug."""
    if isinstance(error, UserError):
        return error
    for translate in (
        _domain,
        _federation_file,
        _validation,
        _database,
        _service,
        _os_error,
    ):
        found = translate(error)
        if found is not None:
            return found
    return None


def _domain(error: BaseException) -> UserError | None:
    from app.errors import DomainError

    if not isinstance(error, DomainError):
        return None
    where = f"{error.field}: " if error.field else ""
    return UserError(f"{where}{error.detail}")


def _federation_file(error: BaseException) -> UserError | None:
    from app.federation.document import FederationFileError

    if not isinstance(error, FederationFileError):
        return None
    return UserError(str(error), "fix the file and apply it again (nothing was written)")


def _validation(error: BaseException) -> UserError | None:
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return None
    problems = error.errors()
    if not problems:
        return UserError(str(error))
    first = problems[0]
    field = ".".join(str(part) for part in first["loc"]) or "value"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    message = str(first["msg"]).removeprefix("Value error, ")
    return UserError(f"{field}: {message}{more}")


def _database(error: BaseException) -> UserError | None:
    from sqlalchemy.exc import ArgumentError, InterfaceError, NoSuchModuleError, OperationalError

    if isinstance(error, (ArgumentError, NoSuchModuleError)):
        return UserError(
            f"DATABASE_URL is not a database URL SQLAlchemy understands ({error})",
            "use e.g. sqlite:///var/fedload.db or postgresql://user@host:5432/dbname",
        )
    # OperationalError covers a refused or timed-out connection, a lost one and a locked SQLite
    # file: the database does not answer as it should, the user's to fix, none a bug of ours.
    if not isinstance(error, (OperationalError, InterfaceError)):
        return None
    cause = str(error.orig).strip().splitlines() if error.orig is not None else []
    return UserError(
        f"cannot reach the database {_database_url()}: {cause[0] if cause else error}",
        "check DATABASE_URL and that the database server runs and accepts connections",
    )


def _database_url() -> str:
    from sqlalchemy.engine import make_url

    from app.settings import get_settings

    try:
        return make_url(get_settings().database_url).render_as_string(hide_password=True)
    except Exception:  # the URL itself may be what is wrong; the message names the cause
        return "(DATABASE_URL)"


def _service(error: BaseException) -> UserError | None:
    from app.participant.client import ApiError

    if not isinstance(error, ApiError):
        return None
    if error.status == 401:
        return UserError(
            f"the service refused the API key ({error})",
            "pass the participant's key with --key or FEDLOAD_API_KEY (fedload participants "
            "create prints it once; contracts apply prints new participants' keys)",
        )
    return UserError(f"the service refused the request ({error})")


def _os_error(error: BaseException) -> UserError | None:
    if not isinstance(error, OSError):
        return None
    if error.errno == errno.EADDRINUSE:
        return UserError(f"address already in use ({error.strerror})", "choose another port")
    if isinstance(
        error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    ):
        name = error.filename if error.filename is not None else "file"
        return UserError(f"{name}: {error.strerror}")
    return None


def ensure_free_port(host: str, port: int, option: str) -> None:
    """Fail now, in one line, if HOST:PORT cannot be listened on (port 0: any free one).

    A server that finds its port taken reports it only after its start-up work (the service
    migrates first), and then as a log line and exit status 1.
    """
    if port == 0:
        return
    host = host.strip("[]")  # an IPv6 literal as written in HOST:PORT
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise UserError(f"{option}: cannot resolve host {host!r} ({error.strerror})") from error
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As the servers do: a port in TIME_WAIT after a previous run is free to reuse.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UserError(
                    f"{host}:{port} is already in use by another process",
                    f"stop that process or choose another {option}",
                ) from error
            if error.errno == errno.EADDRNOTAVAIL:
                raise UserError(
                    f"{option}: {host} is not an address of this machine",
                    "use one of its addresses, 127.0.0.1 or 0.0.0.0",
                ) from error
            if error.errno == errno.EACCES:
                raise UserError(
                    f"{option}: port {port} needs privileges on {host}",
                    "choose a port above 1023",
                ) from error
            raise
