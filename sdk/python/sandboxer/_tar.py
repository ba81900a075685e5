"""Tar streams for tree uploads and downloads, packed and unpacked safely.

Packing yields the archive in pieces (a big file is never held whole).
Unpacking follows the agent's rules (guest-agent/files/tree_extractor.cpp):
no absolute names or ``..``, nothing written through or below a symlink,
no symlink that may lead out of the target, no hard link to outside it;
a file replaces a non-directory at its name and never writes through it.
"""

from __future__ import annotations

import os
import stat
import tarfile
from typing import IO, Iterator

from .errors import SandboxerError

_BLOCK = 512
_PIECE = 256 * 1024


class UnsafeArchive(SandboxerError):
    """A downloaded archive with an entry that could write outside its target."""

    code = "unsafe_archive"
    status = 0


def _pad(size: int) -> bytes:
    rest = size % _BLOCK
    return b"\0" * (_BLOCK - rest) if rest else b""


def pack_tree(root: str, counter: list[int] | None = None) -> Iterator[bytes]:
    """The contents of local directory ``root`` as a PAX tar, in pieces.

    Directories, regular files and symlinks (never followed); other
    types are left out. ``counter[0]`` counts the entries.
    """
    if not os.path.isdir(root):
        raise NotADirectoryError(root)

    def header(info: tarfile.TarInfo) -> bytes:
        return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")

    def walk(rel: str) -> Iterator[bytes]:
        full = os.path.join(root, rel) if rel else root
        for name in sorted(os.listdir(full)):
            path = os.path.join(full, name)
            arc = f"{rel}/{name}" if rel else name
            st = os.lstat(path)
            info = tarfile.TarInfo(arc)
            info.mode = stat.S_IMODE(st.st_mode)
            info.mtime = int(st.st_mtime)
            info.uid, info.gid = 0, 0
            if stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                yield header(info)
            elif stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                info.name = arc + "/"
                yield header(info)
                if counter is not None:
                    counter[0] += 1
                yield from walk(arc)
                continue
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    yield header(info)
                    left = info.size
                    while left > 0:  # exactly the size announced, whatever happens to the file
                        piece = f.read(min(_PIECE, left))
                        if not piece:
                            piece = b"\0" * min(_PIECE, left)
                        yield piece
                        left -= len(piece)
                    yield _pad(info.size)
            else:
                continue
            if counter is not None:
                counter[0] += 1

    yield from walk("")
    yield b"\0" * (_BLOCK * 2)


def _parts(name: str) -> list[str]:
    if not name or name.startswith("/") or "\0" in name:
        raise UnsafeArchive(f"entry {name!r}: an absolute or empty name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeArchive(f"entry {name!r}: a name with a '..' component")
    return parts


def check_symlink_target(depth: int, target: str, name: str) -> None:
    """Refuses a symlink at ``depth`` (0: in the root) whose target may lead out."""
    if not target or "\0" in target:
        raise UnsafeArchive(f"entry {name!r}: an empty symlink target")
    if target.startswith("/"):
        raise UnsafeArchive(f"entry {name!r}: a symlink to an absolute path ({target})")
    descended = False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            descended = True
        elif descended or depth == 0:
            raise UnsafeArchive(f"entry {name!r}: a symlink that may lead outside the target ({target})")
        else:
            depth -= 1


class _Extractor:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.dirs: list[tuple[str, int, int]] = []
        self.entries = 0

    def parent_dir(self, parts: list[str], name: str, create: bool = True) -> str:
        """The entry's parent directory, made if missing, through no symlink."""
        path = self.root
        for part in parts[:-1]:
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    raise UnsafeArchive(f"entry {name!r}: {path!r} is missing") from None
                os.mkdir(path, 0o755)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeArchive(f"entry {name!r}: {path!r} is a symlink or not a directory")
        return path

    def clear(self, path: str, name: str) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeArchive(f"entry {name!r}: a directory is in the way")
        os.unlink(path)

    def extract(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bool:
        parts = _parts(member.name)
        if not parts:
            return False  # "./": the root itself
        parent = self.parent_dir(parts, member.name)
        path = os.path.join(parent, parts[-1])
        mode = member.mode & 0o777
        if member.isdir():
            try:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    self.clear(path, member.name)
                    os.mkdir(path, 0o700)
            except FileNotFoundError:
                os.mkdir(path, 0o700)
            self.dirs.append((path, mode, int(member.mtime)))
        elif member.isreg():
            self.clear(path, member.name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                src = tar.extractfile(member)
                assert src is not None
                while True:
                    piece = src.read(_PIECE)
                    if not piece:
                        break
                    out.write(piece)
            os.chmod(path, mode)
            os.utime(path, (member.mtime, member.mtime))
        elif member.issym():
            check_symlink_target(len(parts) - 1, member.linkname, member.name)
            self.clear(path, member.name)
            os.symlink(member.linkname, path)
        elif member.islnk():
            src_parts = _parts(member.linkname)
            if not src_parts:
                raise UnsafeArchive(f"entry {member.name!r}: a hard link to the root")
            source = os.path.join(self.parent_dir(src_parts, member.name, create=False), src_parts[-1])
            if os.path.islink(source) or not os.path.isfile(source):
                raise UnsafeArchive(f"entry {member.name!r}: a hard link to {member.linkname!r}, not a file here")
            self.clear(path, member.name)
            os.link(source, path, follow_symlinks=False)
        else:
            return False  # devices, fifos: never created
        self.entries += 1
        return True

    def finish(self) -> None:
        for path, mode, mtime in reversed(self.dirs):
            os.chmod(path, mode)
            os.utime(path, (mtime, mtime))


def unpack_stream(fileobj: IO[bytes], root: str) -> tuple[int, int]:
    """Extracts a tar read from ``fileobj`` into ``root``; (entries, skipped)."""
    os.makedirs(root, exist_ok=True)
    extractor = _Extractor(root)
    skipped = 0
    try:
        with tarfile.open(fileobj=fileobj, mode="r|", encoding="utf-8", errors="surrogateescape") as tar:
            for member in tar:
                if not extractor.extract(tar, member):
                    skipped += 1
    except tarfile.TarError as e:
        raise SandboxerError(f"a malformed archive: {e}", code="bad_archive") from e
    finally:
        extractor.finish()
    return extractor.entries, skipped
