"""Checkpoint storage by path or URI: what a move packs from it is what the target installs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from spark_jobs.runtime.checkpoint_store import CheckpointStore
from spark_jobs.runtime.host import pack_directory
from spark_jobs.runtime.transport import PackedCheckpoint

FILES = {
    "offsets/0": b'v1\n{"bucket": 3}',
    "commits/0": b"v1\n{}",
    "state/0/0/1.changelog": bytes(range(256)) * 40,
    "metadata": b'{"id": "q"}',
}


def _write(root: Path) -> None:
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "sources" / "0").mkdir(parents=True)  # an empty directory Spark made


def _read(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("as_uri", [False, True], ids=["path", "file-uri"])
def test_a_checkpoint_packed_from_one_store_installs_unchanged_in_another(
    tmp_path: Path, as_uri: bool
) -> None:
    source_root, target_root = tmp_path / "giver", tmp_path / "taker"
    _write(source_root / "O.x")
    location = (lambda p: p.as_uri()) if as_uri else (lambda p: str(p))
    giver, taker = CheckpointStore(location(source_root)), CheckpointStore(location(target_root))

    taker.unpack("O.x", giver.pack("O.x"))

    assert _read(target_root / "O.x") == FILES
    assert (target_root / "O.x" / "sources" / "0").is_dir()
    assert taker.fragments() == ["O.x"]
    assert taker.location("O.x") == f"{location(target_root)}/O.x"


def test_a_pack_of_the_runtimes_directory_form_installs_too(tmp_path: Path) -> None:
    _write(tmp_path / "dir")
    store = CheckpointStore(tmp_path / "store")
    store.unpack("O.x", pack_directory(tmp_path / "dir"))
    assert _read(tmp_path / "store" / "O.x") == FILES


def test_install_replaces_the_old_checkpoint_and_remove_forgets_it(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "O.x")
    store = CheckpointStore(tmp_path / "b")
    (tmp_path / "b" / "O.x" / "offsets").mkdir(parents=True)
    (tmp_path / "b" / "O.x" / "offsets" / "9").write_bytes(b"stale")
    store.unpack("O.x", CheckpointStore(tmp_path / "a").pack("O.x"))
    assert _read(tmp_path / "b" / "O.x") == FILES
    store.remove("O.x")
    assert not store.exists("O.x") and store.fragments() == []


def test_a_member_escaping_the_checkpoint_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store")
    _write(tmp_path / "store" / "O.x")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        entry = tarfile.TarInfo("../../evil")
        entry.size = 4
        tar.addfile(entry, io.BytesIO(b"evil"))
    with pytest.raises(ValueError, match=r"checkpoint of O.x: member '\.\./\.\./evil' escapes"):
        store.unpack("O.x", PackedCheckpoint.of(buffer.getvalue()))
    assert _read(tmp_path / "store" / "O.x") == FILES
    assert not (tmp_path / "evil").exists()


def test_packing_a_missing_checkpoint_names_it_and_where_it_was_looked_for(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path.as_uri())
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of O\.y at file://.*/O\.y"):
        store.pack("O.y")
    with pytest.raises(ValueError, match="not a fragment name"):
        store.pack("../O.y")
