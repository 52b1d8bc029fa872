"""Per-owner task names (issue 15): the rule alone, without a registry."""

from __future__ import annotations

import pytest

from app.tasks.naming import naming_error


@pytest.mark.parametrize(
    ("name", "owner"),
    [("A.q01", "A"), ("A.q_1-x", "A"), ("north.conns", "north"), ("A.b.q", "A.b")],
)
def test_an_owners_own_names(name: str, owner: str) -> None:
    assert naming_error(name, owner) is None


@pytest.mark.parametrize(
    ("name", "owner", "words"),
    [
        ("B.q01", "A", "must start with 'A.' (e.g. 'A.q01'), got 'B.q01'"),
        ("q01", "A", "must start with 'A.'"),
        ("AB.q01", "A", "must start with 'A.'"),  # a prefix of another name is not the owner
        ("A.", "A", "local part"),
        ("A.b.q", "A", "no '.'"),  # participant "A.b"'s task "q", never A's
        ("A.b.q", "A.b.c", "must start with 'A.b.c.'"),
    ],
)
def test_names_outside_the_owners_namespace(name: str, owner: str, words: str) -> None:
    error = naming_error(name, owner)
    assert error is not None and words in error
