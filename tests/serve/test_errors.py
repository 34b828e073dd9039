"""An instance's error reaches the client with the instance's status, OpenAI type and code."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.errors import (
    BadRequestError,
    ContextLengthError,
    InstanceFailedError,
    ModelNotFoundError,
    NoCapacityError,
    PayloadTooLargeError,
    ServeError,
    error_body,
    from_response,
)
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry


def _raw(message: str, error_type: str, code: str | None = None) -> bytes:
    return json.dumps(error_body(message, error_type, code)).encode()


@pytest.mark.parametrize(
    ("status", "error_type", "code", "kind"),
    [
        (400, "invalid_request_error", None, BadRequestError),
        (400, "invalid_request_error", "context_length_exceeded", ContextLengthError),
        (401, "authentication_error", "invalid_api_key", ServeError),
        (403, "permission_error", None, ServeError),
        (404, "invalid_request_error", "model_not_found", ModelNotFoundError),
        (409, "conflict_error", None, ServeError),
        (413, "invalid_request_error", None, PayloadTooLargeError),
        (422, "invalid_request_error", "unprocessable", ServeError),
        (429, "rate_limit_exceeded", "slo_rejected", ServeError),
        (502, "upstream_error", None, InstanceFailedError),
        (503, "service_unavailable", None, NoCapacityError),
        (504, "timeout", None, InstanceFailedError),
    ],
)
def test_status_type_and_code_are_kept(
    status: int, error_type: str, code: str | None, kind: type[ServeError]
) -> None:
    err = from_response(status, _raw("it went wrong", error_type, code))
    assert type(err) is kind
    assert err.status_code == status
    assert err.body() == error_body("it went wrong", error_type, code)


def test_a_bad_request_with_a_custom_type_is_still_a_bad_request() -> None:
    err = from_response(400, _raw("bad", "custom_error", "x"))
    assert isinstance(err, BadRequestError)
    assert (err.status_code, err.error_type, err.code) == (400, "custom_error", "x")
    # the class defaults are untouched by an instance's answer
    assert (BadRequestError.status_code, BadRequestError.error_type) == (
        400,
        "invalid_request_error",
    )


@pytest.mark.parametrize("status", [500, 501, 507, 599, 302, 200])
def test_an_instance_that_broke_is_a_bad_gateway(status: int) -> None:
    err = from_response(status, _raw("boom", "server_error"))
    assert type(err) is InstanceFailedError
    assert err.status_code == 502
    assert err.body()["error"]["type"] == "upstream_error"
    assert str(status) in str(err) and "boom" in str(err)


@pytest.mark.parametrize("raw", [b"<html>gateway</html>", b"", b"[1]", b'{"error": 5}'])
def test_a_body_that_is_not_openai_json_keeps_the_status_and_the_class_type(raw: bytes) -> None:
    err = from_response(404, raw)
    assert type(err) is ModelNotFoundError and err.status_code == 404
    assert err.body()["error"]["type"] == "invalid_request_error"
    assert str(err) == raw.decode()
    other = from_response(418, raw)
    assert (other.status_code, other.error_type) == (418, "server_error")


def test_a_long_raw_body_is_cut() -> None:
    assert len(str(from_response(400, b"x" * 10_000))) == 200


def _runtime(handler: httpx.MockTransport) -> tuple[RouterRuntime, HttpInstanceClient]:
    deployment = default_deployment()
    client = HttpInstanceClient(transport=handler)
    registry = Registry(deployment, client)
    for inst in registry.instances.values():
        inst.is_healthy = True
        inst.info = p.InstanceInfo.model_construct(name=inst.name)
    return RouterRuntime(deployment, registry, RouterMetrics(), client), client


def test_the_router_passes_an_instance_error_on_unchanged() -> None:
    """flow -> from_response: a 422 with its own type and code is not flattened to 400."""
    body = error_body("token id out of range", "invalid_request_error", "bad_token")

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/tokenize"
        return httpx.Response(422, json=body)

    rt, client = _runtime(httpx.MockTransport(answer))

    async def call() -> None:
        async with client:
            await rt.prompts.encode("hello")

    with pytest.raises(ServeError) as caught:
        asyncio.run(call())
    assert caught.value.status_code == 422
    assert caught.value.body() == body
