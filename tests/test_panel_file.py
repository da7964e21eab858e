"""Panel files: the shipped study panel, and validation errors that name the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from headtrace.cli import app
from headtrace.errors import HeadtraceError
from headtrace.panel import StagePlan, load_panel
from headtrace.schema import AblationConfig
from headtrace.stages import AblationStage
from headtrace.screen import ScreenConfig

ROOT = Path(__file__).resolve().parents[1]

# The study's panel (docs/reproduce-xu2026.md).
STUDY = {
    "EleutherAI/pythia-1b": "step1 step4 step16 step64 step256 step512 step3000 step10000 step38000 step143000",
    "allenai/OLMo-1B-0724-hf": "step1000-tokens2B step2000-tokens4B step5000-tokens10B step11000-tokens23B "
    "step25000-tokens52B step56000-tokens117B step126000-tokens264B step285000-tokens597B "
    "step644000-tokens1350B step1454000-tokens3048B",
    "allenai/OLMoE-1B-7B-0924": "step5000-tokens20B step10000-tokens41B step25000-tokens104B "
    "step50000-tokens209B "
    "step100000-tokens419B step200000-tokens838B step400000-tokens1677B "
    "step600000-tokens2516B step800000-tokens3355B step1220000-tokens5117B",
}


def test_the_study_panel_is_the_30_runs_with_reference_settings():
    panel = load_panel(ROOT / "panels" / "xu2026.toml")
    assert {m.id: " ".join(m.revisions) for m in panel.models} == STUDY
    assert all(m.source == "hub" for m in panel.models)
    reference = ScreenConfig()  # the defaults reproduce the reference implementation
    assert panel.screen.config_hash == ScreenConfig.of(device="cuda").config_hash != reference.config_hash
    assert panel.stages == ()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


GOOD = """name = "x"
[screen]
n_examples = 8
[[models]]
id = "a/b"
revisions = "log:3"
[[models]]
id = "c/d"
revisions = ["step1"]
tokens_per_step = 4096
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ('revisions = ["step1"]', 'revison = ["step1"]'),
            r"p\.toml:9: unknown key 'revison' in \[models\]; "
            r"did you mean 'revisions'\?",
        ),
        (
            ("n_examples = 8", 'n_examples = "many"'),
            r"p\.toml:3: 'n_examples' must be an integer, not 'many'",
        ),
        (("n_examples = 8", "n_examples = 0"), r"p\.toml:2: n-examples must be >= 1"),
        (
            ("tokens_per_step = 4096", "tokens_per_step = true"),
            r"p\.toml:10: 'tokens_per_step' must be a number",
        ),
        (('id = "c/d"\n', ""), r"p\.toml:7: \[models\] is missing 'id'"),
        (('revisions = "log:3"', 'revisions = ["a", 1]'), r"p\.toml:6: 'revisions' must be a list of names"),
        (
            ('id = "c/d"', 'id = "c/d"\nsource = "s3"'),
            r"p\.toml:9: source = 's3' is not one of: hub, local, organism",
        ),
        (
            ('id = "c/d"', 'id = "c/d"\nsource = "local"'),
            r"p\.toml:7: model 'c/d' has source = \"local\" but no path",
        ),
        (('id = "c/d"', 'id = "a/b"'), r"p\.toml:8: model 'a/b' is listed twice"),
        (("[screen]", "[screen"), r"p\.toml: not valid TOML: .*line 2"),
        (
            ('name = "x"', 'nme = "x"'),
            r"p\.toml:1: unknown key 'nme' in the top level; did you mean 'name'\?",
        ),
    ],
)
def test_errors_name_the_file_and_the_line(tmp_path, edit, message):
    assert edit[0] in GOOD
    with pytest.raises(HeadtraceError, match=message):
        load_panel(write(tmp_path, GOOD.replace(edit[0], edit[1], 1)))


def test_ablation_section_is_validated_and_stored(tmp_path):
    panel = load_panel(
        write(
            tmp_path,
            GOOD + '[ablation]\ncircuit = "L2H11,L4H12"\ndraws = 5\nmode = "mean"\nrevisions = ["step1"]\n',
        )
    )
    expected = (StagePlan(AblationStage(AblationConfig(circuit="L2H11,L4H12", draws=5, mode="mean")), ("step1",)),)
    assert panel.stages == expected
    old_name = GOOD + '[ablation]\ncircuit = "L2H11,L4H12"\nseeds = 5\nmode = "mean"\nrevisions = ["step1"]\n'
    assert load_panel(write(tmp_path, old_name)).stages == expected  # draws' old name is still read
    assert load_panel(write(tmp_path, GOOD + "[ablation]\n")).stages == (StagePlan(AblationStage(), "final"),)
    with pytest.raises(HeadtraceError, match=r"p\.toml:13: bad head 'L2-H11' in circuit 'L2-H11'"):
        load_panel(write(tmp_path, GOOD + '[ablation]\nseeds = 3\ncircuit = "L2-H11"\n'))
    with pytest.raises(HeadtraceError, match=r"p\.toml:13: mode = 'ones' is not one of: zero, mean"):
        load_panel(write(tmp_path, GOOD + '[ablation]\nseeds = 3\nmode = "ones"\n'))


def test_a_final_circuit_is_a_second_pass_on_log_8_unless_the_section_says(tmp_path):
    final = AblationStage(AblationConfig(circuit="final:induction"))
    panel = load_panel(write(tmp_path, GOOD + '[ablation]\ncircuit = "final:induction"\n'))
    assert panel.stages == (StagePlan(final, "log:8"),) and final.second_pass and not AblationStage().second_pass
    chosen = load_panel(write(tmp_path, GOOD + '[ablation]\ncircuit = "final:induction"\nrevisions = "log:3"\n'))
    assert chosen.stages == (StagePlan(final, "log:3"),)
    with pytest.raises(HeadtraceError, match=r"p\.toml:13: final:bogus: final:<set> takes one of the screen's head"):
        load_panel(write(tmp_path, GOOD + '[ablation]\nseeds = 3\ncircuit = "final:bogus"\n'))
    with pytest.raises(HeadtraceError, match=r"p\.toml:12: revisions must be 'final', 'all', 'log:N' or a list"):
        load_panel(write(tmp_path, GOOD + '[ablation]\nrevisions = "log:0"\n'))


def test_local_paths_are_relative_to_the_panel_file(tmp_path):
    panel = load_panel(
        write(tmp_path, '[[models]]\nid = "org"\nsource = "organism"\npath = "runs/a"\nrevisions = "all"\n')
    )
    assert panel.models[0].path == str(tmp_path / "runs" / "a") and panel.name == "p"


def test_cli_run_reports_a_bad_panel_in_one_line(tmp_path):
    result = CliRunner().invoke(
        app, ["run", str(write(tmp_path, GOOD.replace('revisions = "log:3"', "revisions = 3")))]
    )
    assert isinstance(result.exception, HeadtraceError)
    assert "\n" not in str(result.exception) and "p.toml:6: 'revisions' must be" in str(result.exception)
