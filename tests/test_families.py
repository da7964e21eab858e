"""Seed families (families.py): panel entries expanded over seeds, a family of trained organisms
screened end to end, revisions a member lacks (served by the local hub), the findings across seeds
checked against a plain recomputation from the per-seed rows, and the report's bands in Chromium."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hub_server import HubServer, fake_repo
from panel_helpers import SCREEN, point_hub_env

from headtrace.cli import main
from headtrace.errors import HeadtraceError
from headtrace.families import Gap, default_family, manifest_entry
from headtrace.family_findings import across_seeds, with_family_rows
from headtrace.findings import model_findings, write_findings
from headtrace.panel import load_panel, run_panel, train_pending
from headtrace.probes import CLASS_KEYS
from headtrace.report import build_report
from headtrace.report.data import load
from headtrace.schema import tag
from headtrace.store import HEADS, RUNS, ResultsDir, read_results, slug
from test_report import FIGURE_STATE, browser, hover, open_page  # noqa: F401 (browser: the fixture)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


# --------------------------------------------------------------------------------------------
# Panel files.

HUB_FAMILY = """name = "poly"
[screen]
n_examples = 8
[[models]]
id = "EleutherAI/pythia-160m-seed{seed}"
seeds = [1, 2, 3]
seed0 = "EleutherAI/pythia-160m"
revisions = "log:4"
expect = { F2 = "gradual" }
"""

ORGANISM_FAMILY = (
    """name = "orgs"
[screen]
n_examples = 8
seq_len = 63
id_low = 3
id_high = 64
prepend_bos = true
baseline = "clean"
batch_size = 8
[[models]]
id = "tiny-s{seed}"
source = "organism"
path = "organisms/tiny-s{seed}"
seeds = [0, 1, 2]
train = true
revisions = "all"
"""
    "organism = { n_layers = 2, n_heads = 2, d_model = 32, d_mlp = 64, vocab_size = 64, span_min = 4, span_max = 12, "
    "spans_per_sequence = 2, steps = 6, batch_size = 4, n_checkpoints = 4, checkpoint_every = 0, "
    "checkpoint_loss_drop = 0 }\n"
)


def write(folder: Path, text: str, name: str = "p.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_hub_entry_expands_into_one_model_per_seed(tmp_path):
    panel = load_panel(write(tmp_path, HUB_FAMILY))
    assert [(m.id, m.family, m.seed) for m in panel.models] == [
        ("EleutherAI/pythia-160m", "EleutherAI/pythia-160m", 0),
        ("EleutherAI/pythia-160m-seed1", "EleutherAI/pythia-160m", 1),
        ("EleutherAI/pythia-160m-seed2", "EleutherAI/pythia-160m", 2),
        ("EleutherAI/pythia-160m-seed3", "EleutherAI/pythia-160m", 3),
    ]
    assert all(m.revisions == "log:4" and m.source == "hub" and m.organism is None for m in panel.models)
    assert panel.expectations == {m.id: {"F2": "gradual"} for m in panel.models}
    assert default_family("organism-dense-s{seed}") == "organism-dense"
    assert default_family("EleutherAI/pythia-160m-data-seed{seed}") == "EleutherAI/pythia-160m-data"
    single = load_panel(write(tmp_path, 'name = "one"\n[[models]]\nid = "a/b"\nrevisions = "all"\n'))
    assert (single.models[0].family, single.models[0].seed) == (None, None)


def test_an_organism_entry_expands_with_each_members_seed_and_settings(tmp_path):
    panel = load_panel(
        write(
            tmp_path,
            ORGANISM_FAMILY.replace("seeds = [0, 1, 2]", 'seeds = [4, 7]\nfamily = "tiny"').replace(
                "checkpoint_loss_drop = 0 }", 'checkpoint_loss_drop = 0, vary = "data" }'
            ),
        )
    )
    assert [(m.id, m.family, Path(m.path).name) for m in panel.models] == [
        ("tiny-s4", "tiny", "tiny-s4"),
        ("tiny-s7", "tiny", "tiny-s7"),
    ]
    organisms = [m.organism for m in panel.models]
    assert [(o.corpus.seed, o.train.seed) for o in organisms] == [(4, 0), (7, 0)]  # vary = "data": init fixed
    assert organisms[0].train.checkpoint_every is None and organisms[0].train.steps == 6
    assert organisms[0].recipe.n_layers == 2 and organisms[0].corpus.vocab_size == 64


BAD_ENTRIES = [
    ("seeds = [1, 2]\n", "put {seed} in it"),
    ('id = "x/y-seed{seed}"\n', "holds {seed} but the entry has no seeds"),
    ('seeds = []\nid = "x/y-{seed}"\n', "seeds is empty"),
    ('seeds = [1, 1]\nid = "x/y-{seed}"\n', "seed 1 is listed twice"),
    ('seeds = [-1]\nid = "x/y-{seed}"\n', "seeds must be >= 0"),
    ('seeds = ["a"]\nid = "x/y-{seed}"\n', "'seeds' must be a list of integers"),
    ('seeds = [0, 1]\nid = "x/y-{seed}"\nseed0 = "x/y"\n', "seed 0 is both in seeds and named by seed0"),
    ('seed0 = "x/y"\n', "seed0 belongs to a seed family"),
    ("train = true\n", 'set source = "organism"'),
    ('seeds = [1]\nid = "x/y-{seed}"\nsource = "local"\npath = "runs"\n', "put {seed} in path"),
    ('seeds = [1]\nid = "x/y-{seed}"\nsource = "local"\npath = "r{seed}"\nseed0 = "x/y"\n', "for local folders put 0"),
]


@pytest.mark.parametrize("extra, message", BAD_ENTRIES)
def test_bad_family_entries_name_the_file_and_line(tmp_path, extra, message):
    text = 'name = "bad"\n[[models]]\nid = "x/y"\nrevisions = "all"\n' + extra
    if text.count("\nid = ") > 1:  # the entry's own id replaces the default one
        text = text.replace('id = "x/y"\n', "", 1)
    with pytest.raises(HeadtraceError, match=f"^{tmp_path / 'p.toml'}:\\d+: .*" + _escaped(message)):
        load_panel(write(tmp_path, text))


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("steps = 6,", "steps = 0,", "organism settings: steps must be >= 1"),
        ("steps = 6,", "stepz = 6,", "unknown organism setting 'stepz'; did you mean 'steps'?"),
        ("steps = 6,", "steps = 6, seed = 3,", "organism.seed is set by the family"),
        ("steps = 6,", 'steps = "6",', "organism.steps must be an integer (got '6')"),
        ("steps = 6,", 'steps = 6, vary = "all",', "organism.vary = 'all' is not one of: both, data, weights"),
        ("train = true\n", "", "organism settings say what to train: add train = true"),
    ],
)
def test_bad_organism_settings_name_the_line_before_any_training(tmp_path, old, new, message):
    text = ORGANISM_FAMILY.replace(old, new)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("organism ="))
    with pytest.raises(HeadtraceError, match=f"p.toml:{line}: {_escaped(message)}"):
        load_panel(write(tmp_path, text))
    assert not (tmp_path / "organisms").exists()


def test_a_family_declared_twice_or_a_member_listed_twice_is_refused(tmp_path):
    second = ORGANISM_FAMILY[ORGANISM_FAMILY.index("[[models]]") :]
    with pytest.raises(HeadtraceError, match="family 'tiny' is declared twice"):
        load_panel(
            write(
                tmp_path,
                ORGANISM_FAMILY
                + second.replace("tiny-s{seed}", "other-s{seed}").replace(
                    'id = "other', 'family = "tiny"\nid = "other'
                ),
            )
        )
    with pytest.raises(HeadtraceError, match="model 'tiny-s1' is listed twice"):
        load_panel(write(tmp_path, ORGANISM_FAMILY + '[[models]]\nid = "tiny-s1"\nrevisions = "all"\n'))


# --------------------------------------------------------------------------------------------
# A planted family: hand-made shards with known trajectories, one member lacking a revision.

FAMILY = "org/planted"
TOKENS = [1e9 * 2**r for r in range(6)]
NAMES = [f"step{2**r}" for r in range(6)]
N_LAYERS, N_HEADS = 4, 4
# seed -> sink heads per revision (filled from the top layer down), circuit heads (80x from revision
# `start` on), PR lead of the circuit heads in revisions, null selectivity of the other heads, gap.
PLANTED = {
    0: dict(sinks=[0, 0, 2, 8, 8, 8], circuit=["L1H0", "L1H1", "L2H0"], start=2, lead=1, null=1.0),
    1: dict(sinks=[0, 2, 4, 6, 8, 10], circuit=["L1H2", "L1H3", "L2H1"], start=1, lead=0, null=1.0),
    2: dict(sinks=[0, 0, 8, 8, 8, 8], circuit=["L2H0", "L2H1", "L2H2", "L2H3"], start=3, lead=-1, null=500.0),
    3: dict(sinks=[0, 0, 3, 6, 8, 8], circuit=["L3H0", "L3H1"], start=2, lead=1, null=1.0, gap="step8"),
}
SINGLE = "org/single"


def head_index(name: str) -> int:
    layer, head = name[1:].split("H")
    return int(layer) * N_HEADS + int(head)


def planted_shards(model: str, plant: dict) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """(heads, run) per revision of one planted model."""
    size = N_LAYERS * N_HEADS
    circuit = [head_index(h) for h in plant["circuit"]]
    shards = []
    for r, (name, tokens) in enumerate(zip(NAMES, TOKENS)):
        if name == plant.get("gap"):
            continue
        heads = pd.DataFrame(
            {
                "model": model,
                "revision": name,
                "tokens": tokens,
                "layer": np.repeat(np.arange(N_LAYERS), N_HEADS),
                "head": np.tile(np.arange(N_HEADS), N_LAYERS),
            }
        )
        heads["head_id"] = [f"L{layer}H{head}" for layer, head in zip(heads.layer, heads["head"])]
        for key in CLASS_KEYS.values():
            heads[f"sel_{key}"] = 1.0
        first = np.ones(size)
        if plant["sinks"][r]:
            first[-plant["sinks"][r] :] = 100.0
        heads["sel_first"] = first
        induction = np.ones(size)
        if r >= plant["start"]:
            induction[circuit] = 80.0
        heads["sel_induction"] = induction
        pr = np.full(size, 2.0)
        if r >= plant["start"] - plant["lead"]:
            pr[circuit] = 20.0
        heads["pr"] = pr
        null = np.full(size, plant["null"] if r == 5 else 1.0)
        null[circuit] = 1.0
        heads["sel_null"] = null
        heads["sink_score"] = first / 200
        run = pd.DataFrame(
            [
                {
                    "model": model,
                    "revision": name,
                    "tokens": tokens,
                    "architecture": "gpt_neox",
                    "n_layers": N_LAYERS,
                    "n_heads": N_HEADS,
                    "probe": "synthetic",
                    "n_examples": 16,
                    "config_hash": "planted",
                    "device": "cpu",
                    "dtype": "float32",
                    "wall_s": 0.1,
                    "top1": min(1.0, 0.1 * r),
                    "n_sink_heads": plant["sinks"][r],
                }
            ]
        )
        shards.append((heads, run))
    return shards


def planted_results(out: Path) -> Path:
    """The planted family (seed s -> model org/planted-s{s}) and one single model, as `headtrace run`
    would leave them: tagged shards, and the manifest's record of the family and its gap."""
    gaps = []
    for seed, plant in PLANTED.items():
        model = f"{FAMILY}-s{seed}"
        for heads, run in planted_shards(model, plant):
            ResultsDir(out).write_shard(tag(heads, FAMILY, seed), tag(run, FAMILY, seed))
        if plant.get("gap"):
            gaps.append(Gap(FAMILY, seed, model, plant["gap"], TOKENS[NAMES.index(plant["gap"])]))
    for heads, run in planted_shards(SINGLE, PLANTED[1]):
        ResultsDir(out).write_shard(heads, run)

    class Member:
        def __init__(self, seed):
            self.id, self.family, self.seed = f"{FAMILY}-s{seed}", FAMILY, seed

    (out / "manifest.json").write_text(json.dumps(manifest_entry([Member(s) for s in PLANTED], gaps)))
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    out = planted_results(tmp_path_factory.mktemp("planted"))
    write_findings(out)
    return out


def test_only_members_carry_family_and_seed_columns(planted):
    heads, runs = read_results(planted)
    single = pd.read_parquet(planted / RUNS / "org--single@step1.parquet")
    assert "family" not in single.columns and "seed" not in single.columns
    member = pd.read_parquet(planted / HEADS / "org--planted-s3@step1.parquet")
    assert list(member.columns[:3]) == ["model", "family", "seed"] and set(member.seed) == {3}
    assert runs.loc[runs.model == SINGLE, "family"].isna().all()
    assert not ((runs.model == f"{FAMILY}-s3") & (runs.revision == "step8")).any()  # the gap: no shard, not filled


def summary(table: pd.DataFrame, code: str) -> tuple[str, dict]:
    row = table.loc[table.model.isna() & (table.family == FAMILY) & (table.finding == code)].iloc[0]
    return row.status, json.loads(row.numbers)


def plain_spread(values: list[float]) -> dict:
    """The median and range, written out with numpy."""
    values = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if not len(values):
        return {"n": 0, "median": None, "low": None, "high": None}
    return {
        "n": len(values),
        "median": float(np.median(values)),
        "low": float(values.min()),
        "high": float(values.max()),
    }


def check_spread(found: dict, values: list[float]) -> None:
    expected = plain_spread(values)
    assert {k: found[k] for k in expected} == pytest.approx(expected)


def test_every_finding_across_seeds_equals_a_plain_recomputation_from_the_per_seed_rows(planted):
    table = pd.read_parquet(planted / "findings.parquet")
    assert list(table.columns[:3]) == ["model", "family", "seed"]
    per_seed = table.loc[table.family.eq(FAMILY) & table.model.notna()]
    assert sorted(per_seed.seed.unique()) == [0, 1, 2, 3] and len(per_seed) == 4 * 9  # F1-F9
    for code in ("F1", "F2", "F3", "F4", "F5", "F6", "F7"):
        rows = per_seed.loc[per_seed.finding == code].sort_values("seed")
        numbers = [json.loads(n) for n in rows.numbers]
        status, found = summary(table, code)
        measurable = [s for s in rows.status if s != "not measurable"]
        counts = Counter(measurable)
        top = max(counts.values())
        leaders = [s for s in counts if counts[s] == top]
        assert len(leaders) == 1, (code, counts)  # the planted panel has no ties
        assert status == f"{leaders[0]} in {top}/{len(measurable)}", code
        assert found["counts"] == dict(Counter(rows.status)) and found["n_measurable"] == len(measurable)
        assert found["statuses"] == {str(s): st for s, st in zip(rows.seed, rows.status)}
        if code == "F1":
            check_spread(found["floor_sink_heads"], [n.get("floor_sink_heads") for n in numbers])
            check_spread(
                found["low_layers_never"], [len(n["low_layers_never"]) for n in numbers if "low_layers_never" in n]
            )
        if code == "F2":
            verdicts = [n["verdict"] for n in numbers if "verdict" in n]
            assert found["shapes"] == {"sharp": verdicts.count("sharp"), "gradual": verdicts.count("gradual")}
            check_spread(found["share"], [n.get("share") for n in numbers])
            check_spread(found["jump_to_tokens"], [n.get("jump_to_tokens") for n in numbers])
        if code == "F3":
            check_spread(found["ratio"], [n.get("ratio") for n in numbers])
            check_spread(found["induction_tokens"], [n["induction"]["tokens"] for n in numbers])
            check_spread(found["sink_tokens"], [n["sink"]["tokens"] for n in numbers])
        if code == "F4":
            check_spread(found["circuit_size"], [len(n["final_circuit"]) for n in numbers if "final_circuit" in n])
            for level in ("33%", "67%", "100%"):
                check_spread(found["levels"][level]["share"], [n["levels"][level]["share"] for n in numbers])
                check_spread(found["levels"][level]["tokens"], [n["levels"][level]["tokens"] for n in numbers])
        if code == "F5":
            check_spread(found["median_lead_revisions"], [n.get("median_lead_revisions") for n in numbers])
            assert found["fragile"] == [s for s, n in zip(rows.seed, numbers) if n.get("fragile")]
        if code == "F6":
            assert found["circuit_memberships"] == sum(n["circuit_memberships"] for n in numbers)
            assert found["below_null"] == {str(s): n["below_null"] for s, n in zip(rows.seed, numbers)}
        if code == "F7":
            assert found["earliest_layers"] == {str(s): n["earliest_layers"] for s, n in zip(rows.seed, numbers)}
            check_spread(found["median_earliest_layer"], [n["median_earliest_layer"] for n in numbers])
            for flag in ("in_middle", "floor_adjacent_later"):
                assert found[flag] == {str(s): n[flag] for s, n in zip(rows.seed, numbers)}
        assert found["missing"] == [
            {"family": FAMILY, "seed": 3, "model": f"{FAMILY}-s3", "revision": "step8", "tokens": 8e9}
        ]
        assert "seed 3 lacks step8" in table.loc[table.model.isna() & (table.finding == code), "statement"].iloc[0]
    # What the plant puts there: F2 sharp in 3 of 4 (seed 1 ramps), F3 holds in 2 of 3 measurable (seed 2's
    # sinks come first, seed 3 never has 3 induction heads), F5 holds in 3/4 (seed 2's PR lags its crossing).
    # F7: every seed's first sinks sit in the top layer (seed 2: the top two), never the middle first.
    assert [summary(table, c)[0] for c in ("F1", "F2", "F3", "F5", "F6", "F7")] == [
        "holds in 3/4",
        "sharp in 3/4",
        "holds in 2/3",
        "holds in 3/4",
        "holds in 3/4",
        "does not hold in 4/4",
    ]


def test_which_heads_and_when_across_seeds_equal_a_plain_count_from_the_heads(planted):
    """Each seed's own final circuit (its last revision, >= 50x) counted per layer, and the milestones,
    recomputed from the heads table alone."""
    heads, _ = read_results(planted)
    table = pd.read_parquet(planted / "findings.parquet")
    _, circuit = summary(table, "circuit")
    _, stones = summary(table, "milestones")
    sizes, layers, sink_first = {}, Counter(), {level: [] for level in (0.1, 0.3, 0.5, 0.7)}
    seeds_per_layer = Counter()
    for seed in PLANTED:
        mine = heads.loc[heads.model == f"{FAMILY}-s{seed}"]
        last = mine.loc[mine.tokens == mine.tokens.max()]
        members = last.loc[last.sel_induction >= 50]
        sizes[seed] = len(members)
        layers.update(members.layer.tolist())
        seeds_per_layer.update(set(members.layer.tolist()))
        assert circuit["heads"][str(seed)] == sorted(
            members.head_id.tolist(), key=lambda h: (-members.set_index("head_id").sel_induction[h], head_index(h))
        )
        fraction = mine.groupby("tokens").sel_first.apply(lambda s: (s >= 30).mean())
        for level in sink_first:
            reached = fraction.index[fraction.to_numpy() >= level - 1e-9]
            sink_first[level].append(float(reached[0]) if len(reached) else np.nan)
    check_spread(circuit["size"], list(sizes.values()))
    assert circuit["layers"] == {str(k): {"seeds": seeds_per_layer[k], "heads": layers[k]} for k in sorted(layers)}
    for level, tokens in sink_first.items():
        found = stones["milestones"][f"sink fraction >= {level:.0%}"]
        check_spread(found, tokens)
        assert found["reached"] == int(np.isfinite(tokens).sum())


def test_the_band_at_a_revision_leaves_out_the_member_that_lacks_it(planted):
    data = load(planted)
    ((name, panels, family),) = [s for s in data.series() if s[2]]
    assert name == FAMILY and [p.name for p in panels] == [f"{FAMILY}-s{s}" for s in PLANTED]
    band = across_seeds(panels, "screen_sink_fraction").set_index("revision")
    at8 = [PLANTED[s]["sinks"][3] / 16 for s in (0, 1, 2)]  # seed 3 has no step8
    assert band.loc["step8", "n"] == 3 and band.loc["step8", "median"] == pytest.approx(np.median(at8))
    assert (band.loc["step8", "low"], band.loc["step8", "high"]) == pytest.approx((min(at8), max(at8)))
    assert band.loc["step16", "n"] == 4
    assert any(
        "has no revision step8" in gap for gap in __import__("headtrace.report.data", fromlist=["x"]).panel_gaps(data)
    )


def test_results_without_a_family_keep_their_findings_table(planted, tmp_path):
    for heads, run in planted_shards(SINGLE, PLANTED[1]):
        ResultsDir(tmp_path).write_shard(heads, run)
    heads, runs = read_results(tmp_path)
    table = model_findings(heads, runs)
    pd.testing.assert_frame_equal(with_family_rows(table, heads, runs), table)
    assert list(write_findings(tmp_path).columns) == list(table.columns)
    assert "Seed families" not in (tmp_path / "findings.md").read_text()
    assert "## Seed families" in (planted / "findings.md").read_text()


def test_the_report_draws_each_family_with_its_band_in_chromium(planted, browser):  # noqa: F811 (the fixture)
    """Sink fraction: each family's median, its band over seeds and the faint seeds; milestones across
    seeds; which heads across seeds; the findings across seeds; every member's and the single model's
    own figures as before."""
    index = build_report(planted)
    page, log = open_page(browser, index)
    figures = {f["id"].removeprefix("fig-"): f for f in page.evaluate(FIGURE_STATE)}
    expected = {"sink-fraction", "milestones", f"circuits-{slug(FAMILY)}"} | {
        f"{kind}-{slug(model)}"
        for model in [f"{FAMILY}-s{s}" for s in PLANTED] + [SINGLE]
        for kind in ("sink-layers", "onset", "labels", "induction", "spectral", "recall")
    }
    assert {k for k, f in figures.items() if f["drawn"]} == expected
    assert all(f["shapes"] > 30 and f["width"] > 100 for f in figures.values() if f["drawn"])
    assert log["errors"] == [] and [u for u in log["requests"] if not u.startswith("data:")] == [index.as_uri()]
    band = page.evaluate("""() => Array.from(document.querySelectorAll('#fig-sink-fraction [data-tips]'))
        .filter((g) => JSON.parse(g.dataset.tips)[0].includes('band = min-max'))
        .map((g) => g.querySelectorAll('path').length)""")
    assert band == [1]  # one filled band: the family's range over seeds
    text, _ = hover(page, "fig-sink-fraction", f"{FAMILY} · step1 ", 3)
    at8 = sorted(PLANTED[s]["sinks"][3] / 16 for s in (0, 1, 2))
    assert text.startswith(f"{FAMILY} · step8 (8B)\nmedian {at8[1]:.1%} sink heads over 3 seeds")
    assert "seed 3" not in text  # it has no step8: left out, not filled
    text, _ = hover(page, "fig-milestones", f"{FAMILY}: induction >= 3", 0)
    assert "over 3/4 seeds" in text and "seed 0 4B" in text
    text, _ = hover(page, f"fig-circuits-{slug(FAMILY)}", "seed 0", 1 * N_LAYERS + 1)
    assert text.startswith(f"seed 1 ({FAMILY}-s1) · layer 1\n2 circuit heads: L1H2, L1H3")
    across = page.locator("#findings h3", has_text="across seeds")
    assert across.count() == 1 and page.locator("#findings td.status", has_text="sharp in 3/4").count() == 1
    assert "has no revision step8" in page.locator("#missing").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "report-seed-family.png", full_page=True)


# --------------------------------------------------------------------------------------------
# End to end: organisms trained and screened; a hub member lacking a revision.


def test_a_family_of_organisms_is_trained_and_screened_end_to_end(tmp_path):
    panel = load_panel(write(tmp_path, ORGANISM_FAMILY))
    run = run_panel(panel, tmp_path / "results")
    assert not run.failed and not run.missing and len(run.computed) == 3 * 4
    for seed in (0, 1, 2):
        meta = json.loads((tmp_path / "organisms" / f"tiny-s{seed}" / "organism.json").read_text())
        assert meta["complete"] and meta["organism"]["seed"] == seed and meta["organism"]["corpus"]["seed"] == seed
    weights = {
        (tmp_path / "organisms" / f"tiny-s{s}" / "step000006" / "model.safetensors").read_bytes() for s in (0, 1, 2)
    }
    assert len(weights) == 3  # three seeds, three different models
    heads, runs = read_results(tmp_path / "results")
    assert set(zip(runs.model, runs.family, runs.seed)) == {(f"tiny-s{s}", "tiny", s) for s in (0, 1, 2)}
    assert set(zip(heads.model, heads.family, heads.seed)) == set(zip(runs.model, runs.family, runs.seed))
    single = load_panel(
        write(
            tmp_path,
            'name = "one"\n'
            + ORGANISM_FAMILY[ORGANISM_FAMILY.index("[screen]") : ORGANISM_FAMILY.index("[[models]]")]
            + '[[models]]\nid = "x"\nsource = "organism"\npath = "organisms/tiny-s0"\nrevisions = "all"\n',
            "one.toml",
        )
    )
    assert set(runs.config_hash) == {single.screen.config_hash}  # families leave the config hash alone
    table = write_findings(tmp_path / "results")
    assert len(table) == 3 * 9 + 11 and table.model.isna().sum() == 11
    assert set(table.loc[table.model.isna(), "finding"]) == {
        "F1",
        "F2",
        "F3",
        "F4",
        "F5",
        "F6",
        "F7",
        "F8",
        "F9",
        "circuit",
        "milestones",
    }
    circuit = json.loads(table.loc[table.finding == "circuit", "numbers"].iloc[0])
    last = heads.loc[heads.revision == "step000006"]
    assert {s: sorted(h) for s, h in circuit["heads"].items()} == {
        str(s): sorted(last.loc[(last.seed == s) & (last.sel_induction >= 50), "head_id"]) for s in (0, 1, 2)
    }
    # Resumed: nothing trained again, nothing screened again.
    trained = []
    assert train_pending(panel, lambda organism, folder, model: trained.append(model)) == [] and trained == []
    assert len(run_panel(panel, tmp_path / "results").skipped) == 3 * 4


def test_a_folder_holding_something_else_is_refused_before_any_training(tmp_path):
    (tmp_path / "organisms" / "tiny-s1").mkdir(parents=True)
    (tmp_path / "organisms" / "tiny-s1" / "notes.txt").write_text("mine")
    panel = load_panel(write(tmp_path, ORGANISM_FAMILY))
    with pytest.raises(HeadtraceError, match=r"p.toml:\d+: '.*tiny-s1' is not empty and holds no organism"):
        run_panel(panel, tmp_path / "results")
    assert not (tmp_path / "organisms" / "tiny-s0").exists()


POLY = "EleutherAI/pythia-14m"
BRANCHES = ["main", "step4", "step8", "step16"]


def test_a_member_lacking_a_revision_is_reported_and_left_out(tmp_path, monkeypatch, capsys):
    """PolyPythias has gaps: seed 2 here has no step8. The panel says so before it starts, writes no
    shard for it, records it in the manifest, and the findings across seeds state it."""
    repos = [
        fake_repo(POLY, "gpt_neox", BRANCHES),
        fake_repo(f"{POLY}-seed1", "gpt_neox", BRANCHES),
        fake_repo(f"{POLY}-seed2", "gpt_neox", [b for b in BRANCHES if b != "step8"]),
    ]
    entry = f'[[models]]\nid = "{POLY}-seed{{seed}}"\nseeds = [1, 2]\nseed0 = "{POLY}"\n'
    with HubServer(repos) as hub:
        point_hub_env(monkeypatch, hub.url, tmp_path / "hf")
        typo = write(tmp_path, f'name = "poly"\n{SCREEN}{entry}revisions = ["step4", "step9"]\n', "typo.toml")
        with pytest.raises(
            HeadtraceError,
            match=r"typo.toml:\d+: EleutherAI/pythia-14m: revision 'step9' does not "
            "exist; closest: step8, step4, step16",
        ):
            run_panel(load_panel(typo), tmp_path / "typo")
        assert hub.downloads() == []
        path = write(tmp_path, f'name = "poly"\n{SCREEN}{entry}revisions = ["step4", "step8"]\n')
        monkeypatch.setattr(sys, "argv", ["headtrace", "run", str(path), "--out", str(tmp_path / "out")])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 0
        said = " ".join(capsys.readouterr().err.split())
        assert (
            f"missing: {POLY}-seed2 (seed 2 of {POLY}) has no revision step8: left out of that revision's "
            "statistics, not filled"
        ) in said
        assert not [r for r in hub.downloads() if f"{POLY}-seed2/resolve/step8" in r["path"]]
    heads, runs = read_results(tmp_path / "out")
    assert sorted(zip(runs.seed, runs.revision)) == [
        (0, "step4"),
        (0, "step8"),
        (1, "step4"),
        (1, "step8"),
        (2, "step4"),
    ]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["missing"] == [
        {"family": POLY, "seed": 2, "model": f"{POLY}-seed2", "revision": "step8", "tokens": 8 * 2097152}
    ]
    assert manifest["families"] == {POLY: {"0": POLY, "1": f"{POLY}-seed1", "2": f"{POLY}-seed2"}}
    table = write_findings(tmp_path / "out")
    across = table.loc[table.model.isna()]
    assert len(across) == 11 and across.statement.str.contains("seed 2 lacks step8").all()


def test_the_shipped_polypythia_panel_is_ten_seeds_with_the_study_settings():
    panel = load_panel(ROOT / "panels" / "polypythia-160m.toml")
    study = load_panel(ROOT / "panels" / "xu2026.toml")
    assert [(m.id, m.seed) for m in panel.models] == [("EleutherAI/pythia-160m", 0)] + [
        (f"EleutherAI/pythia-160m-seed{s}", s) for s in range(1, 10)
    ]
    assert {m.family for m in panel.models} == {"EleutherAI/pythia-160m"}
    assert all(m.revisions == study.models[0].revisions for m in panel.models)
    assert panel.screen.config_hash == study.screen.config_hash


def test_the_findings_command_prints_each_family_across_seeds(planted, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")  # no cell wraps
    monkeypatch.setattr(sys, "argv", ["headtrace", "findings", str(planted)])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"{FAMILY} (across seeds)" in printed and "sharp in 3/4" in printed and f"{FAMILY}-s3" in printed


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "2", "--compare"], "--seeds and --compare do not combine"),
        (["--seeds", "2", "--steps", "0"], "steps must be >= 1"),
    ],
)
def test_demo_seeds_bad_input_is_one_line_before_any_training(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setattr(sys, "argv", ["headtrace", "demo", "--out", str(tmp_path / "demo"), *args])
    with pytest.raises(SystemExit) as done:
        main()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 2 and len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "demo" / "organisms").exists()
