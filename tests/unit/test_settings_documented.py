"""Every setting is documented: the settings reference, generated from ``kg/settings.py`` when the
site is built, names each field's ``KG_`` variable with its default and a meaning from the docstring."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kg.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _reference():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_page_has_a_row_per_settings_field():
    page = _reference().settings_page()
    rows = [line for line in page.splitlines() if line.startswith("| `KG_")]
    documented = [re.match(r"\| `(KG_[A-Z0-9_]+)`", row).group(1) for row in rows]
    assert documented == [f"KG_{name.upper()}" for name in Settings.model_fields]
    row = {r.split("|")[1].strip(" `"): r for r in rows}
    assert "| `8765` |" in row["KG_PORT"] and "| `./.kg` |" in row["KG_DATA_DIR"]
    assert "| unset |" in row["KG_DATABASE_URL"]
    assert "| `0.25` |" in row["KG_SEARCH_VECTOR_WEIGHT"] and "| `false` |" in row["KG_AUTH"]
    assert all(len(r.split("|")[3].strip()) > 10 for r in rows), "a setting without a meaning"


def test_a_field_the_docstring_does_not_describe_is_refused(monkeypatch):
    reference = _reference()
    described = reference.settings_descriptions()
    described.pop("port")
    monkeypatch.setattr(reference, "settings_descriptions", lambda: described)
    with pytest.raises(ValueError, match="undocumented \\['port'\\]"):
        reference.settings_page()
