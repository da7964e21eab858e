"""Group ablation: a hand-set induction circuit, equalities with independent computations on tiny
random models, circuits and their errors, shortfall, determinism, the bootstrap, storage."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from headtrace.ablation import (
    AblationConfig,
    Condition,
    ablate,
    ablate_checkpoint,
    circuit_from_screen,
    conditions_for,
    differential,
    matched_random,
    run_conditions,
)
from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.schema import check_heads_exist, parse_circuit
from headtrace.screen import ScreenConfig, screen
from headtrace.probes import build_probe
from headtrace.store import ResultsDir
from induction_model import ID_LOW, INDUCTION_HEAD, PREVIOUS_HEAD, SEQ_LEN, VOCAB, induction_model
from models_zoo import tiny_model
from naive import reference_stats
from report_panels import ablation_rows

SMALL = ScreenConfig.of(n_examples=12, seq_len=48, batch_size=4)
ARCHS = ["gpt2", "gpt_neox", "llama", "olmoe"]


@pytest.fixture(scope="module")
def small_probe():
    return build_probe(SMALL.probe, lambda: None)


# --------------------------------------------------------------------------------------------
# The known circuit.


@pytest.fixture(scope="module")
def induction():
    config = ScreenConfig.of(n_examples=32, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB, batch_size=16)
    probe = build_probe(config.probe, lambda: None)
    adapter = ModelAdapter(induction_model())
    return adapter, probe, config, screen(adapter, probe, config).heads


def test_screen_finds_exactly_the_hand_set_heads(induction):
    *_, heads = induction
    assert circuit_from_screen(heads, "induction") == (INDUCTION_HEAD,)
    assert circuit_from_screen(heads, "previous-token") == (PREVIOUS_HEAD,)
    assert circuit_from_screen(heads, "sink") == ()
    labels = dict(zip(zip(heads.layer, heads["head"]), heads.label))
    assert labels.pop(INDUCTION_HEAD) == "induction" and labels.pop(PREVIOUS_HEAD) == "previous-token"
    assert set(labels.values()) == {"unclassified"}


@pytest.mark.parametrize("circuit", ["induction", "previous-token"])
def test_ablating_the_circuit_kills_induction_and_random_heads_do_not(induction, circuit):
    adapter, probe, config, heads = induction
    result = ablate(
        adapter,
        probe,
        circuit_from_screen(heads, circuit),
        AblationConfig(circuit=circuit, draws=4, n_bootstrap=200),
        config,
    )
    table = result.table.set_index("condition")
    assert table.loc["clean", "top1"] > 0.9
    assert table.loc["circuit", "top1"] <= 0.05
    assert (table.loc["random", "top1"] > 0.9).all()
    assert table.loc["layers", "top1"] <= 0.05 and table.loc["single", "top1"] <= 0.05
    first = result.table.iloc[0]
    assert first.verdict == "necessary" and first.decided_by == "top1"
    assert first.differential > 0.85 and first.differential_low > 0.8


# --------------------------------------------------------------------------------------------
# Independent computations on tiny random models.


@pytest.mark.parametrize("arch", ARCHS)
def test_nothing_ablated_is_the_clean_run(arch, small_probe):
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    nothing, some = Condition("circuit", ()), Condition("circuit", ((1, 2),))
    for strategy, stack in (("naive", 1), ("replay", 1), ("replay", 3)):
        stats = run_conditions(
            adapter,
            small_probe,
            [Condition("clean", ()), nothing, some, nothing],
            batch_size=5,
            stack=stack,
            strategy=strategy,
        )
        if stack == 1:  # the same shapes as the clean pass: bit for bit
            assert np.array_equal(stats[1], stats[0]) and np.array_equal(stats[3], stats[0])
        else:  # a stacked batch may round differently in the last bit
            np.testing.assert_allclose(stats[[1, 3]], stats[[0, 0]], rtol=1e-6, atol=1e-6)
        assert not np.allclose(stats[2], stats[0])
    np.testing.assert_allclose(stats[0], reference_stats(model, small_probe), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_head_ablated_is_a_model_without_attention_output(arch, small_probe):
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    layout = adapter.layout
    every = tuple((l, h) for l in range(layout.n_layers) for h in range(layout.n_heads))

    def attention_output_is_projected_zeros(layer):
        proj = adapter.out_proj[layer]

        def hook(_module, _args, output):
            attn_output = output[0] if isinstance(output, tuple) else output
            zero = proj(torch.zeros(1, 1, layout.n_heads * layout.head_dim)).expand_as(attn_output)
            return (zero, *output[1:]) if isinstance(output, tuple) else zero

        return hook

    hooks = [(adapter.attention[l], attention_output_is_projected_zeros(l)) for l in range(layout.n_layers)]
    expected = reference_stats(model, small_probe, hooks)
    stats = run_conditions(
        adapter,
        small_probe,
        [Condition("clean", ()), Condition("layers", ((1, 0),)), Condition("layers", every)],
        batch_size=5,
        stack=2,
    )
    np.testing.assert_allclose(stats[2], expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(stats[0], expected, atol=1e-3)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox"])
def test_mean_mode_replaces_a_head_by_its_mean_output(arch, small_probe):
    """Against a post-hook on the output projection that adds proj(mean - x) for the head's slice."""
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    layout, (layer, head) = adapter.layout, (1, 2)
    cols = slice(head * layout.head_dim, (head + 1) * layout.head_dim)
    proj = adapter.out_proj[layer]
    total = torch.zeros(layout.head_dim, dtype=torch.float64)

    def record(_module, args, _output):
        nonlocal total
        total += args[0][..., cols].sum(dim=(0, 1), dtype=torch.float64)

    reference_stats(model, small_probe, [(proj, record)])
    mean = (total / (small_probe.n * small_probe.seq_len)).float()

    def replace(_module, args, output):
        delta = torch.zeros_like(args[0])
        delta[..., cols] = mean - args[0][..., cols]
        weight = proj.weight.T if isinstance(proj, torch.nn.Linear) else proj.weight  # GPT-2 Conv1D: [in, out]
        return output + delta @ weight

    expected = reference_stats(model, small_probe, [(proj, replace)])
    stats = run_conditions(
        adapter, small_probe, [Condition("clean", ()), Condition("single", ((layer, head),))], mode="mean", batch_size=5
    )
    np.testing.assert_allclose(stats[1], expected, rtol=1e-4, atol=1e-4)
    zero = run_conditions(
        adapter, small_probe, [Condition("clean", ()), Condition("single", ((layer, head),))], mode="zero", batch_size=5
    )
    assert not np.allclose(zero[1], stats[1])


def test_replay_and_stacking_equal_one_pass_per_condition(small_probe):
    adapter = ModelAdapter(tiny_model("gpt_neox"))
    conditions = conditions_for(((1, 0), (1, 3)), adapter.layout, AblationConfig(draws=3))
    fast = run_conditions(adapter, small_probe, conditions, mode="mean", batch_size=5, stack=4)
    naive = run_conditions(adapter, small_probe, conditions, mode="mean", batch_size=5, strategy="naive")
    np.testing.assert_allclose(fast, naive, rtol=1e-5, atol=1e-5)
    # Without room to keep the clean pass's residual stream, it is recomputed: the same numbers.
    recomputed = run_conditions(adapter, small_probe, conditions, mode="mean", batch_size=5, stack=4, cache_mb=0)
    assert np.array_equal(recomputed, fast)


# --------------------------------------------------------------------------------------------
# Circuits, conditions, shortfall.


@pytest.mark.parametrize(
    "text, message",
    [
        ("L2H0", "head L2H0 does not exist in tiny: valid heads are L0H0..L1H3 (2 layers x 4 heads)"),
        ("L1H4", "head L1H4 does not exist"),
        ("L1H1,foo", "bad head 'foo'"),
        ("l1h1", "bad head 'l1h1'"),
        (" , ", "the circuit is empty"),
    ],
)
def test_bad_circuit_strings(text, message):
    layout = ModelAdapter(tiny_model("llama")).layout
    with pytest.raises(HeadtraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_heads_exist(parse_circuit(text).heads, layout.n_layers, layout.n_heads, "tiny")


def test_head_lists_parse_sorted_and_deduplicated():
    assert parse_circuit("L1H3, L0H2,L1H3").heads == ((0, 2), (1, 3))


def test_matched_random_sets_and_shortfall():
    layout = ModelAdapter(tiny_model("llama")).layout  # 2 layers x 4 heads
    circuit = ((0, 1), (1, 0), (1, 2))
    conditions = conditions_for(circuit, layout, AblationConfig(draws=6))
    assert [c.kind for c in conditions] == ["clean", "circuit"] + ["random"] * 6 + ["layers"] + ["single"] * 3
    for c in conditions[2:8]:
        assert not set(c.heads) & set(circuit) and c.shortfall == 0
        assert sorted(l for l, _ in c.heads) == [0, 1, 1]  # same layers, same count per layer
    assert len({c.heads for c in conditions[2:8]}) > 1  # seeds differ
    assert conditions[8].heads == tuple((l, h) for l in (0, 1) for h in range(4))
    # Layer 1 holds one other head for three circuit heads: two are missing, and the row says so.
    heads, shortfall = matched_random(((1, 0), (1, 1), (1, 2), (0, 0)), 4, np.random.default_rng(0))
    assert shortfall == 2 and sorted(l for l, _ in heads) == [0, 1] and (1, 3) in heads


def test_shortfall_is_stored(small_probe):
    adapter = ModelAdapter(tiny_model("gpt2"))
    table = ablate(adapter, small_probe, ((1, 0), (1, 1), (1, 2)), AblationConfig(draws=2, n_bootstrap=50), SMALL).table
    random = table[table.condition == "random"]
    assert list(random.shortfall) == [2, 2] and list(random.heads) == ["L1H3", "L1H3"]
    assert list(random.n_ablated) == [1, 1]


def test_empty_circuit_is_an_error():
    with pytest.raises(HeadtraceError, match="empty"):
        conditions_for((), ModelAdapter(tiny_model("gpt2")).layout, AblationConfig())


# --------------------------------------------------------------------------------------------
# Determinism, the bootstrap.


def test_same_seed_same_table_and_another_seed_other_draws(small_probe):
    adapter = ModelAdapter(tiny_model("llama"))
    config = AblationConfig(draws=3, n_bootstrap=100)
    first = ablate(adapter, small_probe, ((1, 1),), config, SMALL, "tiny", "r1").table
    again = ablate(adapter, small_probe, ((1, 1),), config, SMALL, "tiny", "r1").table
    pd.testing.assert_frame_equal(first, again, check_exact=True)
    other = ablate(adapter, small_probe, ((1, 1),), dataclasses.replace(config, seed=1), SMALL, "tiny", "r1").table
    assert list(other.heads) != list(first.heads) or other.differential_low[0] != first.differential_low[0]


def test_bootstrap_interval():
    rng = np.random.default_rng(0)
    # No variation: the interval is the point.
    assert differential(np.zeros(50), np.ones((4, 50)), "top1", 200, rng) == pytest.approx((1.0, 1.0, 1.0))
    # Loss: damage is a rise, so a circuit that raises the loss more has a positive differential.
    point, low, high = differential(np.full(50, 3.0), np.full((4, 50), 2.0), "loss", 200, rng)
    assert (point, low, high) == pytest.approx((1.0, 1.0, 1.0))
    # Pure noise: the interval holds 0 and has about the width of the standard error.
    circuit = rng.integers(0, 2, 400).astype(float)
    random = rng.integers(0, 2, (10, 400)).astype(float)
    point, low, high = differential(circuit, random, "top1", 2000, np.random.default_rng(1))
    assert low < 0 < high and low <= point <= high
    assert 0.05 < high - low < 0.2  # ~ 4 x sqrt(0.25 / 400) for the circuit's mean, plus the seeds'
    # Seeds that disagree widen the interval: it resamples seeds too.
    spread = np.repeat(np.linspace(0, 1, 10)[:, None], 400, axis=1)
    _, low_s, high_s = differential(np.full(400, 0.5), spread, "top1", 2000, np.random.default_rng(1))
    assert high_s - low_s > 0.2
    again = differential(circuit, random, "top1", 2000, np.random.default_rng(1))
    assert again == (point, low, high)


# --------------------------------------------------------------------------------------------
# Storage: the report's schema, stored screens, resume.


def test_stored_table_has_the_report_schema_and_reuses_a_stored_screen(tmp_path):
    model = tiny_model("gpt_neox")
    path = tmp_path / "ckpt"
    model.save_pretrained(path)
    adapter = ModelAdapter(model)
    probe = build_probe(SMALL.probe, lambda: None)
    stored = screen(adapter, probe, SMALL, model_name=str(path), revision="r1")
    stored.heads["sink"] = stored.heads.head_id.isin(["L1H1", "L0H3"])  # a stored screen we can recognise
    ResultsDir(tmp_path / "out").write_shard(stored.heads, stored.run)
    config = AblationConfig(circuit="sink", draws=3, n_bootstrap=100)
    result = ablate_checkpoint(str(path), "r1", SMALL, config, out=tmp_path / "out", adapter=adapter)
    assert result.circuit_source == "stored screen"
    table = ResultsDir(tmp_path / "out").read_ablations()
    assert set(ablation_rows("m", "r", 1.0).columns) <= set(table.columns)
    assert table.circuit_heads[0] == "L0H3,L1H1" and table.circuit[0] == "sink"
    assert list(table.condition.unique()) == ["clean", "circuit", "random", "layers", "single"]
    assert ResultsDir(tmp_path / "out").ablation_path(str(path), "r1").is_file()
    assert ResultsDir(tmp_path / "out").stored_ablation_hash(str(path), "r1") == config.config_hash(SMALL)
    assert ResultsDir(tmp_path / "out").stored_ablation_hash(str(path), "r1") != dataclasses.replace(
        config, draws=4
    ).config_hash(SMALL)
    # Another screen config: the stored screen does not apply and a new one runs.
    other = SMALL.replace(induction_threshold=0.0)
    again = ablate_checkpoint(
        str(path), "r1", other, dataclasses.replace(config, circuit="induction"), out=tmp_path / "out2", adapter=adapter
    )
    assert again.circuit_source == "screened" and again.table.n_ablated[1] == 8
