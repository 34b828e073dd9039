"""The one exception tree of the serve boundary, mapped to HTTP status in one place.

    ServeError                      (500 server_error)
    ├── DeploymentError             bad deployment file or flags (CLI: one line, exit 2)
    ├── IncompatibleInstanceError   an instance hashes blocks differently (kept out)
    ├── BadRequestError             400 invalid_request_error
    │   ├── ContextLengthError      400 (code context_length_exceeded)
    │   └── UnsupportedVerbError    400 (code unsupported_by_backend: a verb the instance's
    │                                   backend declares it lacks, `InstanceInfo.capabilities`)
    ├── AuthenticationError         401 (an instance's control call not validly signed)
    ├── ModelNotFoundError          404
    ├── NotFoundError               404 (admin: no such instance)
    ├── PayloadTooLargeError        413
    ├── UnsupportedMediaTypeError   415 (a request body that is not JSON)
    ├── RequestTimeoutError         408 (a body not sent within router.body_timeout_s)
    ├── ConflictError               409 (an admin request the current state forbids)
    │   └── StaleEpochError         409 (code stale_epoch: a slow-loop action under an old lease)
    ├── NoCapacityError             503 (scheduler rejection, no live instance)
    └── InstanceFailedError         502 (an instance died or broke off mid-request)

Instances raise the same types. The router passes an instance's error on faithfully
(`from_response`): every 4xx, 502, 503 and 504 keeps its status, OpenAI `type` and `code`, as
the most specific class above (so `except BadRequestError` still works); any other 5xx (the
instance itself broke: 500, 501, ...) becomes 502 `upstream_error`, since the router did not.

    instance says                                       router answers
    400 invalid_request_error / context_length_exceeded 400 ContextLengthError, same type, code
    404 invalid_request_error / model_not_found         404 ModelNotFoundError
    409 conflict_error (no class of its own)            409 ServeError, same type
    503 service_unavailable                             503 NoCapacityError
    500 server_error                                    502 InstanceFailedError (upstream_error)

`error_body` is OpenAI's error JSON: {"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

import json
from typing import Any


class ServeError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field at fault, when there is one (OpenAI's `param`)

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.error_type, self.code, self.param)


class DeploymentError(ServeError):
    """One or more problems of a deployment file or flags (`problems`: one line each)."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class IncompatibleInstanceError(ServeError):
    """An instance whose cache identity differs from the index's (such a mismatch would
    otherwise fail silently: Dynamo PRs #1233, #2981)."""


class BadRequestError(ServeError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthError(BadRequestError):
    code = "context_length_exceeded"


class UnsupportedVerbError(BadRequestError):
    """A call for a verb this instance's backend does not have (its `/info` capabilities say
    so): the caller's mistake, answered before the backend is asked."""

    code = "unsupported_by_backend"


class AuthenticationError(ServeError):
    """A control call an instance does not take (serve.auth.control): unsigned, signed for
    another instance, stale, replayed or altered."""

    status_code = 401
    error_type = "authentication_error"


class ModelNotFoundError(ServeError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class NotFoundError(ServeError):
    """An admin request naming something the deployment does not have."""

    status_code = 404
    error_type = "invalid_request_error"


class PayloadTooLargeError(ServeError):
    status_code = 413
    error_type = "invalid_request_error"


class UnsupportedMediaTypeError(ServeError):
    status_code = 415
    error_type = "invalid_request_error"


class RequestTimeoutError(ServeError):
    """The client did not send its request body within `router.body_timeout_s`."""

    status_code = 408
    error_type = "invalid_request_error"


class ConflictError(ServeError):
    """An admin request that the deployment's current state forbids (e.g. a flip mid-drain)."""

    status_code = 409
    error_type = "conflict_error"


class StaleEpochError(ConflictError):
    """A slow-loop action under an epoch older than the lease the instance granted
    (fencing: `serve.instance.lease`)."""

    code = "stale_epoch"


class NoCapacityError(ServeError):
    status_code = 503
    error_type = "service_unavailable"


class KvBufferFullError(NoCapacityError):
    """The decode instance's KV receive buffer had no room for the prompt's KV (the transfer
    layer's `out_of_space`): the instance is full for now, not broken."""

    code = "kv_buffer_full"


class InstanceFailedError(ServeError):
    status_code = 502
    error_type = "upstream_error"


def error_body(
    message: str, error_type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


#: Statuses an instance's answer keeps at the router, with the class that carries them.
_KEPT: dict[int, type[ServeError]] = {
    400: BadRequestError,
    404: ModelNotFoundError,
    413: PayloadTooLargeError,
    502: InstanceFailedError,
    503: NoCapacityError,
    504: InstanceFailedError,
}
MAX_RAW_MESSAGE_CHARS = 200


def from_response(status_code: int, raw: bytes) -> ServeError:
    """An instance's error response (`raw`: its body), as the exception the router raises in
    turn: the same status, OpenAI type and code (see the table in the module docstring)."""
    message, error_type, code, param = _parse_error(raw)
    if 400 <= status_code < 500 or status_code in _KEPT:
        kind = _KEPT.get(status_code, ServeError)
        if kind is BadRequestError and code == ContextLengthError.code:
            kind = ContextLengthError
        err = kind(message, param=param)
        err.status_code = status_code
        err.error_type = error_type or kind.error_type
        err.code = code if error_type is not None else kind.code
        return err
    return InstanceFailedError(f"instance error {status_code}: {message}")


def _parse_error(raw: bytes) -> tuple[str, str | None, str | None, str | None]:
    """(message, type, code, param) of an OpenAI error body; the raw text otherwise."""
    try:
        error = json.loads(raw)["error"]
        message, error_type, code = error["message"], error["type"], error.get("code")
        param = error.get("param")
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:MAX_RAW_MESSAGE_CHARS], None, None, None
    if not isinstance(error_type, str) or not error_type:
        error_type = None
    code = code if isinstance(code, str) else None
    return str(message), error_type, code, param if isinstance(param, str) else None
