"""Ablation on a real pretrained model, offline: SmolLM2-135M's induction circuit (from its screen) is
necessary: ablating it costs far more top-1 than ablating matched-random heads of the same layers."""

import pytest

from headtrace.ablation import AblationConfig, ablate, circuit_from_screen
from headtrace.screen import ScreenConfig, build_probe, screen

pytestmark = pytest.mark.slow  # ~20 s to load, then a screen, a clean pass and 5 conditions from layer 17 on


def test_the_screens_induction_circuit_is_necessary(smollm2):
    config = ScreenConfig(n_examples=64, seq_len=256)
    probe = build_probe(config, lambda: None)
    circuit = circuit_from_screen(screen(smollm2, probe, config).heads, "induction")
    assert {(17, 3), (18, 7)} <= set(circuit)
    result = ablate(smollm2, probe, circuit, AblationConfig(seeds=3, singles=False, n_bootstrap=1000), config,
                    "SmolLM2-135M")
    print(result.table[["condition", "heads", "top1", "top5", "loss", "mean_logit_answer"]].to_string())
    print(result.table.iloc[0][["differential", "differential_low", "differential_high", "verdict"]].to_dict())
    table = result.table.set_index("condition")
    first = result.table.iloc[0]
    assert first.decided_by == "top1" and first.verdict == "necessary"
    assert first.differential_low > 0.2
    assert table.loc["circuit", "top1"] < table.loc["clean", "top1"] - 0.3
    assert (table.loc["random", "top1"] > table.loc["circuit", "top1"] + 0.2).all()
