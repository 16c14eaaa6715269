"""The hand-labelled gold sets in bench/data stay sound: quotes in their sources, offsets on their text."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_gold", DATA / "check_gold.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_answers_gold_is_sound() -> None:
    rows = [json.loads(line) for line in (DATA / "answers_gold.jsonl").read_text(encoding="utf-8").splitlines()]
    assert _checker().check_answers(DATA / "answers_gold.jsonl") == []
    assert len(rows) >= 120
    assert sum(1 for r in rows if not r["answerable"]) >= 30
    questions = {r["question"]: r for r in rows}
    assert questions["What replaced PEP 386?"]["answers"][0] == "PEP 440"
    assert "compatible release clause" in questions["What does `~=` mean?"]["answers"]
    assert questions["When was PEP 440 created?"]["answers"][0] == "18-Mar-2013"


def test_answers_heldout_is_sound_and_disjoint() -> None:
    rows = [json.loads(line) for line in (DATA / "answers_heldout.jsonl").read_text(encoding="utf-8").splitlines()]
    assert _checker().check_answers(DATA / "answers_heldout.jsonl") == []
    gold = {json.loads(line)["question"] for line in (DATA / "answers_gold.jsonl").read_text().splitlines()}
    assert len(rows) == 43
    assert sum(1 for r in rows if not r["answerable"]) == 13
    assert not {r["question"] for r in rows} & gold


ANSWER_SETS = ("answers_gold", "answers_heldout", "answers_heldout2", "answers_heldout3", "answers_heldout4",
               "answers_heldout5")


def test_each_later_answer_set_is_sound_and_asks_nothing_an_earlier_one_asked() -> None:
    earlier: set[str] = set()
    for name in ANSWER_SETS:
        rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        assert _checker().check_answers(DATA / f"{name}.jsonl") == [], name
        asked = {" ".join(r["question"].lower().split()) for r in rows}
        assert len(asked) == len(rows), name
        assert not asked & earlier, name
        assert {r["corpus"] for r in rows} == {"peps", "hotpotqa"}, name
        earlier |= asked


def test_ner_gold_is_sound() -> None:
    rows = [json.loads(line) for line in (DATA / "ner_gold.jsonl").read_text(encoding="utf-8").splitlines()]
    assert _checker().check_ner(DATA / "ner_gold.jsonl", DATA / "ner_passages.jsonl") == []
    assert len(rows) >= 300


def test_checker_catches_a_wrong_offset_and_a_wrong_quote(tmp_path: Path) -> None:
    checker = _checker()
    ner = tmp_path / "ner.jsonl"
    ner.write_text(
        json.dumps(
            {
                "id": "x",
                "source": "pep-0440.rst",
                "text": "Summary of differences from PEP 386",
                "entities": [{"start": 27, "end": 34, "text": "PEP 386", "type": "WORK"}],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    assert checker.check_ner(ner, tmp_path / "none.jsonl") == ["x: text[27:34]=' PEP 38' != 'PEP 386'"]
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        json.dumps(
            {
                "id": "y",
                "corpus": "peps",
                "question": "q",
                "answerable": True,
                "answers": ["PEP 440"],
                "answer_type": "name",
                "kind": "relation",
                "evidence": [{"path": "fixtures/peps/docs/pep-0440.rst", "quote": "Replaces: 387"}],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    assert checker.check_answers(answers) == ["y: quote not in source: 'Replaces: 387'"]
