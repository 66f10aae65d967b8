"""API errors, one class per code of the API's error model."""

from typing import Dict, Optional, Type


class SandboxdError(Exception):
    """An error answer of the daemon: ``code`` (the API's), ``message``
    (one sentence) and ``status`` (HTTP)."""

    code = "internal"

    def __init__(self, message: str, code: Optional[str] = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        return "%s: %s" % (self.code, self.message)


class InvalidArgument(SandboxdError):
    code = "invalid_argument"


class Unauthenticated(SandboxdError):
    code = "unauthenticated"


class PermissionDenied(SandboxdError):
    code = "permission_denied"


class NotFound(SandboxdError):
    code = "not_found"


class Conflict(SandboxdError):
    code = "conflict"


class TooLarge(SandboxdError):
    code = "too_large"


class Unsupported(SandboxdError):
    code = "unsupported"


class Unavailable(SandboxdError):
    code = "unavailable"


class DeadlineExceeded(SandboxdError):
    code = "deadline_exceeded"


class Internal(SandboxdError):
    code = "internal"


_BY_CODE: Dict[str, Type[SandboxdError]] = {
    c.code: c
    for c in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        Conflict,
        TooLarge,
        Unsupported,
        Unavailable,
        DeadlineExceeded,
        Internal,
    )
}

_BY_STATUS: Dict[int, Type[SandboxdError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    408: DeadlineExceeded,
    409: Conflict,
    413: TooLarge,
    429: Unavailable,
    431: TooLarge,
    501: Unsupported,
    503: Unavailable,
    504: DeadlineExceeded,
}


def from_answer(status: int, code: Optional[str], message: str) -> SandboxdError:
    """The exception for an error answer: by its code, else by its status."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, SandboxdError)
    return cls(message, code=code or cls.code, status=status)
