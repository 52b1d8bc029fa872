"""Where a host's fragment checkpoints live: a local path or a URI, through pyarrow's file systems.

In local mode the driver writes every checkpoint file, so its own disk is enough. On a cluster
the executors write the state store's files, each on its own machine: the checkpoint location
must be storage every executor and the driver share (HDFS, S3, a shared mount; on one machine, a
shared local directory). The same storage is then read to pack a checkpoint for a move and
written to install one, so this module reads and writes it through ``pyarrow.fs`` and hands
Spark the matching location string.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

import pyarrow.fs as pafs

from spark_jobs.runtime.transport import PackedCheckpoint


class CheckpointStore:
    def __init__(self, location: str | Path) -> None:
        """``location``: a directory path, or a URI pyarrow knows (``file://``, ``hdfs://``,
        ``s3://``...). It is created if missing."""
        text = str(location)
        if "://" in text:
            self.fs, self.root = pafs.FileSystem.from_uri(text)
            self._prefix = text.rstrip("/")
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(text).absolute())
            self._prefix = self.root
        self.root = self.root.rstrip("/") or "/"
        self.fs.create_dir(self.root, recursive=True)

    @property
    def local_root(self) -> Path | None:
        """The root as a local path when the storage is the local file system."""
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def location(self, fragment: str) -> str:
        """The fragment's checkpoint location as Spark should be given it."""
        return f"{self._prefix}/{fragment}"

    def _path(self, fragment: str) -> str:
        if not fragment or "/" in fragment or fragment in (".", ".."):
            raise ValueError(f"not a fragment name for a checkpoint directory: {fragment!r}")
        return posixpath.join(self.root, fragment)

    def exists(self, fragment: str) -> bool:
        return self.fs.get_file_info(self._path(fragment)).type == pafs.FileType.Directory

    def fragments(self) -> list[str]:
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        return sorted(
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory
        )

    def remove(self, fragment: str) -> None:
        if self.exists(fragment):
            self.fs.delete_dir(self._path(fragment))

    def pack(self, fragment: str) -> PackedCheckpoint:
        """The fragment's checkpoint as one plain tar (RocksDB's files are compressed already)."""
        base = self._path(fragment)
        if not self.exists(fragment):
            raise FileNotFoundError(f"no checkpoint of {fragment} at {self.location(fragment)}")
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for info in sorted(infos, key=lambda i: i.path):
                name = "./" + posixpath.relpath(info.path, base)
                entry = tarfile.TarInfo(name)
                if info.type == pafs.FileType.Directory:
                    entry.type, entry.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(entry)
                elif info.type == pafs.FileType.File:
                    with self.fs.open_input_stream(info.path) as stream:
                        data = stream.read()
                    entry.size, entry.mode = len(data), 0o644
                    tar.addfile(entry, io.BytesIO(data))
        return PackedCheckpoint.of(buffer.getvalue())

    def unpack(self, fragment: str, packed: PackedCheckpoint) -> None:
        """Replace the fragment's checkpoint with ``packed`` (a tar of ``pack``'s form, or of
        ``pack_directory``'s)."""
        base = self._path(fragment)
        with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r") as tar:
            members = tar.getmembers()
            # Every member is checked before anything is touched: a bad pack changes nothing.
            for member in members:
                relative = posixpath.normpath(member.name)
                if relative.startswith("..") or posixpath.isabs(relative):
                    raise ValueError(f"checkpoint of {fragment}: member {member.name!r} escapes it")
                if not (member.isdir() or member.isfile()):
                    raise ValueError(
                        f"checkpoint of {fragment}: member {member.name!r} is no file or directory"
                    )
            self.remove(fragment)
            self.fs.create_dir(base, recursive=True)
            for member in members:
                relative = posixpath.normpath(member.name)
                target = posixpath.join(base, relative) if relative != "." else base
                if member.isdir():
                    self.fs.create_dir(target, recursive=True)
                    continue
                source = tar.extractfile(member)
                assert source is not None
                self.fs.create_dir(posixpath.dirname(target), recursive=True)
                with self.fs.open_output_stream(target) as out:
                    out.write(source.read())
