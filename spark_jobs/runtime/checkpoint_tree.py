"""A checkpoint directory as a tree of files in memory, and the difference between two trees.

Passive standby ships the primary's checkpoint to its backup every period (issue 5: "checkpoints
shipped to a backup every N seconds, delta where possible"). Spark never rewrites a checkpoint
file: each batch adds new ones (``offsets/N``, ``commits/N``, the state store's version files),
written by atomic rename, and most of a directory is older versions kept for recovery
(``spark.sql.streaming.minBatchesToRetain``, 100 by default). So one period adds a few small
files to hundreds and maintenance removes a few; a ``TreeDelta`` carries those and the names
removed, and the backup applies it to the copy it holds.

Both ends name a tree by its ``digest``: a delta applies only to the copy it was computed
against, and the result is checked whole, so a copy can never drift from the primary's without
the next apply refusing (the sender then ships the whole tree, see ``shipping``).

``pack_tree`` is deterministic (sorted entries, fixed times, owners and modes): the backup's
repacked copy has the same sha256 as the primary's pack of the same tree.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

# Relative POSIX path -> the file's bytes; None for a directory (kept, since a restored checkpoint
# must have the layout Spark left, empty directories included).
Tree = dict[str, bytes | None]

_DELTA_META = "delta.json"
_DELTA_FILES = "files/"
_READ_ATTEMPTS = 3


class DeltaMismatch(ValueError):
    """A delta that does not fit the copy it is applied to, or a result that is not the tree the
    sender had."""


def read_tree(directory: Path) -> Tree:
    """Read a checkpoint directory while its query may be running.

    Entries are read depth first in sorted order, as ``tarfile`` adds them, so ``commits/`` is
    read before ``offsets/`` and ``state/``: every batch committed in the tree has its offsets and
    state files, and an offset logged without its commit is re-run by whoever restores it. A file
    the state store's maintenance removes between listing and reading makes the read start over.
    """
    for attempt in range(_READ_ATTEMPTS):
        try:
            return _read_once(Path(directory))
        except FileNotFoundError:
            if attempt == _READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _read_once(root: Path) -> Tree:
    tree: Tree = {}

    def walk(directory: Path, prefix: str) -> None:
        for entry in sorted(directory.iterdir(), key=lambda p: p.name):
            name = f"{prefix}{entry.name}"
            if entry.is_dir():
                tree[name] = None
                walk(entry, f"{name}/")
            else:
                tree[name] = entry.read_bytes()

    walk(root, "")
    return tree


def digest(tree: Tree) -> str:
    """A tree's identity: names, kinds and contents, independent of how it was packed."""
    h = hashlib.sha256()
    for name in sorted(tree):
        content = tree[name]
        h.update(name.encode())
        if content is None:
            h.update(b"\x00d")
        else:
            h.update(b"\x00f" + len(content).to_bytes(8, "big"))
            h.update(content)
    return h.hexdigest()


def _add(tar: tarfile.TarFile, name: str, content: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if content is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    else:
        info.mode = 0o644
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))


def _tar(entries: list[tuple[str, bytes | None]], *, compress: bool = False) -> bytes:
    buffer = io.BytesIO()
    # A whole pack is plain tar, as pack_directory's: RocksDB's files are compressed already. A
    # delta is gzipped: it is a few small files (offset and commit logs, state changelogs, their
    # .crc siblings), each padded to 512-byte blocks behind a 512-byte header, so mostly zeros
    # (20 kB of tar per shipment in bench/ha's failover run).
    mode: Literal["w:gz", "w"] = "w:gz" if compress else "w"
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        for name, content in entries:
            _add(tar, name, content)
    return buffer.getvalue()


def _untar(data: bytes) -> Tree:
    tree: Tree = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if not name or name == ".":
                continue
            if member.isdir():
                tree[name] = None
            elif member.isfile():
                extracted = tar.extractfile(member)
                tree[name] = extracted.read() if extracted is not None else b""
    return tree


def pack_tree(tree: Tree) -> bytes:
    """The tree as a checkpoint pack (a tar ``unpack_directory`` restores); same tree, same
    bytes."""
    return _tar([(name, tree[name]) for name in sorted(tree)])


def unpack_tree(data: bytes) -> Tree:
    """A pack (``pack_tree``'s or ``pack_directory``'s) as a tree."""
    return _untar(data)


@dataclass(frozen=True)
class TreeDelta:
    """What turns the tree named ``base`` into the tree named ``result``."""

    base: str
    result: str
    changed: Tree
    removed: tuple[str, ...]

    @cached_property
    def encoded(self) -> bytes:
        """The delta on the wire: a tar of the changed entries and a JSON member naming the base,
        the result and the names removed."""
        meta = {"base": self.base, "result": self.result, "removed": list(self.removed)}
        entries: list[tuple[str, bytes | None]] = [(_DELTA_META, json.dumps(meta).encode())]
        entries += [(_DELTA_FILES + name, self.changed[name]) for name in sorted(self.changed)]
        return _tar(entries, compress=True)

    @classmethod
    def decode(cls, data: bytes) -> TreeDelta:
        entries = _untar(data)
        raw = entries.pop(_DELTA_META, None)
        if raw is None:
            raise DeltaMismatch(f"not a checkpoint delta: no {_DELTA_META}")
        meta = json.loads(raw)
        changed = {
            name.removeprefix(_DELTA_FILES): content
            for name, content in entries.items()
            if name.startswith(_DELTA_FILES) and name != _DELTA_FILES.rstrip("/")
        }
        return cls(meta["base"], meta["result"], changed, tuple(meta["removed"]))


def diff(base: Tree, new: Tree) -> TreeDelta:
    changed = {
        name: content for name, content in new.items() if name not in base or base[name] != content
    }
    removed = tuple(sorted(name for name in base if name not in new))
    return TreeDelta(digest(base), digest(new), changed, removed)


def apply(base: Tree, delta: TreeDelta) -> Tree:
    """The tree ``delta`` leads to from ``base``; ``DeltaMismatch`` if ``base`` is not the tree
    the delta was computed against, or the outcome is not the sender's tree."""
    held = digest(base)
    if held != delta.base:
        raise DeltaMismatch(
            f"delta computed against tree {delta.base[:12]}, the copy held here is {held[:12]}"
        )
    result = {name: content for name, content in base.items() if name not in delta.removed}
    result.update(delta.changed)
    if digest(result) != delta.result:
        raise DeltaMismatch(
            f"delta applied to {held[:12]} gives {digest(result)[:12]}, "
            f"the sender's tree is {delta.result[:12]}"
        )
    return result
