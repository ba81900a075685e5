"""Packing and the safe unpacking of tree archives (no server)."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
import unittest

from sandboxer import UnsafeArchive
from sandboxer._tar import pack_tree, unpack_stream


def archive(*entries: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A tar of (type, name, data-or-link-target) entries: type file, dir, sym, hard, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, value in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = value if isinstance(value, bytes) else value.encode()
                info.size = len(data)
                info.mode = 0o640
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("sym", "hard"):
                info.linkname = str(value)
            tar.addfile(info)
    buf.seek(0)
    return buf


class UnpackTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        self.root = os.path.join(self.tmp, "root")

    def test_plain_tree(self) -> None:
        entries, skipped = unpack_stream(archive(
            ("dir", "src/", b""), ("file", "src/a.txt", "hello"), ("sym", "run", "src/a.txt"),
            ("sym", "src/up", "../run"), ("hard", "copy", "src/a.txt"), ("fifo", "pipe", b"")), self.root)
        self.assertEqual((entries, skipped), (5, 1))
        with open(os.path.join(self.root, "run")) as f:
            self.assertEqual(f.read(), "hello")
        self.assertEqual(os.readlink(os.path.join(self.root, "src/up")), "../run")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.root, "src/a.txt")).st_mode), 0o640)
        self.assertFalse(os.path.exists(os.path.join(self.root, "pipe")))

    def refused(self, *entries: tuple[str, str, bytes | str]) -> None:
        with self.assertRaises(UnsafeArchive):
            unpack_stream(archive(*entries), self.root)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "evil")))

    def test_absolute_name(self) -> None:
        self.refused(("file", "/" + os.path.join(self.tmp, "evil"), "x"))

    def test_dotdot(self) -> None:
        self.refused(("file", "../evil", "x"))
        self.refused(("file", "a/../../evil", "x"))

    def test_symlink_escaping(self) -> None:
        self.refused(("sym", "esc", ".."))
        self.refused(("sym", "esc", "/etc"))
        self.refused(("sym", "d/esc", "../../evil"))
        self.refused(("sym", "esc", "a/../../evil"))

    def test_through_symlink(self) -> None:
        self.refused(("sym", "link", "sub"), ("dir", "sub", b""), ("file", "link/evil", "x"))
        os.makedirs(self.root, exist_ok=True)
        os.symlink(self.tmp, os.path.join(self.root, "out"))
        self.refused(("file", "out/evil", "x"))

    def test_file_replaces_symlink_not_through(self) -> None:
        os.makedirs(self.root)
        target = os.path.join(self.tmp, "evil")
        os.symlink(target, os.path.join(self.root, "f"))
        unpack_stream(archive(("file", "f", "safe")), self.root)
        self.assertFalse(os.path.exists(target))
        self.assertFalse(os.path.islink(os.path.join(self.root, "f")))

    def test_hard_link_outside(self) -> None:
        self.refused(("hard", "h", "../evil"))
        self.refused(("hard", "h", "/etc/passwd"))


class PackTest(unittest.TestCase):
    def test_round_trip(self) -> None:
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "a/b"))
        os.makedirs(os.path.join(src, "empty"))
        big = os.urandom(700 * 1024 + 3)
        with open(os.path.join(src, "a/b/big.bin"), "wb") as f:
            f.write(big)
        with open(os.path.join(src, "x.sh"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(src, "x.sh"), 0o755)
        os.symlink("a/b/big.bin", os.path.join(src, "link"))
        os.mkfifo(os.path.join(src, "fifo"))
        counter = [0]
        pieces = list(pack_tree(src, counter))
        self.assertGreater(len(pieces), 3)
        self.assertLessEqual(max(len(p) for p in pieces), 256 * 1024)
        self.assertEqual(counter[0], 6)
        out = os.path.join(tmp, "out")
        entries, skipped = unpack_stream(io.BytesIO(b"".join(pieces)), out)
        self.assertEqual((entries, skipped), (6, 0))
        with open(os.path.join(out, "a/b/big.bin"), "rb") as f:
            self.assertEqual(f.read(), big)
        self.assertEqual(os.readlink(os.path.join(out, "link")), "a/b/big.bin")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(out, "x.sh")).st_mode), 0o755)
        self.assertTrue(os.path.isdir(os.path.join(out, "empty")))


if __name__ == "__main__":
    unittest.main()
