"""The token bucket of expensive calls (kg/ratelimit.py), on a fake clock: exact figures."""

from __future__ import annotations

import pytest

from kg.ratelimit import RateLimiter


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_new_identity_starts_full_and_the_call_past_the_burst_waits_one_refill(clock):
    limiter = RateLimiter(per_min=3, burst=2, clock=clock)  # one token every 20 s
    assert limiter.remaining("a") == 2.0
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == 20.0
    assert limiter.remaining("a") == 0.0  # a refused call is not charged


def test_refill_is_proportional_to_the_time_elapsed_and_capped_at_the_burst(clock):
    limiter = RateLimiter(per_min=3, burst=2, clock=clock)
    limiter.take("a")
    limiter.take("a")
    clock.advance(7)  # 7 s x 3/60 a second = 0.35 token
    assert limiter.remaining("a") == pytest.approx(0.35)
    assert limiter.take("a") == pytest.approx(13.0)  # 0.65 token left to wait for, at 0.05 a second
    clock.advance(13)
    assert limiter.take("a") == 0.0
    assert limiter.remaining("a") == pytest.approx(0.0, abs=1e-12)
    clock.advance(3600)  # an hour idle refills to the burst, not beyond
    assert limiter.remaining("a") == 2.0
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 20.0]


def test_identities_have_buckets_of_their_own(clock):
    limiter = RateLimiter(per_min=60, burst=1, clock=clock)
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == 1.0
    assert limiter.take("b") == 0.0
    assert limiter.take("b") == 1.0


def test_a_cost_above_one_waits_for_the_whole_cost(clock):
    limiter = RateLimiter(per_min=6, burst=5, clock=clock)  # one token every 10 s
    assert limiter.take("a", cost=4) == 0.0
    assert limiter.take("a", cost=3) == 20.0  # holds 1, needs 2 more
    assert limiter.remaining("a") == 1.0


def test_per_min_zero_turns_the_limit_off(clock):
    limiter = RateLimiter(per_min=0, burst=1, clock=clock)
    assert not limiter.enabled
    assert all(limiter.take("a") == 0.0 for _ in range(1000))


def test_a_clock_reading_earlier_than_the_last_neither_refills_nor_drains(clock):
    limiter = RateLimiter(per_min=60, burst=1, clock=clock)
    limiter.take("a")
    clock.advance(-30)
    assert limiter.take("a") == 1.0
    clock.advance(31)
    assert limiter.take("a") == 0.0


@pytest.mark.parametrize(("per_min", "burst"), [(-1, 1), (1, 0)])
def test_bad_figures_are_refused(per_min, burst):
    with pytest.raises(ValueError):
        RateLimiter(per_min=per_min, burst=burst)


def test_full_buckets_are_pruned_once_many_exist(clock, monkeypatch):
    monkeypatch.setattr("kg.ratelimit.PRUNE_AT", 4)
    limiter = RateLimiter(per_min=60, burst=2, clock=clock)
    for name in "abcd":
        limiter.take(name)
    clock.advance(0.5)
    limiter.take("a")  # a: 1 + 0.5 - 1 = 0.5
    clock.advance(0.6)  # b, c, d are full again (1 + 1.1, capped at 2); a holds 1.1
    limiter.take("e")
    assert set(limiter._buckets) == {"a", "e"}
    assert limiter.remaining("a") == pytest.approx(1.1)
    assert limiter.remaining("b") == 2.0
