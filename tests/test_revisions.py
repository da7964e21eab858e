"""Revision names, tokens and selection (no network)."""

from __future__ import annotations

import math

import pytest

from headtrace.errors import HeadtraceError
from headtrace.revisions import (
    NameMap,
    Naming,
    Revision,
    catalog,
    log_spaced,
    parse_revision,
    pythia_revisions,
    select,
    selection_notes,
)
from hub_server import OLMO_BRANCHES as OLMO


def test_names_carry_steps_and_tokens():
    assert parse_revision("step1454000-tokens3048B").tokens == 3048e9
    assert parse_revision("step5000-tokens20B").step == 5000
    assert parse_revision("step3000", 2_097_152).tokens == 6_291_456_000
    assert parse_revision("step3000").tokens is None and parse_revision("main").step is None
    pythia = pythia_revisions()
    assert len(pythia) == 154 and pythia[-1].tokens == pytest.approx(299.89e9, rel=1e-4)


def test_log_spaced_pythia_is_close_to_the_study_panel():
    # Ten points evenly spaced in log(tokens) between step1 and step143000 are steps 1, 3.7, 14, 52, 195, 730,
    # 2731, 10217, 38223, 143000; the nearest branches are these (730 is nearer 1000 than 512 in log space).
    chosen = log_spaced([r for r in pythia_revisions() if r.tokens > 0], 10)
    assert [r.name for r in chosen] == [
        "step1",
        "step4",
        "step16",
        "step64",
        "step256",
        "step1000",
        "step3000",
        "step10000",
        "step38000",
        "step143000",
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 40, 154, 500])
def test_log_spaced_keeps_first_and_last_and_returns_distinct_revisions(n):
    revisions = pythia_revisions()
    chosen = log_spaced(revisions, n)
    assert len(chosen) == min(n, len(revisions)) == len(set(chosen))
    assert chosen == sorted(chosen, key=lambda r: r.tokens)
    assert chosen[-1].name == "step143000"
    if n >= 2:
        assert chosen[0].name == "step0"  # the initialisation (0 tokens) counts as the first


def test_log_spaced_points_are_near_even_in_log_tokens():
    chosen = log_spaced(catalog(OLMO), 4)
    logs = [math.log(r.tokens) for r in chosen]
    assert [r.name for r in chosen] == [
        "step1000-tokens2B",
        "step11000-tokens23B",
        "step126000-tokens264B",
        "step1454000-tokens3048B",
    ]
    gaps = [b - a for a, b in zip(logs, logs[1:])]
    assert max(gaps) / min(gaps) < 1.2


def test_selection_by_list_all_and_log():
    available = catalog(OLMO)
    assert [r.name for r in select(available, ["step2000-tokens4B", "main"], "m")] == [
        "step2000-tokens4B",
        "main",
    ]
    assert len(select(available, "all", "m")) == 10  # main carries no tokens
    assert len(select(available, "log:3", "m")) == 3


@pytest.mark.parametrize(
    "selection, message",
    [
        (["step3001"], "revision 'step3001' does not exist; closest: step3000"),
        (["step1", "step1"], "revision step1 listed twice"),
        ("log:x", "unknown revision selection 'log:x'"),
        ("log:0", "log:0 selects nothing"),
    ],
)
def test_bad_selections_name_the_problem(selection, message):
    with pytest.raises(HeadtraceError, match=message):
        select(pythia_revisions(), selection, "EleutherAI/pythia-1b")


def test_mistyped_olmo_name_suggests_the_full_branch_name():
    with pytest.raises(HeadtraceError, match="'step1000' does not exist; closest: step1000-tokens2B"):
        select(catalog(OLMO), ["step1000"], "allenai/OLMo-1B-0724-hf")


def test_a_series_without_tokens_is_selected_and_log_spaced_by_step():
    available = catalog(["checkpoint-1", "checkpoint-3", "checkpoint-30", "checkpoint-1000", "main"])
    assert [(r.name, r.step, r.tokens) for r in available][:2] == [("checkpoint-1", 1, None), ("checkpoint-3", 3, None)]
    assert [r.name for r in select(available, "all", "m")] == [f"checkpoint-{s}" for s in (1, 3, 30, 1000)]
    # Three points evenly spread in log(step) between 1 and 1000: 1, 31.6 (nearest: 30) and 1000.
    chosen = select(available, "log:3", "m")
    assert [r.name for r in chosen] == ["checkpoint-1", "checkpoint-30", "checkpoint-1000"]
    notes = selection_notes(available, chosen, "log:3", "m")
    assert any("1 revision without a step in the name left out of 'log:3' (main)" in n for n in notes)
    assert any("'log:3' is spaced by step: tokens are unknown for 4 of 4 revisions" in n for n in notes)
    assert any("tokens unknown for 3 revisions" in n and "not measurable" in n for n in notes)


def test_a_series_of_names_without_steps_cannot_be_spaced():
    with pytest.raises(HeadtraceError, match="'all' found no revision with a step in its name.*revision_pattern"):
        select(catalog(["main", "fp32"]), "all", "m")


def test_a_users_pattern_and_table_give_steps_and_tokens(tmp_path):
    pattern = Naming(user=NameMap(tokens_per_step=1000, pattern=r"ep(\d+)-final"))
    assert pattern.parse("ep12-final") == Revision(tokens=12_000.0, step=12, name="ep12-final")
    assert pattern.parse("step5").tokens == 5000.0  # the tokens per step hold for the common forms too
    (tmp_path / "t.csv").write_text("revision,step,tokens\nbaseline,,0\nlate,900,1.5e9\n")
    table = Naming(user=NameMap(table=NameMap.read_table(tmp_path / "t.csv")))
    assert [(r.name, r.step, r.tokens) for r in catalog(["late", "baseline", "other"], table)] == [
        ("baseline", None, 0.0),
        ("late", 900, 1.5e9),
        ("other", None, None),
    ]
    with pytest.raises(HeadtraceError, match="must capture the step"):
        NameMap(pattern="final")
    with pytest.raises(HeadtraceError, match="is not a table of revisions"):
        (tmp_path / "bad.json").write_text('{"revision": "x"}')
        NameMap.read_table(tmp_path / "bad.json")


def test_common_forms_and_every_schemes_steps_order_names_without_a_repository():
    steps = {
        name: parse_revision(name).step
        for name in (
            "step000128",
            "step-240000",
            "global_step5000",
            "checkpoint-400000",
            "ckpt_358",
            "iter_7",
            "stage1-step-40000",
            "stage1-step928646-tokens3896B",
            "stage2-ingredient2-step11931-tokens50B",
            "step69369-seed-large-aux-2",
            "main",
        )
    }
    assert steps == {
        "step000128": 128,
        "step-240000": 240000,
        "global_step5000": 5000,
        "checkpoint-400000": 400000,
        "ckpt_358": 358,
        "iter_7": 7,
        "stage1-step-40000": 40000,
        "stage1-step928646-tokens3896B": 928646,
        "stage2-ingredient2-step11931-tokens50B": 11931,
        "step69369-seed-large-aux-2": 69369,
        "main": None,
    }
    # Tokens only where the name carries them: a tokens-per-step belongs to its series.
    assert parse_revision("stage1-step928646-tokens3896B").tokens == 3896e9
    assert parse_revision("stage2-ingredient2-step11931-tokens50B").tokens is None  # counted from stage 2's start
    assert parse_revision("step-240000").tokens is None
