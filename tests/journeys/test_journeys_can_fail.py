"""The journeys can fail: each story, run against a merge that does other than its dry run said
(while answering the dry run's ``applied``) or an indexer that finishes a text's job without
storing its passages, fails on the check meant to catch it. SQLite only: the checks are the
helper's, not the database's."""

from __future__ import annotations

import dataclasses

import pytest

from kg.indexing import indexer
from kg.store import history
from kg.store.nodes import node_uid
from tests.journeys.test_agent_answers import (
    test_an_agents_answers_reach_main_as_reviewed_and_a_second_session_finds_them as agent_answers,
)
from tests.journeys.test_entities import test_extracted_entities_reach_main_as_reviewed as entities
from tests.journeys.test_research import test_the_research_assistants_branch_merged_as_reviewed as research
from tests.journeys.test_two_agents import test_two_agents_merged_in_turn_main_ends_as_the_reviewer_saw as two_agents

STORIES = {"agent_answers": agent_answers, "two_agents": two_agents, "research": research, "entities": entities}


def _drop_a_relation(plan):
    plan.relation_changes.pop()


def _alter_a_node(plan):
    change = next(c for c in plan.node_changes if c.value is not None)
    change.value["properties"]["unreviewed"] = True


def _write_beyond_the_plan(plan):
    change = next(c for c in plan.node_changes if c.value is not None)
    workspace_id = change.key[0]
    repo_uid = _write_beyond_the_plan.repo_uid
    plan.node_changes.append(dataclasses.replace(change, key=(workspace_id, "/unreviewed"), existed=False,
                                                 node_id=node_uid(repo_uid, workspace_id, "/unreviewed")))


SABOTAGES = {
    "drops_a_relation": (_drop_a_relation, "not what the reviewer was shown"),
    "alters_a_node": (_alter_a_node, "not what the reviewer was shown"),
    "writes_beyond_the_plan": (_write_beyond_the_plan, "what the reviewer was not shown"),
}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("sabotage", sorted(SABOTAGES))
@pytest.mark.parametrize("story", sorted(STORIES))
def test_a_merge_that_differs_from_its_dry_run_fails_the_story(kg, reviewer, monkeypatch, story, sabotage):
    spoil, message = SABOTAGES[sabotage]
    original = history.apply_merge

    def spoiled(session, ctx, plan, content_keys):
        report = plan.preview()  # what the dry run said, answered as applied
        _write_beyond_the_plan.repo_uid = ctx.repo.uid
        spoil(plan)
        original(session, ctx, plan, content_keys)
        return report

    monkeypatch.setattr(history, "apply_merge", spoiled)
    with pytest.raises(AssertionError, match=message):
        STORIES[story](kg, reviewer)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("story", ["agent_answers", "two_agents"])
def test_an_index_that_loses_a_text_fails_the_story(kg, reviewer, monkeypatch, story):
    monkeypatch.setattr(indexer, "store_chunks", lambda session, repo_id, rows: None)
    with pytest.raises(AssertionError, match="is not found on .* by its text"):
        STORIES[story](kg, reviewer)
