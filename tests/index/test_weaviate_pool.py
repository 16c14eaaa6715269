"""kg.index.weaviate.ClientPool: the RAG node's Weaviate connections, reused across requests.

Real clients against the Weaviate test server (tests/weaviate_server.py) or KG_TEST_WEAVIATE_URL.
"""

from __future__ import annotations

import threading

import pytest

import kg.index.weaviate.client as kw  # where ClientPool looks connect up
from kg.errors import BackendUnavailable, UpstreamUnavailable
from kg.index.weaviate import ClientPool


@pytest.fixture
def connects(monkeypatch):
    """Count real connects made through the pool."""
    made = []
    real = kw.connect

    def counting(*args, **kwargs):
        client = real(*args, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(kw, "connect", counting)
    return made


def test_one_client_per_url_key_and_timeout_reused_across_leases(weaviate_url, connects):
    pool = ClientPool()
    try:
        with pool.lease(weaviate_url) as a:
            assert a.is_ready()
        with pool.lease(weaviate_url) as b:
            assert b is a
        with pool.lease(weaviate_url, timeout_s=7.0) as c:
            assert c is not a
        assert len(connects) == 2 and len(pool) == 2
    finally:
        pool.close()
    assert not a.is_connected() and not c.is_connected()
    assert len(pool) == 0


def test_the_least_recently_used_idle_client_is_closed_beyond_the_limit(weaviate_url, connects):
    pool = ClientPool(max_clients=1)
    try:
        with pool.lease(weaviate_url, timeout_s=1.0) as first:
            pass
        with pool.lease(weaviate_url, timeout_s=2.0) as second:
            assert not first.is_connected()  # evicted and idle: closed
        assert second.is_connected() and len(pool) == 1
    finally:
        pool.close()


def test_a_client_in_use_is_closed_only_when_its_request_ends(weaviate_url, connects):
    pool = ClientPool(max_clients=1)
    try:
        with pool.lease(weaviate_url, timeout_s=1.0) as held:
            with pool.lease(weaviate_url, timeout_s=2.0):
                assert held.is_connected() and held.is_ready()  # evicted, but still in use
            assert held.is_connected()
        assert not held.is_connected()
    finally:
        pool.close()


def test_a_failed_request_retires_its_client_and_the_next_reconnects(weaviate_url, connects):
    pool = ClientPool()
    try:
        with pytest.raises(UpstreamUnavailable):
            with pool.lease(weaviate_url, error=UpstreamUnavailable) as broken:
                raise UpstreamUnavailable("the server went away")
        assert not broken.is_connected() and len(pool) == 0
        with pool.lease(weaviate_url, error=UpstreamUnavailable) as fresh:
            assert fresh is not broken and fresh.is_ready()
        # Other errors (bad input, conflicts) keep the client.
        with pytest.raises(ValueError):
            with pool.lease(weaviate_url, error=UpstreamUnavailable) as kept:
                raise ValueError("not a connection problem")
        assert kept is fresh and kept.is_connected()
    finally:
        pool.close()


def test_an_unreachable_url_is_the_callers_error_and_is_not_pooled():
    pool = ClientPool()
    with pytest.raises(UpstreamUnavailable):
        with pool.lease("http://127.0.0.1:9?grpc_port=7", init_timeout_s=1.0, error=UpstreamUnavailable):
            pass
    with pytest.raises(BackendUnavailable):
        with pool.lease("http://127.0.0.1:9?grpc_port=7", init_timeout_s=1.0):
            pass
    assert len(pool) == 0


def test_concurrent_first_leases_keep_one_client(weaviate_url, connects):
    pool = ClientPool()
    got, barrier = [], threading.Barrier(4)

    def lease():
        barrier.wait()
        with pool.lease(weaviate_url) as client:
            got.append(client)

    threads = [threading.Thread(target=lease) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        kept = [c for c in connects if c.is_connected()]
        assert len(pool) == 1 and len(kept) == 1  # losers of the race closed their own
        with pool.lease(weaviate_url) as again:
            assert again is kept[0]
    finally:
        pool.close()
