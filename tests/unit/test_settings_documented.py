"""Every setting is documented: the README's settings table names each field's KG_ variable."""

from __future__ import annotations

import re
from pathlib import Path

from kg.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_settings_field_is_in_the_readme_settings_table():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## Settings"):]
    table = table[:table.index("\n## ", 1)]
    rows = "\n".join(line for line in table.splitlines() if line.startswith("| `KG_"))
    documented = set(re.findall(r"`(KG_[A-Z0-9_]+)`", rows))
    wanted = {f"KG_{name.upper()}" for name in Settings.model_fields}
    assert wanted - documented == set(), "settings missing from the README's settings table"
    assert documented - wanted == set(), "the README documents settings that do not exist"
