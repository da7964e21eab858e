"""The findings rows and report figures captured in tests/data/golden/ (tests/findings_golden.py) stay
the same, byte for byte, on the imported Pythia-1B files, the planted seed family and the demo's
tables. Findings added since keep their own rows and figures: only the captured ones are compared."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from findings_golden import FOLDERS, GOLDEN, capture


def not_in_order(lines: list[str], of: list[str]) -> list[str]:
    """The lines of `lines` that do not appear in `of` in the same order (empty when all do)."""
    start, missing = 0, []
    for line in lines:
        try:
            start = of.index(line, start) + 1
        except ValueError:
            missing.append(line)
    return missing


@pytest.mark.parametrize("name", list(FOLDERS))
def test_the_captured_findings_and_figures_are_unchanged(name, tmp_path):
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    now = capture(FOLDERS[name](tmp_path / name))
    codes = {row["finding"] for row in golden["rows"]}
    kept = [row for row in now["rows"] if row["finding"] in codes]
    assert len(kept) == len(golden["rows"])
    for before, after in zip(golden["rows"], kept):
        assert after == before, pd.DataFrame([before, after]).T.loc[lambda f: f[0] != f[1]].to_string()
    missing = not_in_order(golden["findings_md"].splitlines(), now["findings_md"].splitlines())
    assert not missing, "findings.md lost or reordered lines:\n" + "\n".join(missing)
    changed = {f: h for f, h in golden["figures"].items() if now["figures"].get(f) != h}
    assert not changed, f"report figures changed or missing: {sorted(changed)}"
