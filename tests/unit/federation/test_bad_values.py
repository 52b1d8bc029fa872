"""Values a federation file cannot carry into the registry: each is a FederationFileError
naming the file, the field and what is wrong, never a traceback from further in."""

from __future__ import annotations

import pytest

from app.federation.document import FederationFileError, parse_federation

GOOD = (
    "federation: x\n"
    "participants:\n"
    "  - {name: A, capacity: 100}\n"
    "  - {name: B, capacity: 100}\n"
    "contracts:\n"
    "  - {between: [A, B], price_min: 0.5, price_max: 1.0}\n"
    "tasks:\n"
    "  - {name: A.q, owner: A, load: 5}\n"
)


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def _alias_bomb(levels: int) -> str:
    # Each level names the one before ten times: 10**levels leaves from a few hundred bytes.
    lines = ["federation: x", 'a0: &a0 ["lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    lines += [
        "participants:",
        f"  - {{name: A, capacity: 100, profile: {{x: *a{levels}}}}}",
    ]
    return "\n".join(lines) + "\n"


CASES = [
    # (case, document, field, words)
    ("price NaN", _with("price_max: 1.0", "price_max: .nan"), "contracts[0].price_max", "finite"),
    (
        "price Infinity",
        _with("price_max: 1.0", "price_max: .inf"),
        "contracts[0].price_max",
        "finite",
    ),
    (
        "price 1e309",
        _with("price_max: 1.0", "price_max: 1.0e+309"),
        "contracts[0].price_max",
        "finite",
    ),
    ("load -inf", _with("load: 5", "load: -.inf"), "tasks[0].load", "finite"),
    (
        "capacity false",
        _with("name: A, capacity: 100", "name: A, capacity: false"),
        "participants[0].capacity",
        "not of type",
    ),
    ("NUL in a name", _with("name: A.q,", 'name: "A.\\0q",'), "tasks[0].name", "NUL"),
    ("newline in a name", _with("name: A.q,", 'name: "A.\\nq",'), "tasks[0].name", "U+000A"),
    (
        "NUL in a profile",
        _with("name: B, capacity: 100", 'name: B, capacity: 100, profile: {x: "\\0"}'),
        "participants[1].profile.x",
        "NUL",
    ),
    (
        "NaN deep in a profile",
        _with("name: B, capacity: 100", "name: B, capacity: 100, profile: {x: [1, .nan]}"),
        "participants[1].profile.x[1]",
        "finite",
    ),
    (
        "a 300-character name",
        _with("name: A.q,", f"name: {'q' * 300},"),
        "tasks[0].name",
        "longer than",
    ),
    (
        "a 100 kB profile",
        _with(
            "name: B, capacity: 100", "name: B, capacity: 100, profile: {x: " + "y" * 100_000 + "}"
        ),
        "participants[1].profile",
        "bytes as JSON",
    ),
    (
        "end 9999-12-31 with an offset",
        _with("price_max: 1.0}", "price_max: 1.0, ends_at: '9999-12-31T23:00:00-05:00'}"),
        "contracts[0].ends_at",
        "between 1900-01-01 and 9998-12-31",
    ),
    (
        "start 0001-01-01+14:00",
        _with("price_max: 1.0}", "price_max: 1.0, starts_at: '0001-01-01T00:00:00+14:00'}"),
        "contracts[0].starts_at",
        "between 1900-01-01 and 9998-12-31",
    ),
    ("alias bomb", _alias_bomb(6), "(document)", "aliases"),
]


@pytest.mark.parametrize(("case", "text", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_names_the_file_and_field(case: str, text: str, field: str, words: str) -> None:
    with pytest.raises(FederationFileError) as info:
        parse_federation(text, source="fed.yaml")
    assert info.value.source == "fed.yaml"
    assert info.value.field == field, str(info.value)
    assert words in info.value.detail, str(info.value)


def test_the_alias_bomb_is_small_and_refused_before_it_expands() -> None:
    text = _alias_bomb(6)
    assert len(text) < 600  # a million leaves if it were expanded
    with pytest.raises(FederationFileError, match="more than 100000 values"):
        parse_federation(text)


def test_a_modest_alias_still_works() -> None:
    text = GOOD.replace("federation: x\n", "federation: x\nshared: &p {region: eu}\n")
    text = text.replace("name: A, capacity: 100}", "name: A, capacity: 100, profile: *p}")
    with pytest.raises(FederationFileError) as info:  # 'shared' is not a key of the schema
        parse_federation(text)
    assert info.value.field == "shared"


def test_a_file_over_a_megabyte_is_refused() -> None:
    with pytest.raises(FederationFileError, match="characters; at most"):
        parse_federation(GOOD + "#" * (1024 * 1024))


def test_the_good_document_parses() -> None:
    doc = parse_federation(GOOD)
    assert [c.price_max for c in doc.contracts] == [1.0]
