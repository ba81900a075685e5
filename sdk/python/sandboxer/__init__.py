"""Sandboxer's Python SDK: a client of sbxd's REST API (docs/api.md).

    from sandboxer import Sandbox

    with Sandbox.create(size="small", labels={"owner": "alice"}) as sb:
        print(sb.exec(["python3", "-c", "print(6*7)"], text=True).stdout)
"""

from ._http import Host, RetryPolicy
from ._tar import UnsafeArchive
from ._version import __version__
from .client import Sandboxer, Snapshot
from .desktop import Desktop
from .errors import (AgentUnavailable, AlreadyExists, BadRequest, CapacityExceeded, CommandError, Forbidden,
                     HeadersTooLarge, IdempotencyConflict, InsufficientStorage, InternalError, InvalidArgument,
                     InvalidState, LimitReached, MethodNotAllowed, NoReadyMachine, NotFound, PayloadTooLarge,
                     RateLimited, SandboxerConnectionError, SandboxerError, Unauthorized, Unimplemented)
from .files import Files
from .models import (ApiKey, DesktopInfo, ExecEvent, ExecResult, FileEntry, FileStat, HostedPort, NewKey,
                     OutputChunk, ProcessExit, ProcessOutput, ProcessStatus, StdinWrite, TarResult)
from .process import ExecStream, OutputStream, Process
from .sandbox import Sandbox

__all__ = [
    "__version__", "Sandboxer", "Sandbox", "Snapshot", "Process", "Files", "Desktop", "Host", "RetryPolicy",
    "ExecStream", "OutputStream", "ExecEvent", "ExecResult", "OutputChunk", "ProcessExit", "ProcessOutput",
    "ProcessStatus", "StdinWrite", "FileEntry", "FileStat", "HostedPort", "TarResult", "ApiKey", "NewKey",
    "DesktopInfo", "SandboxerError", "SandboxerConnectionError", "CommandError", "UnsafeArchive",
    "BadRequest", "InvalidArgument", "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed",
    "InvalidState", "IdempotencyConflict", "AlreadyExists", "PayloadTooLarge", "HeadersTooLarge",
    "RateLimited", "LimitReached", "InternalError", "Unimplemented", "NoReadyMachine", "AgentUnavailable",
    "CapacityExceeded", "InsufficientStorage",
]
