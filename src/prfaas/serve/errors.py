"""The one exception tree of the serve boundary, mapped to HTTP status in one place.

    ServeError                      (500 server_error)
    ├── DeploymentError             bad deployment file or flags (CLI: one line, exit 2)
    ├── IncompatibleInstanceError   an instance hashes blocks differently (kept out)
    ├── BadRequestError             400 invalid_request_error
    │   └── ContextLengthError      400 (code context_length_exceeded)
    ├── ModelNotFoundError          404
    ├── PayloadTooLargeError        413
    ├── NoCapacityError             503 (scheduler rejection, no live instance)
    └── InstanceFailedError         502 (an instance died or broke off mid-request)

Instances raise the same types; the router re-raises an instance's 4xx as the same status.
`error_body` is OpenAI's error JSON: {"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

from typing import Any


class ServeError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.error_type, self.code)


class DeploymentError(ServeError):
    pass


class IncompatibleInstanceError(ServeError):
    """An instance whose cache identity differs from the index's (pain point 7)."""


class BadRequestError(ServeError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthError(BadRequestError):
    code = "context_length_exceeded"


class ModelNotFoundError(ServeError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLargeError(ServeError):
    status_code = 413
    error_type = "invalid_request_error"


class NoCapacityError(ServeError):
    status_code = 503
    error_type = "service_unavailable"


class InstanceFailedError(ServeError):
    status_code = 502
    error_type = "upstream_error"


def error_body(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def from_status(status_code: int, message: str) -> ServeError:
    """An instance's error response, as the exception the router raises in turn."""
    if status_code == 413:
        return PayloadTooLargeError(message)
    if 400 <= status_code < 500:
        return BadRequestError(message)
    return InstanceFailedError(message)
