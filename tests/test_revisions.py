"""Revision names, tokens and selection (no network)."""

from __future__ import annotations

import math

import pytest

from headtrace.errors import HeadtraceError
from headtrace.revisions import catalog, log_spaced, parse_revision, pythia_revisions, select
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


def test_log_selection_needs_token_counts():
    with pytest.raises(HeadtraceError, match="needs token counts.*set tokens_per_step"):
        select(catalog(["step1", "step2"]), "log:2", "someone/model")
