"""The built-in revision schemes (docs/revisions.md), each through the local hub server with a made-up
branch list in that scheme: parsed, ordered, tokens right; and a user's map of names to tokens in a panel.

The expected steps and tokens are written out from each model card's numbers (tokens per step x
step, or the tokens in the name), not computed by headtrace."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from headtrace.cli import app
from headtrace.errors import HeadtraceError
from headtrace.panel import load_panel, run_panel
from headtrace.revisions import SCHEMES as SCHEMES_BUILT_IN
from headtrace.revisions import NameMap, naming_for, select, selection_notes
from headtrace.sources import HubSource, checkpoint_location
from headtrace.store import read_results
from hub_server import FakeRepo, HubServer, fake_repo
from panel_helpers import SCREEN, point_hub_env

B, T = 1e9, 1e12
PYTHIA, SMOL135, SMOL17, SMOL3 = 2_097_152, 1_048_576, 2_097_152, 2_359_296


def branches_only(repo_id: str, names: list[str], same_commit: dict[str, str] | None = None) -> FakeRepo:
    """A repository whose branches are listed but never downloaded (their files are not built)."""
    return FakeRepo(repo_id, {name: dict for name in names}, same_commit)


# (repository, branches, same commit, the catalog as (name, step, tokens, run, alias of), `all`, `log:3`)
SCHEMES = {
    "pythia": (
        "EleutherAI/pythia-410m",
        ["main", "step0", "step1", "step512", "step1000", "step143000"],
        None,
        [
            ("step0", 0, 0.0, "", ""),
            ("step1", 1, 1 * PYTHIA, "", ""),
            ("step512", 512, 512 * PYTHIA, "", ""),
            ("step1000", 1000, 1000 * PYTHIA, "", ""),
            ("main", 143000, 143000 * PYTHIA, "", "step143000"),
            ("step143000", 143000, 143000 * PYTHIA, "", ""),
        ],
        ["step0", "step1", "step512", "step1000", "step143000"],
        ["step0", "step1", "step143000"],
    ),
    "polypythias": (
        "EleutherAI/pythia-160m-seed3",
        ["main", "step0", "step4", "step143000"],
        {"main": "step143000"},
        [
            ("step0", 0, 0.0, "", ""),
            ("step4", 4, 4 * PYTHIA, "", ""),
            ("main", 143000, 143000 * PYTHIA, "", "step143000"),
            ("step143000", 143000, 143000 * PYTHIA, "", ""),
        ],
        ["step0", "step4", "step143000"],
        ["step0", "step4", "step143000"],
    ),
    "olmo": (
        "allenai/OLMo-7B",
        ["main", "step0-tokens0B", "step1000-tokens4B", "step452000-tokens2000B", "step556000-tokens2460B"],
        None,
        [
            ("step0-tokens0B", 0, 0.0, "", ""),
            ("step1000-tokens4B", 1000, 4 * B, "", ""),
            ("step452000-tokens2000B", 452000, 2000 * B, "", ""),
            ("step556000-tokens2460B", 556000, 2460 * B, "", ""),
            ("main", None, None, "", ""),
        ],
        ["step0-tokens0B", "step1000-tokens4B", "step452000-tokens2000B", "step556000-tokens2460B"],
        ["step0-tokens0B", "step1000-tokens4B", "step556000-tokens2460B"],
    ),
    "olmo2": (
        "allenai/OLMo-2-1124-7B",
        [
            "main",
            "step150-tokens1B",
            "stage1-step1000-tokens5B",
            "stage1-step928646-tokens3896B",
            "stage2-ingredient1-step1000-tokens5B",
            "stage2-ingredient1-step11931-tokens50B",
            "stage2-ingredient3-step11931-tokens50B",
        ],
        None,
        [
            ("step150-tokens1B", 150, 1 * B, "", ""),
            ("stage1-step1000-tokens5B", 1000, 5 * B, "", ""),
            ("stage1-step928646-tokens3896B", 928646, 3896 * B, "", ""),
            ("main", None, None, "", ""),
            ("stage2-ingredient1-step1000-tokens5B", 1000, None, "stage2-ingredient1", ""),
            ("stage2-ingredient1-step11931-tokens50B", 11931, None, "stage2-ingredient1", ""),
            ("stage2-ingredient3-step11931-tokens50B", 11931, None, "stage2-ingredient3", ""),
        ],
        ["step150-tokens1B", "stage1-step1000-tokens5B", "stage1-step928646-tokens3896B"],
        ["step150-tokens1B", "stage1-step1000-tokens5B", "stage1-step928646-tokens3896B"],
    ),
    "olmoe": (
        "allenai/OLMoE-1B-7B-0924",
        ["fp32", "main", "step5000-tokens20B", "step1200000-tokens5033B", "step1220000-tokens5117B"],
        None,
        [
            ("step5000-tokens20B", 5000, 20 * B, "", ""),
            ("step1200000-tokens5033B", 1200000, 5033 * B, "", ""),
            ("step1220000-tokens5117B", 1220000, 5117 * B, "", ""),
            ("fp32", None, None, "", ""),
            ("main", None, None, "", ""),
        ],
        ["step5000-tokens20B", "step1200000-tokens5033B", "step1220000-tokens5117B"],
        ["step5000-tokens20B", "step1200000-tokens5033B", "step1220000-tokens5117B"],
    ),
    "smollm2-135m": (
        "HuggingFaceTB/SmolLM2-135M-intermediate-checkpoints",
        ["step-240000", "step-2000000", "step-480000"],
        None,
        [
            ("step-240000", 240000, 240000 * SMOL135, "", ""),
            ("step-480000", 480000, 480000 * SMOL135, "", ""),
            ("step-2000000", 2000000, 2000000 * SMOL135, "", ""),
        ],
        ["step-240000", "step-480000", "step-2000000"],
        ["step-240000", "step-480000", "step-2000000"],
    ),
    "smollm2-360m": (
        "HuggingFaceTB/SmolLM2-360M-intermediate-checkpoints",
        ["step-320000", "step-160000"],
        None,
        [("step-160000", 160000, None, "", ""), ("step-320000", 320000, None, "", "")],
        ["step-160000", "step-320000"],
        ["step-160000", "step-320000"],
    ),
    "smollm2-1.7b": (
        "HuggingFaceTB/SmolLM2-1.7B-intermediate-checkpoints",
        ["step-250000", "step-125000"],
        None,
        [("step-125000", 125000, 125000 * SMOL17, "", ""), ("step-250000", 250000, 250000 * SMOL17, "", "")],
        ["step-125000", "step-250000"],
        ["step-125000", "step-250000"],
    ),
    "smollm3": (
        "HuggingFaceTB/SmolLM3-3B-checkpoints",
        ["main", "stage3-step-4720000", "stage1-step-40000", "stage2-step-3480000", "stage1-step-3440000"],
        None,
        [
            ("stage1-step-40000", 40000, 40000 * SMOL3, "", ""),
            ("stage1-step-3440000", 3440000, 3440000 * SMOL3, "", ""),
            ("stage2-step-3480000", 3480000, 3480000 * SMOL3, "", ""),
            ("stage3-step-4720000", 4720000, 4720000 * SMOL3, "", ""),
            ("main", None, None, "", ""),
        ],
        ["stage1-step-40000", "stage1-step-3440000", "stage2-step-3480000", "stage3-step-4720000"],
        ["stage1-step-40000", "stage1-step-3440000", "stage3-step-4720000"],
    ),
    "amber": (
        "LLM360/Amber",
        ["ckpt_358", "main", "ckpt_000", "ckpt_100", "ckpt_001"],
        None,
        [
            ("ckpt_000", 0, None, "", ""),
            ("ckpt_001", 1, None, "", ""),
            ("ckpt_100", 100, None, "", ""),
            ("ckpt_358", 358, None, "", ""),
            ("main", 359, None, "", "ckpt_359"),
        ],
        ["ckpt_000", "ckpt_001", "ckpt_100", "ckpt_358", "main"],
        ["ckpt_000", "ckpt_001", "main"],
    ),
    "crfm-gpt2": (
        "stanford-crfm/alias-gpt2-small-x21",
        ["main", "checkpoint-0", "checkpoint-10", "checkpoint-100", "checkpoint-400000", "checkpoint-1000"],
        {"main": "checkpoint-400000"},
        [
            ("checkpoint-0", 0, None, "", ""),
            ("checkpoint-10", 10, None, "", ""),
            ("checkpoint-100", 100, None, "", ""),
            ("checkpoint-1000", 1000, None, "", ""),
            ("checkpoint-400000", 400000, None, "", ""),
            ("main", 400000, None, "", "checkpoint-400000"),
        ],
        ["checkpoint-0", "checkpoint-10", "checkpoint-100", "checkpoint-1000", "checkpoint-400000"],
        ["checkpoint-0", "checkpoint-10", "checkpoint-400000"],
    ),
    "bloom": (
        "bigscience/bloom-560m-intermediate",
        ["main", "global_step600000", "global_step1000", "global_step100000", "global_step10000"],
        None,
        [
            ("global_step1000", 1000, None, "", ""),
            ("global_step10000", 10000, None, "", ""),
            ("global_step100000", 100000, None, "", ""),
            ("global_step600000", 600000, None, "", ""),
            ("main", None, None, "", ""),
        ],
        ["global_step1000", "global_step10000", "global_step100000", "global_step600000"],
        ["global_step1000", "global_step10000", "global_step600000"],
    ),
    "datadecide": (
        "allenai/DataDecide-dolma1_7-1B",
        [
            "main",
            "step0-seed-default",
            "step69369-seed-default",
            "step1000-seed-default",
            "step1000-seed-large-aux-2",
            "step69369-seed-small-aux-3",
        ],
        {"main": "step69369-seed-default"},
        [
            ("step0-seed-default", 0, None, "", ""),
            ("step1000-seed-default", 1000, None, "", ""),
            ("main", 69369, None, "", "step69369-seed-default"),
            ("step69369-seed-default", 69369, None, "", ""),
            ("step1000-seed-large-aux-2", 1000, None, "large-aux-2", ""),
            ("step69369-seed-small-aux-3", 69369, None, "small-aux-3", ""),
        ],
        ["step0-seed-default", "step1000-seed-default", "step69369-seed-default"],
        ["step0-seed-default", "step1000-seed-default", "step69369-seed-default"],
    ),
}


@pytest.fixture(scope="module")
def scheme_hub():
    repos = [branches_only(repo, names, same) for repo, names, same, *_ in SCHEMES.values()]
    repos.append(fake_repo("someone/tiny-run", "gpt2", ["main", "ep1", "ep3", "ep10"]))
    with HubServer(repos) as server:
        yield server


@pytest.fixture
def hub_env(scheme_hub, tmp_path, monkeypatch):
    point_hub_env(monkeypatch, scheme_hub.url, tmp_path / "hf")
    return scheme_hub


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_each_built_in_scheme_reads_its_branches(hub_env, scheme):
    repo, _, _, expected, every, log3 = SCHEMES[scheme]
    revisions = HubSource(repo).revisions()
    assert [(r.name, r.step, r.tokens, r.run, r.alias_of) for r in revisions] == expected
    assert [r.name for r in select(revisions, "all", repo)] == every
    assert [r.name for r in select(revisions, "log:3", repo)] == log3
    # Every revision is in `all`, or a note says why not.
    notes = " ".join(selection_notes(revisions, select(revisions, "all", repo), "all", repo))
    for r in revisions:
        if r.name not in every and not (r.alias_of and r.alias_of in every):
            assert r.name in notes or r.run in notes


def test_a_hub_revision_screened_alone_gets_its_schemes_tokens():
    assert checkpoint_location("EleutherAI/pythia-1b", "step3000")[2] == 3000 * PYTHIA
    assert checkpoint_location("EleutherAI/pythia-1b", "main")[2] == 143000 * PYTHIA  # the card: main is step143000
    assert checkpoint_location("stanford-crfm/alias-gpt2-small-x21", "checkpoint-10")[2] is None
    assert (
        checkpoint_location("stanford-crfm/alias-gpt2-small-x21", "checkpoint-10", NameMap(tokens_per_step=524288))[2]
        == 10 * 524288
    )
    assert checkpoint_location("someone/model", "ep7", NameMap(4096, r"ep(\d+)")) == (
        "someone/model",
        "ep7",
        7 * 4096.0,
    )


def test_cli_screen_reports_a_bad_revision_pattern_in_one_line():
    result = CliRunner().invoke(app, ["screen", "someone/model", "--revision", "ep1", "--revision-pattern", "ep"])
    assert isinstance(result.exception, HeadtraceError) and "\n" not in str(result.exception)
    assert "revision_pattern 'ep' must capture the step" in str(result.exception)


def test_a_panel_maps_unknown_names_and_screens_revisions_without_tokens(hub_env, tmp_path):
    """A series no scheme knows: the pattern gives steps (tokens unknown, ordered by step, noted); a
    table file gives tokens. Nothing is refused for lacking tokens."""
    (tmp_path / "tokens.csv").write_text("revision,step,tokens\nep1,1,1000\nep10,10,10000\n")
    panel = tmp_path / "p.toml"
    panel.write_text(
        f'name = "p"\n{SCREEN}\n'
        '[[models]]\nid = "someone/tiny-run"\nrevisions = "all"\nrevision_pattern = "ep(?P<step>\\\\d+)"\n'
    )
    outcome = run_panel(load_panel(panel), tmp_path / "out")
    assert [t.revision.name for t in outcome.planned] == ["ep1", "ep3", "ep10"]
    notes = " ".join(outcome.notes)
    assert "without a step in the name left out of 'all' (main)" in notes and "tokens unknown for 3 revisions" in notes
    runs = read_results(tmp_path / "out")[1]
    assert set(runs.revision) == {"ep1", "ep3", "ep10"} and runs.tokens.isna().all()

    panel.write_text(
        panel.read_text()
        .replace('revision_pattern = "ep(?P<step>\\\\d+)"', 'revision_tokens = "tokens.csv"')
        .replace('revisions = "all"', 'revisions = ["ep10", "ep1"]')
    )
    outcome = run_panel(load_panel(panel), tmp_path / "out2")
    runs = read_results(tmp_path / "out2")[1]
    assert dict(zip(runs.revision, runs.tokens)) == {"ep1": 1000.0, "ep10": 10000.0} and not outcome.notes


@pytest.mark.parametrize(
    "line, message",
    [
        ('revision_pattern = "ep("', r"p\.toml:\d+: revision_pattern 'ep\(' is not a regular expression"),
        ('revision_pattern = "final"', r"p\.toml:\d+: revision_pattern 'final' must capture the step"),
        ('revision_tokens = "nowhere.csv"', r"p\.toml:\d+: cannot read revision table '.*nowhere\.csv'"),
        ("tokens_per_step = -4", r"p\.toml:\d+: tokens_per_step must be positive"),
    ],
)
def test_a_panels_name_map_is_checked_with_its_line(tmp_path, line, message):
    panel = tmp_path / "p.toml"
    panel.write_text(f'[[models]]\nid = "a/b"\nrevisions = "all"\n{line}\n')
    with pytest.raises(HeadtraceError, match=message):
        load_panel(panel)


DOCS = Path(__file__).resolve().parents[1] / "docs" / "revisions.md"


def test_the_docs_table_lists_every_built_in_scheme_with_its_card_and_tokens_per_step():
    text = DOCS.read_text()
    table = text[text.index("## Built-in schemes") : text.index("What each card says")]
    rows = {
        cells[0]: cells
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in table.splitlines()
            if line.startswith("| ") and "---" not in line
        )
    }
    assert set(rows) - {"series"} == {s.name for s in SCHEMES_BUILT_IN}
    for scheme in SCHEMES_BUILT_IN:
        *_, per_step, card = rows[scheme.name]
        assert scheme.card in card
        assert (
            per_step.startswith(f"{scheme.tokens_per_step:,.0f}")
            if scheme.tokens_per_step
            else not per_step[0].isdigit()
        )


def test_the_docs_panel_example_reads_its_names(tmp_path):
    text = DOCS.read_text()
    example = text[text.index("```toml") + len("```toml") : text.index("```", text.index("```toml") + 7)]
    (tmp_path / "p.toml").write_text(example)
    [model] = load_panel(tmp_path / "p.toml").models
    revision = naming_for(model.id, model.names).parse("ep7")
    assert (revision.step, revision.tokens) == (7, 7 * 4194304.0)
