#!/usr/bin/python3
"""TEST ONLY: a stand-in for sbx-vmm (and, for blk, QEMU) for the unit tests
of sbx-bench's blk and vsock workloads (test_run_virtio.py), run as `--vmm
sbx=THIS` or `qemu=THIS`. It takes the flags those workloads give either
VMM and plays bench/virtio_guest.sh without a VM, as its kernel command
line's sbxbench.* words ask:

- blk: checks its disk (sbx-vmm `--disk PATH[,backing=on]`, QEMU `-drive
  file=PATH,format=F,...`): a qcow2 overlay needs backing=on (sbx-vmm) or
  format=qcow2 (QEMU), as the real ones; writes a block at its start;
  prints the device lines and sbx-blkbench's result lines: seq write 200,
  seq read 400 MB/s, 2000 IOPS (8.19 MB/s) on a raw disk, half on qcow2;
- vsock (sbx-vmm `--vsock cid=N,uds=PATH`): sends sbxbench.vsock_bytes
  zeros to PATH_5002, then serves the hybrid socket PATH (`CONNECT 1236` ->
  `OK ...`) after printing SBX-VSOCK-LISTENING: 1236, reading until the
  host closes;
- then `SBX-RUN-EXIT: N` and exit 0, as after the guest's reboot.

FAKE_VIRTIO_FAIL=STEP (seqwrite, seqread, randread, vsock) makes that step
fail as the guest script reports it.
"""

import os
import socket
import sys
import time

STEPS = ("seqwrite", "seqread", "randread")


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def guest_words(cmdline):
    return {w.split("=", 1)[0][len("sbxbench."):]: w.split("=", 1)[1]
            for w in (cmdline or "").split() if w.startswith("sbxbench.") and "=" in w}


def disk_of(argv):
    """(path, qcow2 allowed by the flags) of the disk, or None."""
    if "--disk" in argv:
        path, _, options = flag(argv, "--disk").partition(",")
        return path, "backing=on" in options.split(",")
    drive = flag(argv, "-drive")
    if drive:
        fields = dict(part.split("=", 1) for part in drive.split(",") if "=" in part)
        return fields["file"], fields.get("format") == "qcow2"
    return None


def blk(argv, words, fail):
    disk = disk_of(argv)
    if disk is None:
        say("SBX-BENCH-FAIL: blk: no /dev/vda (no virtio-blk device the kernel drives)")
        return 1
    path, qcow2_ok = disk
    with open(path, "r+b") as f:
        qcow2 = f.read(4) == b"QFI\xfb"
        if qcow2 and not qcow2_ok:
            sys.stderr.write(f"fake-vmm: error: {path}: a qcow2 image with a backing file needs backing=on\n")
            sys.exit(1)
        if not qcow2:
            f.seek(0)
            f.write(b"\x5e" * 4096)
    say("SBX-BENCH-QUEUE: max_sectors_kb=1280 max_hw_sectors_kb=1280 max_segments=254 "
        "max_segment_size=4294967295 nr_requests=256 scheduler=none")
    say("SBX-BENCH-FEATURES: 0x0002 0110001001100000000000000000000010000000000000000000000000000000")
    scale = 0.5 if qcow2 else 1.0
    mib = int(words.get("blk_mib", "128"))
    failed = 0
    for step, (mb_s, bs) in zip(STEPS, ((200.0, 1 << 20), (400.0, 1 << 20), (8.192, 4096))):
        if fail == step:
            say(f"SBX-BENCH-FAIL: {step}")
            failed += 1
            continue
        rate = mb_s * scale
        nbytes = mib << 20 if bs == 1 << 20 else int(rate * 1e6 * int(words.get("rand_s", "10")))
        say(f"SBX-BENCH: blk-{step} bs={bs} ops={nbytes // bs} bytes={nbytes} seconds={nbytes / 1e6 / rate:.6f} "
            f"MBps={rate:.2f} iops={rate * 1e6 / bs:.1f}")
    return failed


def vsock(argv, words, fail):
    spec = flag(argv, "--vsock")
    if not spec:
        say("SBX-BENCH-FAIL: vsock g2h")
        return 1
    uds = dict(part.split("=", 1) for part in spec.split(","))["uds"]
    nbytes = int(words.get("vsock_bytes", "1048576"))
    say("SBX-BENCH-STEP: vsock-g2h")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(f"{uds}_5002")
        if fail == "vsock":
            s.sendall(bytes(nbytes // 2))
            say("SBX-BENCH-FAIL: vsock g2h")
            return 1
        s.sendall(bytes(nbytes))
    say("SBX-BENCH-STEP: vsock-h2g")
    if os.path.exists(uds):
        os.unlink(uds)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(uds)
        server.listen(1)
        say("SBX-VSOCK-LISTENING: 1236")
        server.settimeout(30)
        conn, _ = server.accept()
        with conn:
            line = b""
            while not line.endswith(b"\n"):
                line += conn.recv(1)
            if line != b"CONNECT 1236\n":
                say(f"SBX-BENCH-FAIL: vsock h2g: {line!r}")
                return 1
            conn.sendall(b"OK 1073741824\n")
            got = 0
            while chunk := conn.recv(1 << 16):
                got += len(chunk)
        say(f"SBX-VSOCK-REPORT: sent=0 received={got} seconds=0.1")
    os.unlink(uds)
    return 0 if got == nbytes else 1


def main():
    argv = sys.argv[1:]
    if "--version" in argv or argv == ["version"]:
        print("sbx-vmm 0.0.0-fake-virtio")
        return 0
    cmdline = flag(argv, "--cmdline") or flag(argv, "-append")
    words = guest_words(cmdline)
    steps = words.get("steps", "blk,vsock").split(",")
    fail = os.environ.get("FAKE_VIRTIO_FAIL", "")
    sys.stderr.write("sbx-vmm: info: VM set up in 2.000 ms; starting 1 vCPU(s)\n")
    time.sleep(0.01)
    say("SBX-BOOTED")
    failed = 0
    if "blk" in steps:
        failed += blk(argv, words, fail)
    if "vsock" in steps:
        failed += vsock(argv, words, fail)
    say(f"SBX-RUN-EXIT: {failed}")
    sys.stderr.write("sbx-vmm: info: exit: reboot (guest reset)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
