"""Client of the sandboxd agent-execution daemon.

Standard library only. ``Client`` talks to a daemon over TCP (with its
token) or its unix socket; ``Sandbox`` runs actions in one sandbox. API
errors are raised as ``SandboxdError`` subclasses named after the API's
error codes.
"""

from .client import Client, Sandbox
from .errors import (
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    SandboxdError,
    TooLarge,
    Unauthenticated,
    Unavailable,
    Unsupported,
)

__all__ = [
    "Client",
    "Sandbox",
    "SandboxdError",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "Conflict",
    "TooLarge",
    "Unsupported",
    "Unavailable",
    "DeadlineExceeded",
    "Internal",
]
