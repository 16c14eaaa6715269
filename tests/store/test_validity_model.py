"""A property-based test of relations over time (issue 17) against a simple model, on both
databases: random assertions (with random intervals) and invalidations, each a revision, then
NEIGHBORS for random (``as_of``, ``at_revision``, ``include_invalid``) must answer exactly the
model's facts, through SQL and, at the head, through the networkx view (a traverse).

The model is a list of facts ``(revision, target, valid_from, valid_to)``; what a revision r
holds is each target's last fact with revision <= r; a fact answers at time t when
``valid_from <= t < valid_to`` (None unbounded). It mirrors the code's refusals: an interval
ending before it starts (``valid_to < valid_from``) and an invalidation whose ``valid_to`` (or
now) is earlier than the fact's ``valid_from`` change nothing, nor does invalidating an edge
that does not exist.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.context import OPERATOR, run
from kg.errors import InvalidInput, NotFound
from kg.ops import nodes as node_ops
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.rag.graph import neighbors, walk


def _year(y: int) -> datetime:
    return datetime(y, 1, 1, tzinfo=UTC)


TIMES = st.sampled_from([None, _year(2000), _year(2005), _year(2010), _year(3000)])
AS_OF = st.sampled_from(
    [
        None,
        _year(1999),
        _year(2000),
        _year(2001),
        _year(2005),
        _year(2007),
        _year(2010),
        _year(2999),
        _year(3000),
        _year(3001),
    ]
)
TARGETS = 4
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assert"), st.integers(0, TARGETS - 1), TIMES, TIMES),
        st.tuples(st.just("invalidate"), st.integers(0, TARGETS - 1), TIMES, st.none()),
    ),
    min_size=1,
    max_size=8,
)
_serial = itertools.count()


def _valid(vf: datetime | None, vt: datetime | None, at: datetime | None) -> bool:
    return at is None or ((vf is None or vf <= at) and (vt is None or at < vt))


class Model:
    """Facts by revision: ``(revision, target, valid_from, valid_to)``."""

    def __init__(self) -> None:
        self.facts: list[tuple[int, int, datetime | None, datetime | None]] = []

    def held(self, revision: int) -> dict[int, tuple[datetime | None, datetime | None]]:
        state: dict[int, tuple[datetime | None, datetime | None]] = {}
        for rev, target, vf, vt in self.facts:
            if rev <= revision:
                state[target] = (vf, vt)
        return state

    def answer(self, revision: int, at: datetime | None) -> list[str]:
        return sorted(f"/t{t}" for t, (vf, vt) in self.held(revision).items() if _valid(vf, vt, at))


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, reads=st.lists(st.tuples(st.integers(0, 20), AS_OF, st.booleans()), min_size=1, max_size=6))
def test_neighbors_answer_the_models_facts(services, ops, reads):
    repo = f"v{next(_serial)}"
    run(services, OPERATOR, repo_ops.create_repository, repo)
    run(services, OPERATOR, repo_ops.create_workspace, repo, "w")
    base = 0
    for path in ["/s", *(f"/t{i}" for i in range(TARGETS))]:
        base = run(services, OPERATOR, node_ops.put_node, repo, "main", "w", path, node_type="kg:Node", properties={})[
            0
        ].revision
    model = Model()
    revisions = [base]
    for kind, target, a, b in ops:
        address = f"w:/t{target}"
        if kind == "assert":
            vf, vt = a, b
            if vf is not None and vt is not None and vt < vf:
                try:
                    run(
                        services,
                        OPERATOR,
                        relation_ops.relate,
                        repo,
                        "main",
                        "w:/s",
                        address,
                        "r",
                        valid_from=vf,
                        valid_to=vt,
                    )
                except InvalidInput:
                    continue
                raise AssertionError("an interval ending before it starts was accepted")
            done, _ = run(
                services, OPERATOR, relation_ops.relate, repo, "main", "w:/s", address, "r", valid_from=vf, valid_to=vt
            )
            model.facts.append((done.revision, target, vf, vt))
            revisions.append(done.revision)
            continue
        held = model.held(revisions[-1]).get(target)
        now = datetime.now(UTC)
        if held is None:
            try:
                run(services, OPERATOR, relation_ops.invalidate, repo, "main", "w:/s", address, "r", valid_to=a)
            except NotFound:
                continue
            raise AssertionError("invalidating a relation that does not exist was accepted")
        vf, _ = held
        end = a or now
        if vf is not None and end < vf:
            try:
                run(services, OPERATOR, relation_ops.invalidate, repo, "main", "w:/s", address, "r", valid_to=a)
            except InvalidInput:
                continue
            raise AssertionError("an invalidation before the relation's valid_from was accepted")
        done = run(services, OPERATOR, relation_ops.invalidate, repo, "main", "w:/s", address, "r", valid_to=a)
        stored_end = datetime.fromisoformat(done.valid_to)
        assert a is None or stored_end == a
        model.facts.append((done.revision, target, vf, stored_end))
        revisions.append(done.revision)
    head = revisions[-1]
    for pick, as_of, include_invalid in reads:
        at_revision = revisions[pick % len(revisions)]
        at = None if include_invalid else (as_of or datetime.now(UTC))
        expected = model.answer(at_revision, at)
        got = neighbors(
            services,
            OPERATOR,
            repo,
            "main",
            "w:/s",
            direction="OUT",
            at_revision=at_revision,
            as_of=as_of,
            include_invalid=include_invalid,
        )
        assert [n["path"] for n in got["neighbors"]] == expected, (at_revision, as_of, include_invalid)
        # the head through the networkx view (a traverse builds it), then NEIGHBORS on it
        walked = walk(
            services,
            OPERATOR,
            repo,
            "main",
            ["w:/s"],
            hops=1,
            direction="OUT",
            as_of=as_of,
            include_invalid=include_invalid,
        )
        assert sorted(n["path"] for n in walked["nodes"][1:]) == model.answer(head, at)
        on_view = neighbors(
            services, OPERATOR, repo, "main", "w:/s", direction="OUT", as_of=as_of, include_invalid=include_invalid
        )
        assert [n["path"] for n in on_view["neighbors"]] == model.answer(head, at)
