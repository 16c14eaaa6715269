"""The review screen's pure helpers: the diff's grouping and the conflict picks read off a form
(no database)."""

from __future__ import annotations

import doctest

import pytest

from api.ui import review
from kg.errors import InvalidInput


def test_the_module_examples_hold():
    assert doctest.testmod(review).failed == 0


def test_a_deleted_node_shows_its_old_values_and_a_removed_relation_its_old_weight():
    diff = {"nodes": {"added": [], "modified": [], "deleted": [
                {"workspace": "kb", "path": "/c", "node_type": "Doc", "properties": {"b": 2, "a": 1}}]},
            "relations": {"added": [], "modified": [], "removed": [
                {"from": "kb:/c", "to": "kb:/d", "type": "t", "weight": 0.5, "properties": {}}]}}
    [group] = review.group_diff(diff)
    [entry] = group["paths"]
    assert entry["node"] == {"kind": "deleted", "node_type": "Doc", "changes": [
        {"key": "a", "old": 1, "new": None}, {"key": "b", "old": 2, "new": None}]}
    assert entry["relations"] == [{"kind": "removed", "from": "kb:/c", "to": "kb:/d", "type": "t",
                                   "old": {"weight": 0.5, "properties": {}}, "new": None}]


def test_picks_make_the_resolutions_plan_merge_takes():
    picks = [{"kind": "node", "workspace": "kb", "path": "/a", "take": "ours", "value": "ignored"},
             {"kind": "relation", "from": "kb:/x", "to": "kb:/y", "type": "t", "take": "theirs", "value": ""},
             {"kind": "node", "workspace": "kb", "path": "/b", "take": "", "value": ""}]
    assert review.resolutions_of(picks) == [{"workspace": "kb", "path": "/a", "take": "ours"},
                                            {"from": "kb:/x", "to": "kb:/y", "type": "t", "take": "theirs"}]


@pytest.mark.parametrize(("pick", "says"), [
    ({"kind": "node", "workspace": "kb", "path": "/a", "take": "edit", "value": "{"}, "is not valid JSON"),
    ({"kind": "node", "workspace": "kb", "path": "/a", "take": "edit", "value": "3"}, "must be a JSON object"),
    ({"kind": "relation", "from": "kb:/x", "to": "kb:/y", "type": "t", "take": "edit", "value": "{}"},
     "is 'ours', 'theirs'"),
    ({"kind": "node", "workspace": "kb", "path": "/a", "take": "both", "value": ""}, "or 'edit'"),
])
def test_a_bad_pick_is_invalid_input(pick, says):
    with pytest.raises(InvalidInput, match=says):
        review.resolutions_of([pick])
