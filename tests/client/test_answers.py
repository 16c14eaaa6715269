"""How the client reads answers it cannot get from a healthy server on demand: a 503
``overloaded`` with ``Retry-After`` (sent again), a 503 without it (raised at once), a body that
is not kg's error shape; and the client over an app in the same process (an injected transport,
an injected ``httpx.Client``), on both databases."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.errors import error_response
from kg.client import AsyncClient, Client
from kg.client.calls import error_of
from kg.errors import (
    ERROR_CLASSES,
    BackendUnavailable,
    KGError,
    NotFound,
    Overloaded,
    RateLimited,
    error_body,
)
from kg.services import Services
from kg.types import Health, Repo

HEALTH = {"status": "ok", "version": "0"}


def scripted(*answers: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that gives ``answers`` in turn and records the requests."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1]
    return httpx.MockTransport(handler), sent


def overloaded(retry_after: str) -> httpx.Response:
    return httpx.Response(503, json=error_body("overloaded", "too many bodies held"),
                          headers={"Retry-After": retry_after})


def test_a_503_overloaded_is_sent_again_after_retry_after() -> None:
    transport, sent = scripted(overloaded("2"), overloaded("1"), httpx.Response(200, json=HEALTH))
    waits: list[float] = []
    with Client("http://kg.test", transport=transport, sleep=waits.append) as kg:
        assert kg.health() == Health(status="ok", version="0")
    assert waits == [2.0, 1.0] and len(sent) == 3


def test_retries_are_bounded_and_the_last_answer_is_raised() -> None:
    transport, sent = scripted(overloaded("3"), overloaded("4"), httpx.Response(200, json=HEALTH))
    waits: list[float] = []
    with Client("http://kg.test", transport=transport, sleep=waits.append, max_retries=1) as kg:
        with pytest.raises(Overloaded) as refused:
            kg.health()
    assert waits == [3.0] and len(sent) == 2 and refused.value.retry_after_s == 4.0


def test_a_503_without_retry_after_is_raised_at_once() -> None:
    transport, sent = scripted(httpx.Response(503, json=error_body("backend_unavailable", "db down", {"db": "pg"})))
    waits: list[float] = []
    with Client("http://kg.test", transport=transport, sleep=waits.append) as kg:
        with pytest.raises(BackendUnavailable) as refused:
            kg.health()
    assert waits == [] and len(sent) == 1 and refused.value.details == {"db": "pg"}


def test_an_answer_that_is_not_the_error_shape_is_a_kg_error_naming_the_status() -> None:
    transport, _ = scripted(httpx.Response(502, text="<html>Bad Gateway</html>"))
    with Client("http://kg.test", transport=transport) as kg:
        with pytest.raises(KGError) as refused:
            kg.health()
    assert type(refused.value) is KGError and refused.value.code == "http_error"
    assert refused.value.details == {"status": 502} and "Bad Gateway" in refused.value.message


def test_the_sync_client_over_an_injected_http_client(services: Services) -> None:
    with TestClient(create_app(services=services)) as http:
        kg = Client("http://testserver", http=http)
        assert isinstance(kg.create_repo("acme"), Repo)
        assert kg.get_repo("acme").name == "acme"
        with pytest.raises(NotFound):
            kg.get_repo("nowhere")
        kg.close()  # not the injected client's connections
        assert kg.list_repos().repos[0].name == "acme"


@pytest.mark.anyio
async def test_the_async_client_over_an_asgi_transport(services: Services) -> None:
    app = create_app(services=services)
    async with AsyncClient("http://testserver", transport=httpx.ASGITransport(app=app)) as kg:
        assert (await kg.create_repo("acme")).name == "acme"
        assert [r.name async for r in kg.iter_repos(limit=1)] == ["acme"]
        with pytest.raises(NotFound):
            await kg.get_repo("nowhere")


@pytest.mark.parametrize("cls", sorted(ERROR_CLASSES.values(), key=lambda c: c.code), ids=lambda c: c.code)
def test_every_error_the_api_answers_comes_back_as_its_class(cls: type[KGError]) -> None:
    """The round trip of each class of kg.errors: the API's answer (api/errors.py), read by the client."""
    sent = cls("what went wrong", details={"field": "x"})
    answer = error_response(sent)
    response = httpx.Response(answer.status_code, content=bytes(answer.body), headers=dict(answer.headers))
    back = error_of(response)
    assert (type(back), back.code, back.message, back.details) == (cls, cls.code, "what went wrong", {"field": "x"})
    if isinstance(back, (RateLimited, Overloaded)):
        assert back.retry_after_s == 1.0


def test_the_registry_holds_every_class_of_kg_errors_once() -> None:
    import inspect

    import kg.errors

    classes = {c for _, c in inspect.getmembers(kg.errors, inspect.isclass) if issubclass(c, KGError)}
    assert set(ERROR_CLASSES.values()) == classes and len(ERROR_CLASSES) == len(classes) == 17
