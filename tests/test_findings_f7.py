"""F7, middle-first: planted trajectories for each branch of the criterion (docs/definitions.md), the
study's Pythia-1B files against the criterion written out in plain Python, and the summary across a
seed family against a count from the heads table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_trajectory_synthetic import make_heads

from headtrace.errors import HeadtraceError
from headtrace.finding_kinds import FINDINGS, MiddleFirst, register_finding
from headtrace.findings import model_findings, write_findings
from headtrace.reference import import_reference
from headtrace.store import read_results
from headtrace.trajectory import TrajectoryConfig

REFERENCE = Path(__file__).parent / "data" / "reference" / "pythia-1b"
STEPS = [1, 4, 16, 64, 256, 512, 3000, 10000, 38000, 143000]


def planted(onsets: dict[int, int | None], n_layers: int, n_revisions: int = 6, **kwargs) -> pd.DataFrame:
    """Two heads per layer; head 0 of layer l is a sink head (first-token 100x) from revision
    onsets[l] on (never for None or an absent layer)."""
    sel = np.ones((n_revisions, n_layers * 2))
    for layer, start in onsets.items():
        if start is not None:
            sel[start:, 2 * layer] = 100.0
    return make_heads(n_revisions, n_layers=n_layers, n_heads=2, sel_first=sel, **kwargs)


def f7(heads: pd.DataFrame, config: TrajectoryConfig = TrajectoryConfig()) -> tuple[str, str, dict]:
    row = model_findings(heads, None, config).set_index("finding").loc["F7"]
    return row.status, row.statement, json.loads(row.numbers)


def test_middle_first_holds_when_the_middle_leads_and_the_floor_adjacent_layers_trail():
    # 8 layers, floor 0-1: layer 4 first (revision 1), 5-7 at 2, layers 2-3 last (4).
    status, statement, numbers = f7(planted({4: 1, 5: 2, 6: 2, 7: 2, 2: 4, 3: 4}, n_layers=8))
    assert status == "holds"
    assert numbers["onset"] == {"2": 4, "3": 4, "4": 1, "5": 2, "6": 2, "7": 2}
    assert numbers["earliest_layers"] == [4] and numbers["middle"] == [2.0, 6.0]
    assert numbers["median_onset"] == 2  # onsets 1, 2, 2, 2, 4, 4: the lower median
    assert statement == (
        "first sink heads at step2 (revision 2 of 6, 2B) in layer 4 (median layer 4, inside the middle "
        "2 <= layer < 6 of 8); just above the floor: layer 2 step16 (revision 5 of 6, 16B), layer 3 step16 "
        "(revision 5 of 6, 16B); median onset step4 (revision 3 of 6, 4B) over layers 2-7"
    )


@pytest.mark.parametrize(
    "onsets, n_layers, floor_layers, status, why",
    [
        # The top of the network first: the earliest layer lies above the middle half.
        ({7: 1, 4: 2, 5: 2, 6: 2, 2: 4, 3: 4}, 8, 2, "does not hold", "outside the middle"),
        # Two earliest layers, 5 and 7: their median is their mean, 6, the middle's (excluded) top.
        ({5: 1, 7: 1, 4: 2, 6: 2, 2: 4, 3: 4}, 8, 2, "does not hold", "median layer 6, outside"),
        # ... and 4 and 6 give 5, inside.
        ({4: 1, 6: 1, 5: 2, 7: 2, 2: 4, 3: 4}, 8, 2, "holds", "median layer 5, inside"),
        # The middle's bounds: 12 layers, floor 0: 3 <= median < 9; layer 3 is in, layer 9 is out.
        ({3: 1, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 2, 11: 2, 1: 3, 2: 3}, 12, 1, "holds", "layer 3 (median"),
        ({9: 1, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 10: 2, 11: 2, 1: 3, 2: 3}, 12, 1, "does not hold", "outside"),
        # A layer just above the floor at the median onset is not strictly later.
        ({4: 1, 5: 2, 6: 2, 7: 2, 2: 2, 3: 4}, 8, 2, "does not hold", "not later than the layers just above"),
        # The median onset is the lower median: onsets 1, 1, 1, 3, 3, 3 give 1, and the layers at 3 trail it.
        ({4: 1, 5: 1, 6: 1, 7: 3, 2: 3, 3: 3}, 8, 2, "holds", "median onset step2 (revision 2 of 6, 2B)"),
        # ... and one that never holds a sink head is later than any onset.
        ({4: 1, 5: 2, 6: 2, 7: 2}, 8, 2, "holds", "layer 2 never, layer 3 never"),
        # Sinks only in the floor: nothing above it to order.
        ({0: 1, 1: 2}, 8, 2, "not measurable", "no sink head in layers 2-7 at any revision"),
        # Sinks at the first revision: no onset order to see.
        ({5: 0, 4: 2, 2: 4}, 8, 2, "not measurable", "already at the first revision"),
        # No layer above the floor.
        ({1: 1}, 2, 2, "not measurable", "no layer at or above the floor (layers 0-1 of 2)"),
    ],
)
def test_each_branch_of_the_criterion(onsets, n_layers, floor_layers, status, why):
    found, statement, _ = f7(planted(onsets, n_layers), TrajectoryConfig(floor_layers=floor_layers))
    assert (found, why in statement) == (status, True), statement


def test_no_token_counts_needed():
    heads = planted({4: 1, 5: 2, 6: 2, 7: 2, 2: 4, 3: 4}, n_layers=8, tokens=[np.nan] * 6)
    status, statement, numbers = f7(heads)
    assert status == "holds" and "step2 (revision 2 of 6, ? tokens)" in statement
    assert numbers["onset_tokens"]["4"] is None


def test_the_middle_is_a_setting_of_the_unit():
    heads = planted({5: 1, 4: 2, 6: 2, 7: 2, 2: 4, 3: 4}, n_layers=8)
    assert f7(heads)[0] == "holds"
    original = FINDINGS.get("F7")
    assert original.settings() == {"floor_layers": 2, "middle_low": 0.25, "middle_high": 0.75}
    try:
        register_finding(MiddleFirst(middle_low=0.25, middle_high=0.5))  # 2 <= median < 4: layer 5 is out
        status, statement, _ = f7(heads)
        assert status == "does not hold" and "outside the middle 2 <= layer < 4 of 8" in statement
        with pytest.raises(HeadtraceError, match="middle_low < middle_high"):
            register_finding(MiddleFirst(middle_low=0.6, middle_high=0.5))
    finally:
        register_finding(original)


# --------------------------------------------------------------------------------------------
# The study's Pythia-1B files.


def plain_middle_first(onset: dict[int, int], n_layers: int, floor_layers: int = 2) -> tuple[str, list[int]]:
    """The criterion of docs/definitions.md written out: (verdict, earliest layers)."""
    first = min(onset.values())
    earliest = [layer for layer in sorted(onset) if onset[layer] == first]
    k = len(earliest)
    median_e = earliest[k // 2] if k % 2 else (earliest[k // 2 - 1] + earliest[k // 2]) / 2
    ordered = sorted(onset.values())
    median_onset = ordered[(len(ordered) - 1) // 2]
    middle = n_layers / 4 <= median_e < 3 * n_layers / 4
    later = onset[floor_layers] > median_onset and onset[floor_layers + 1] > median_onset
    return ("holds" if middle and later else "does not hold"), earliest


def test_pythia_1b_holds_as_the_study_says(tmp_path):
    """First sinks at step3000 (6.3B tokens) in layers 6-8 and 10-14; layers 0-3 never hold one."""
    onset = {}
    for i, step in enumerate(STEPS):
        screen = json.loads((REFERENCE / f"screen_step{step}.json").read_text())["all_head_selectivity"]
        for key, values in screen.items():
            layer = int(key.split("_")[0][1:])
            if values["first-token"] >= 30 and layer >= 2:
                onset.setdefault(layer, i)
    onset = {layer: onset.get(layer, len(STEPS)) for layer in range(2, 16)}
    verdict, earliest = plain_middle_first(onset, 16)
    assert (verdict, earliest) == ("holds", [6, 7, 8, 10, 11, 12, 13, 14])
    import_reference(sorted(REFERENCE.glob("*.json")), tmp_path)
    status, statement, numbers = f7(*read_results(tmp_path)[:1])
    assert status == "holds"
    assert {int(k): v for k, v in numbers["onset"].items()} == onset
    assert numbers["earliest_layers"] == earliest and numbers["onset_revision"]["6"] == "step3000"
    assert numbers["onset_tokens"]["6"] == 3000 * 2_097_152  # 6.3B tokens
    assert numbers["floor_adjacent"] == {"2": 10, "3": 10}  # layers 2 and 3 never (with F1: 0-3 never)
    assert statement == (
        "first sink heads at step3000 (revision 7 of 10, 6.291B) in layers 6-8, 10-14 (median layer 10.5, inside "
        "the middle 4 <= layer < 12 of 16); just above the floor: layer 2 never, layer 3 never; median onset "
        "step3000 (revision 7 of 10, 6.291B) over layers 2-15"
    )


# --------------------------------------------------------------------------------------------
# Across seeds.


def test_the_family_row_counts_each_seeds_earliest_layers_from_the_heads(tmp_path):
    from test_families import FAMILY, PLANTED, planted_results

    table = write_findings(planted_results(tmp_path))
    heads, _ = read_results(tmp_path)
    earliest = {}
    for seed in PLANTED:
        mine = heads.loc[(heads.model == f"{FAMILY}-s{seed}") & (heads.layer >= 2)]
        sinks = mine.loc[mine.sel_first >= 30]
        first = sinks.tokens.min()
        earliest[str(seed)] = sorted(set(sinks.loc[sinks.tokens == first, "layer"]))
    row = table.loc[table.model.isna() & (table.finding == "F7")].iloc[0]
    numbers = json.loads(row.numbers)
    assert numbers["earliest_layers"] == earliest
    assert row.status == "does not hold in 4/4"
    assert "earliest: seed 0 layer 3; seed 1 layer 3; seed 2 layers 2-3; seed 3 layer 3" in row.statement
    assert numbers["median_earliest_layer"]["median"] == 3.0 and numbers["in_middle"]["2"] is True
