"""The screen on a real pretrained model, offline: SmolLM2-135M (30 layers x 9 heads, 3 KV heads)."""

import pytest

pytestmark = pytest.mark.slow  # ~20 s to load the GGUF, ~30 s to screen 48 sequences on 2 cores


@pytest.fixture(scope="module")
def result(smollm2_screen):
    return smollm2_screen[2]


def test_finds_the_induction_heads(result):
    """Measured at n = 48 (and n = 256): L17H3 178x, L18H7 155x, L18H6 129x, L17H4 103x, L18H8, L17H5."""
    circuit = set(result.heads.loc[result.heads.induction_circuit, "head_id"])
    assert {"L17H3", "L18H6", "L18H7", "L17H4"} <= circuit
    assert circuit <= {"L17H3", "L17H4", "L17H5", "L18H6", "L18H7", "L18H8"}
    top = result.heads.sort_values("sel_induction", ascending=False).iloc[0]
    assert top.head_id == "L17H3" and top.sel_induction > 100


def test_finds_the_sink_heads(result):
    """Measured: 207/270 sink heads (76.7%), none in layers 0-1; Gu et al. share 66%."""
    heads = result.heads
    assert 0.70 <= heads.sink.mean() <= 0.85
    assert heads.loc[heads.layer <= 1, "sink"].sum() == 0
    assert heads.gu_sink.mean() > 0.6
    # Sink heads put most of every row's attention on the first token.
    assert heads.loc[heads.sink, "sink_score"].median() > 0.5
    # Previous-token heads: 17 are the reference's circuit (best class previous-token, >= 100x) at n = 64;
    # more reach 100x while attending to the first token most (previous_any).
    assert result.run.iloc[0].n_previous_heads == heads.previous_circuit.sum() >= 10
    assert heads.previous_any.sum() >= 30 and (heads.previous_circuit <= heads.previous_any).all()
