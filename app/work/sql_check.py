"""A SQL fragment checked against its inputs' schemas, without Spark. Pure: no ORM, no web.

The registry parses the query with sqlglot's Spark dialect and checks what it can before
anything is stored: one SELECT (no DDL or DML), reading only the task's inputs by their local
names (task ``A.readings`` is the view ``readings``), naming only columns those inputs have.
It then infers the output columns where sqlglot knows every name and type; where it does not
(an unaliased expression, a function whose type it cannot tell) the output schema is left to
the owner's agent, which analyses the query with Spark and reports the schema Spark found
(``PUT /v1/tasks/{name}/analysis``). A guessed type would be worse than none: a downstream
fragment would be checked against it.

Spark's ``window(ts, '1 day')`` is a function call, but sqlglot reads the keyword ``window``
as the start of a WINDOW clause in GROUP BY; the text is rewritten at the token level first
(calls become ``fedload_window(...)``, the column Spark names ``window`` is quoted), and a
window is typed as Spark types it, ``struct<start:timestamp,end:timestamp>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokens import TokenType

from app.work.errors import FragmentError
from app.work.spec import STIME, StreamSchema, parse_ddl

WINDOW_FUNCTION = "fedload_window"
# The column a windowed aggregation groups by, as Spark types it.
WINDOW_TYPE = "struct<start:timestamp,end:timestamp>"
_WHERE = ("sql",)
_UNRESOLVED = (
    re.compile(r"Column '(?P<column>[^']+)' could not be resolved for table: '(?P<table>[^']+)'"),
    re.compile(r"Column '(?P<column>[^']+)' could not be resolved"),
    re.compile(r"Unknown column: (?P<column>\S+)"),
)


@dataclass(frozen=True)
class SqlAnalysis:
    """What the registry learnt of a query: the inputs it reads and, when every output
    column's name and type is known, the schema of its output (without ``stime``)."""

    tables: tuple[str, ...]
    output: StreamSchema | None


def check_sql(sql: str, inputs: Mapping[str, StreamSchema | None]) -> SqlAnalysis:
    """Check ``sql`` against ``inputs`` (local name -> the input stream's schema; None: not
    known yet, its columns are left to Spark at the owner's agent). Raises
    :class:`FragmentError` at ``sql`` naming the table or column that is wrong."""
    try:
        return _checked(sql, inputs)
    except RecursionError as exc:
        # sqlglot parses and walks recursively: thousands of nested parentheses exhaust it.
        raise FragmentError("the query nests too deeply to check", _WHERE) from exc


def _checked(sql: str, inputs: Mapping[str, StreamSchema | None]) -> SqlAnalysis:
    tree = _parse(sql)
    tables = _check_tables(tree, inputs)
    known = {name: schema for name, schema in inputs.items() if schema is not None}
    if any(inputs.get(t) is None for t in tables):
        # An input whose columns the registry has not seen yet: nothing to qualify against.
        return SqlAnalysis(tables, None)
    windowed = any(_is_window(node) for node in tree.find_all(exp.Anonymous))
    mapping: dict[str, object] = {
        name: _sqlglot_columns(schema, windowed) for name, schema in known.items()
    }
    _check_window_fields(tree, windowed, known)
    _name_windows(tree)
    try:
        qualified = qualify(
            tree,
            schema=mapping,
            dialect="spark",
            validate_qualify_columns=True,
            quote_identifiers=True,
        )
    except OptimizeError as exc:
        raise _column_error(str(exc), tree, known, tables, windowed) from exc
    except SqlglotError as exc:
        raise FragmentError(f"cannot check the query: {_first_line(exc)}", _WHERE) from exc
    return SqlAnalysis(tables, _output(qualified, mapping))


def _parse(sql: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(rewrite_window(sql), read="spark") if s]
    except SqlglotError as exc:
        raise FragmentError(
            f"the query does not parse as Spark SQL: {_first_line(exc)}", _WHERE
        ) from exc
    if len(statements) != 1:
        raise FragmentError(
            f"a fragment is one SELECT statement, got {len(statements)} statements", _WHERE
        )
    tree = statements[0]
    if isinstance(tree, exp.Alias | exp.Condition):
        # A bare expression: what a misspelt keyword (SELEC x) parses as.
        raise FragmentError(
            f"the query does not parse as Spark SQL: expected SELECT, got {sql.strip()[:40]!r}",
            _WHERE,
        )
    if not isinstance(tree, exp.Query):
        statement = sql.split(None, 1)[0].upper()
        raise FragmentError(f"a fragment is a SELECT query, not {statement}", _WHERE)
    return tree


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def rewrite_window(sql: str) -> str:
    """``window(`` -> ``fedload_window(``, a bare ``window`` column -> ```window```; other
    uses of the keyword (a WINDOW clause) stay as written."""
    try:
        tokens = sqlglot.Dialect.get_or_raise("spark").tokenize(sql)
    except SqlglotError as exc:
        raise FragmentError(
            f"the query does not parse as Spark SQL: {_first_line(exc)}", _WHERE
        ) from exc
    out: list[str] = []
    last = 0
    for i, token in enumerate(tokens):
        if token.token_type != TokenType.WINDOW:
            continue
        following = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        if following == TokenType.L_PAREN:
            replacement = WINDOW_FUNCTION
        elif following in (
            None,
            TokenType.DOT,
            TokenType.COMMA,
            TokenType.R_PAREN,
            TokenType.FROM,
            TokenType.SEMICOLON,
        ):
            replacement = "`window`"
        else:
            continue
        out += [sql[last : token.start], replacement]
        last = token.end + 1
    out.append(sql[last:])
    return "".join(out)


# The name spark_jobs.fragments.sql imported first; the same function.
_rewrite_window = rewrite_window


def _is_window(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() == WINDOW_FUNCTION


def _name_windows(tree: exp.Expr) -> None:
    """An unaliased ``window(...)`` in a SELECT list is the column ``window``, as in Spark."""
    for select in tree.find_all(exp.Select):
        select.set(
            "expressions",
            [
                exp.alias_(e, "window", quoted=True) if _is_window(e) else e
                for e in select.expressions
            ],
        )


def _check_tables(tree: exp.Expr, inputs: Mapping[str, object]) -> tuple[str, ...]:
    named_queries = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    by_lower = {name.lower(): name for name in inputs}
    found: list[str] = []
    for table in tree.find_all(exp.Table):
        if not table.name:
            raise FragmentError("a fragment reads its inputs by name; this FROM names none", _WHERE)
        if table.args.get("db") is not None:
            raise FragmentError(
                f"a fragment reads its inputs by their local names: write {table.name!r}, "
                f"not {table.sql('spark')!r}",
                _WHERE,
            )
        lowered = table.name.lower()
        if lowered in named_queries:
            continue
        if lowered not in by_lower:
            known = ", ".join(sorted(inputs)) or "none"
            raise FragmentError(
                f"unknown table {table.name!r}: a fragment reads only its inputs ({known})",
                _WHERE,
            )
        if by_lower[lowered] not in found:
            found.append(by_lower[lowered])
    if not found:
        raise FragmentError("the query reads none of the task's inputs", _WHERE)
    return tuple(found)


def _sqlglot_columns(schema: StreamSchema, windowed: bool) -> dict[str, str]:
    # sqlglot's Spark dialect reads Spark's DDL type spellings as they are.
    columns = {c.name: c.type for c in schema.columns}
    if windowed and schema.get("window") is None:
        # Grouping by window(...) makes the column ``window`` (window.start, window.end).
        columns["window"] = WINDOW_TYPE
    return columns


def _check_window_fields(
    tree: exp.Expr, windowed: bool, inputs: Mapping[str, StreamSchema]
) -> None:
    """``window.<field>``: a window has ``start`` and ``end`` (sqlglot leaves an unknown field
    of a struct untyped rather than wrong). An input with a ``window`` column of its own is
    Spark's to check."""
    if not windowed or any(schema.get("window") is not None for schema in inputs.values()):
        return
    aliases = {t.alias_or_name.lower() for t in tree.find_all(exp.Table)}
    for column in tree.find_all(exp.Column):
        field = column.name.lower()
        outside = field not in ("start", "end")
        if column.table.lower() == "window" and "window" not in aliases and outside:
            raise FragmentError(
                f"unknown column 'window.{column.name}': a window has start and end", _WHERE
            )


def _column_error(
    message: str,
    tree: exp.Expr,
    inputs: Mapping[str, StreamSchema],
    tables: tuple[str, ...],
    windowed: bool,
) -> FragmentError:
    for pattern in _UNRESOLVED:
        match = pattern.search(message)
        if match is None:
            continue
        column = match.group("column").strip('`"')
        named = match.groupdict().get("table")
        where = _aliased(tree, named.strip('`"')) if named else None
        if named and where is None and named.strip('`"').lower() == "window" and not windowed:
            return FragmentError(
                f"unknown column 'window' in {' or '.join(tables)} "
                f"({_columns_of(list(tables), inputs)}); group by window(<time>, '<size>') "
                "to make one",
                _WHERE,
            )
        if named and where is None:
            return FragmentError(f"unknown table or alias {named!r} (in {named}.{column})", _WHERE)
        looked = [where] if where is not None else list(tables)
        return FragmentError(
            f"unknown column {column!r} in {' or '.join(looked)} ({_columns_of(looked, inputs)})",
            _WHERE,
        )
    return FragmentError(f"cannot check the query: {message.splitlines()[0]}", _WHERE)


def _aliased(tree: exp.Expr, alias: str) -> str | None:
    """The input a table alias (or the table's own name) stands for."""
    for table in tree.find_all(exp.Table):
        if alias.lower() in (table.alias_or_name.lower(), table.name.lower()):
            return table.name
    return None


def _columns_of(tables: list[str], inputs: Mapping[str, StreamSchema]) -> str:
    by_lower = {name.lower(): schema for name, schema in inputs.items()}

    def listed(table: str) -> str:
        schema = by_lower.get(table.lower())
        # stime is every log's own column; the declared ones are what the user wrote.
        names = [] if schema is None else [n for n in schema.names if n != STIME]
        return ", ".join(names) or "no columns"

    if len(tables) == 1:
        return f"it has {listed(tables[0])}"
    return "; ".join(f"{t} has {listed(t)}" for t in tables)


def _output(qualified: exp.Expr, mapping: dict[str, object]) -> StreamSchema | None:
    """The output columns when every name and type is known, else None (Spark's to say)."""
    assert isinstance(qualified, exp.Query)
    for node in qualified.find_all(exp.Anonymous):
        if _is_window(node):
            node.type = exp.DataType.build(WINDOW_TYPE, dialect="spark")
    try:
        annotated = annotate_types(
            qualified, schema=mapping, dialect="spark", overwrite_types=False
        )
    except (SqlglotError, TypeError):
        return None
    assert isinstance(annotated, exp.Query)
    parts: list[str] = []
    for column in annotated.selects:
        name = column.alias_or_name
        if not name or re.fullmatch(r"_col_\d+", name) or column.type is None:
            # sqlglot's own name for an unaliased expression is not Spark's.
            return None
        if column.type.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
            return None
        parts.append(f"`{name.replace('`', '``')}` {column.type.sql('spark')}")
    try:
        return parse_ddl(", ".join(parts), _WHERE)
    except FragmentError:
        return None
