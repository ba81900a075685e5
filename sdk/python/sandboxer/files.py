"""A sandbox's files: ``sandbox.files`` (docs/api.md, "Files")."""

from __future__ import annotations

import os
import tempfile
from typing import IO, Iterator

from ._http import Response
from ._part import SandboxPart
from ._tar import pack_tree, unpack_stream
from .errors import NotFound
from .models import FileEntry, FileStat, TarResult

_PIECE = 256 * 1024


def _file_pieces(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        piece = f.read(_PIECE)
        if not piece:
            return
        yield piece


class _CountingReader:
    """A file-like view of a response that counts the bytes read."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._response.read(size if size and size > 0 else _PIECE)
        self.count += len(data)
        return data


class Files(SandboxPart):
    """Reads and writes a sandbox's files; paths are absolute guest paths."""

    _route = "files"

    def open(self, path: str) -> Response:
        """The file's bytes as a streamed response (``read()``, ``iter_chunks()``); close it."""
        return self._transport.open("GET", self._base, query={"path": path}, stream_timeout=None)

    def read_bytes(self, path: str) -> bytes:
        """The whole file."""
        with self.open(path) as resp:
            return resp.read_all()

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole file, decoded."""
        return self.read_bytes(path).decode(encoding, errors)

    def download(self, path: str, local: str | os.PathLike[str]) -> int:
        """Copies a guest file to ``local`` in pieces (renamed into place once complete)."""
        local = os.fspath(local)
        directory = os.path.dirname(os.path.abspath(local))
        fd, partial = tempfile.mkstemp(prefix=os.path.basename(local) + ".sbx-partial-", dir=directory)
        count = 0
        try:
            with os.fdopen(fd, "wb") as out, self.open(path) as resp:
                for chunk in resp.iter_chunks(_PIECE):
                    out.write(chunk)
                    count += len(chunk)
            os.replace(partial, local)
        except BaseException:
            os.unlink(partial)
            raise
        return count

    def write(self, path: str, data: bytes | str | IO[bytes], mode: int = 0o644) -> int:
        """Replaces (atomically) or makes a guest file; ``data`` may be a binary file object,
        streamed. Returns the bytes written."""
        body: bytes | Iterator[bytes]
        if isinstance(data, str):
            body = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        else:
            body = _file_pieces(data)
        d = self._transport.call("PUT", self._base, query={"path": path, "mode": format(mode, "o")},
                                 body=body, headers={"Content-Type": "application/octet-stream"})
        return int(d.get("bytes") or 0)

    def upload(self, local: str | os.PathLike[str], path: str, mode: int | None = None) -> int:
        """Copies a local file to the guest, streamed; ``mode`` defaults to the local file's."""
        with open(local, "rb") as f:
            if mode is None:
                mode = os.fstat(f.fileno()).st_mode & 0o7777
            return self.write(path, f, mode=mode)

    def list(self, path: str) -> list[FileEntry]:
        """A directory's entries, sorted by name."""
        d = self._transport.call("GET", self._base + "/list", query={"path": path})
        return [FileEntry(name=e.get("name", ""), type=e.get("type", "other"), size=int(e.get("size") or 0),
                          mode=int(e.get("mode") or 0), mtime=int(e.get("mtime") or 0), raw=e)
                for e in d.get("entries") or []]

    def stat(self, path: str) -> FileStat:
        """A path's type, size, mode, mtime (a symlink is not followed)."""
        s = self._transport.call("GET", self._base + "/stat", query={"path": path})["stat"]
        return FileStat(path=s.get("path", path), type=s.get("type", "other"), size=int(s.get("size") or 0),
                        mode=int(s.get("mode") or 0), mtime=int(s.get("mtime") or 0), uid=s.get("uid"),
                        gid=s.get("gid"), target=s.get("target"), raw=s)

    def exists(self, path: str) -> bool:
        """Whether the path exists (a dangling symlink does)."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str, parents: bool = True, mode: int = 0o755) -> None:
        """Makes a directory (with ``parents``, its parents too, and an existing one is fine)."""
        self._transport.call("POST", self._base + "/mkdir",
                             json_body={"path": path, "parents": parents, "mode": mode},
                             idempotent=parents)

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, a symlink or a directory (non-empty ones need ``recursive``)."""
        self._transport.call("DELETE", self._base, query={"path": path, "recursive": recursive})

    def upload_dir(self, local: str | os.PathLike[str], path: str) -> TarResult:
        """Copies the contents of a local directory into guest ``path`` (made if missing),
        as one tar stream; symlinks go as symlinks."""
        counter = [0]
        if not os.path.isdir(local):
            raise NotADirectoryError(f"not a directory: {os.fspath(local)}")
        d = self._transport.call("PUT", self._base + "/tar", query={"path": path},
                                 body=pack_tree(os.fspath(local), counter),
                                 headers={"Content-Type": "application/x-tar"})
        return TarResult(bytes=int(d.get("bytes") or 0), entries=int(d.get("entries") or counter[0]),
                         skipped=int(d.get("skipped") or 0))

    def download_dir(self, path: str, local: str | os.PathLike[str]) -> TarResult:
        """Copies the contents of guest directory ``path`` into ``local`` (made if missing).

        Refuses (``UnsafeArchive``) an entry that could write outside
        ``local``: an absolute name, ``..``, a symlink that may lead out,
        anything through a symlink.
        """
        with self._transport.open("GET", self._base + "/tar", query={"path": path},
                                  stream_timeout=None) as resp:
            reader = _CountingReader(resp)
            entries, skipped = unpack_stream(reader, os.fspath(local))  # type: ignore[arg-type]
            while reader.read(_PIECE):  # the padding after the end blocks
                pass
            return TarResult(bytes=reader.count, entries=entries, skipped=skipped)
