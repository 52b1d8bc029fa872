"""The service's data-plane signing key: from settings, generated once outside production."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from app.dataplane.service import SigningKey
from app.dataplane.tokens import public_pem
from app.settings import Settings


def test_generated_once_owner_only_and_shared_by_racing_workers(tmp_path: Path) -> None:
    path = tmp_path / "var" / "dataplane.pem"
    keys: list[str] = []

    def worker() -> None:
        keys.append(public_pem(SigningKey(path, create=True).get().public_key()))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1, "two workers signed with different keys"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["dataplane.pem"]  # no scratch left
    assert public_pem(SigningKey(path, create=True).get().public_key()) == keys[0]


def test_a_missing_key_is_not_made_up_in_production(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SigningKey(tmp_path / "typo.pem", create=False).get()
    assert not (tmp_path / "typo.pem").exists()


def test_a_key_of_another_kind_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ec.pem"
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ValueError, match=r"ec\.pem must be Ed25519"):
        SigningKey(path, create=False).get()


def test_production_names_the_key_file() -> None:
    production = {"environment": "production", "admin_key": "k", "session_secret": "s"}
    with pytest.raises(ValidationError, match="FEDLOAD_DATAPLANE_KEY_FILE is unset"):
        Settings(**production)  # type: ignore[arg-type]
    named = Settings(**production, dataplane_key_file="/etc/fedload/dp.pem")  # type: ignore[arg-type]
    assert named.dataplane_key_path == Path("/etc/fedload/dp.pem")
