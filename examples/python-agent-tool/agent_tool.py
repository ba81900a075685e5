#!/usr/bin/env python3
"""An agent's code tool with one sandbox per conversation.

Shows: ``run_in_sandbox(conversation_id, code)``, the function you hand
an LLM agent as its "run Python" tool. The conversation's sandbox is
found by its label ``conversation=<id>`` (``Sandboxer.find``) or created
with it, so state (files, installed packages) carries over between the
turns of one conversation while other conversations get their own VM.
The demo: two calls in one conversation (the second sees the file the
first wrote), one in another (a fresh sandbox without it), then the
clean-up by label (``Sandboxer.delete_where``).

Run: SBX_HOST=unix:/run/sandboxer/sbxd.sock python3 agent_tool.py
With SANDBOXER_EXAMPLE_SANDBOX=<id>, every conversation maps to that
existing sandbox (nothing is created or deleted, and the "fresh sandbox"
check is skipped); SANDBOXER_EXAMPLE_USER=<user> runs the code as that user.
Exits non-zero on any wrong result.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid

try:
    import sandboxer
except ImportError:  # not installed: the SDK from this tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import sandboxer

from sandboxer import Sandbox, Sandboxer

client = Sandboxer()  # SBX_HOST and SBX_API_KEY, as the CLI takes them
EXISTING = os.environ.get("SANDBOXER_EXAMPLE_SANDBOX") or None
USER = os.environ.get("SANDBOXER_EXAMPLE_USER") or None  # None: the image's default user (`user`, or root in slim)
WORKDIR = "/tmp/agent-work"  # the tool's working directory in the sandbox

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _sandbox_for(conversation_id: str) -> Sandbox:
    """The conversation's sandbox: found by label, woken if stopped, or created."""
    if EXISTING:
        return client.get(EXISTING)
    labels = {"conversation": conversation_id}
    sb = client.find(labels=labels, state=["running", "paused", "stopped", "crashed"])
    if sb is not None:
        if sb.state in ("stopped", "crashed"):  # a paused one wakes by itself at the exec
            sb.resume()
        return sb
    # One vCPU and 1 GiB are plenty for an agent's snippets (and leave room
    # for a sandbox per conversation); paused when idle, stopped after an hour.
    sb = client.create(cpus=1, memory_mib=1024, labels={**labels, "example": "python-agent-tool"},
                       ttl="1h", idle_minutes=10)
    sb.files.mkdir(WORKDIR)
    return sb


def run_in_sandbox(conversation_id: str, code: str, timeout: float = 60) -> str:
    """Runs Python 3 ``code`` in the conversation's sandbox; returns its output.

    The text an agent gets back: stdout, then stderr, then ``[exit N]``
    when it failed. Files written under the working directory stay for the
    conversation's next call.
    """
    # One lookup-or-create at a time per conversation in this process, so
    # that two parallel first calls do not make two sandboxes.
    with _locks_guard:
        lock = _locks.setdefault(conversation_id, threading.Lock())
    with lock:
        sb = _sandbox_for(conversation_id)
    r = sb.exec(["python3", "-c", code], cwd=WORKDIR, user=USER, timeout=timeout, text=True)
    out = r.stdout + r.stderr
    if r.timed_out:
        out += f"[timed out after {timeout:g}s]\n"
    elif r.exit_code != 0:
        out += f"[exit {r.exit_code if r.exit_code is not None else 'signal %s' % r.signal}]\n"
    return out


def cleanup(conversation_ids: list[str]) -> None:
    """Deletes the conversations' sandboxes (by label: nothing to remember)."""
    for cid in conversation_ids:
        gone = client.delete_where(labels={"conversation": cid})
        print(f"deleted {gone.get('deleted')} for conversation {cid}")


def main() -> int:
    global WORKDIR
    run = uuid.uuid4().hex[:8]  # unique per run: leftovers of an earlier run are not found
    alice, bob = f"alice-{run}", f"bob-{run}"
    failures: list[str] = []

    def check(what: str, ok: bool) -> None:
        print(("ok:   " if ok else "FAIL: ") + what)
        if not ok:
            failures.append(what)

    if EXISTING:  # a shared sandbox: a working directory of our own in it
        WORKDIR = f"/tmp/agent-work-{run}"
        client.get(EXISTING).files.mkdir(WORKDIR)
    try:
        write = "open('notes.txt', 'w').write('remember: 42\\n'); print('wrote notes.txt')"
        read = ("import os\n"
                "print(open('notes.txt').read().strip() if os.path.exists('notes.txt') else 'no notes.txt')")

        out1 = run_in_sandbox(alice, write)
        print(f"[{alice}] call 1 -> {out1!r}")
        check("first call ran", out1 == "wrote notes.txt\n")

        out2 = run_in_sandbox(alice, read)
        print(f"[{alice}] call 2 -> {out2!r}")
        check("second call of the same conversation sees its file (sandbox reused)", out2 == "remember: 42\n")

        if EXISTING:
            print(f"skip: fresh-sandbox check (every conversation maps to {EXISTING})")
        else:
            out3 = run_in_sandbox(bob, read)
            print(f"[{bob}] call 1 -> {out3!r}")
            check("another conversation gets a fresh sandbox without the file", out3 == "no notes.txt\n")
            a = client.find(labels={"conversation": alice})
            b = client.find(labels={"conversation": bob})
            check("one sandbox per conversation", a is not None and b is not None and a.id != b.id)

        err = run_in_sandbox(alice, "raise SystemExit('bad input')")
        print(f"[{alice}] failing call -> {err!r}")
        check("a failing call reports its stderr and exit code", err == "bad input\n[exit 1]\n")
    finally:
        if EXISTING:
            client.get(EXISTING).files.remove(WORKDIR, recursive=True)
        else:
            cleanup([alice, bob])
    if failures:
        print(f"FAIL: {len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
