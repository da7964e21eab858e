"""The probe's selectivity ceilings and the clean baseline, against independent computations: a
hand-set head that attends only to its target, screened through the real screen, and a naive
baseline cleaned from full attention patterns (`output_attentions=True`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headtrace.models import ModelAdapter
from headtrace.probes import ProbeSpec, baseline_positions, clean_baseline, selectivity_ceilings, synthetic_induction
from headtrace.schema import ScreenConfig, ceiling_warnings, planned_ceilings
from headtrace.screen import screen
from induction_model import ID_LOW, INDUCTION_HEAD, SEQ_LEN, VOCAB, induction_model
from models_zoo import tiny_model
from naive import full_patterns


def sharp_induction_model():
    """The hand-set induction model with its induction head's queries scaled up: its attention
    from the query is then all on the induction target (to float precision)."""
    model = induction_model()
    layer, head = INDUCTION_HEAD
    attn = model.transformer.h[layer].attn
    width = attn.c_attn.weight.shape[1] // 3
    head_dim = width // model.config.n_head
    with torch.no_grad():
        attn.c_attn.weight[:, head * head_dim : (head + 1) * head_dim] *= 40.0
    return model


def single_match_examples(probe) -> np.ndarray:
    """Examples where the query token occurs once before the query, right before the target."""
    keep = []
    for i, ids in enumerate(probe.input_ids):
        q = probe.query[i]
        keep.append(probe.induction[i] >= 0 and (ids[:q] == ids[q]).sum() == 1)
    return np.flatnonzero(keep)


@pytest.mark.parametrize("baseline", ["reference", "clean"])
def test_a_head_with_all_its_attention_on_the_target_scores_the_ceiling(baseline):
    config = ScreenConfig.of(n_examples=160, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB, baseline=baseline)
    probe = synthetic_induction(ProbeSpec(n_examples=160, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB))
    probe = probe.subset(single_match_examples(probe))
    if baseline == "clean":
        probe = clean_baseline(probe)
    model = sharp_induction_model()
    heads = screen(ModelAdapter(model), probe, config).heads.set_index("head_id")
    layer, head = INDUCTION_HEAD
    row = heads.loc[f"L{layer}H{head}"]
    assert row.mean_induction > 0.999  # the brute-force head: all attention on the target
    ceiling = selectivity_ceilings(probe)["induction"]
    # Independently: the share of examples whose target is one of their baseline positions, over 50.
    inside = np.mean([probe.induction[i] in probe.baseline[i] for i in range(probe.n)])
    if baseline == "reference":
        assert inside > 0.15
        np.testing.assert_allclose(ceiling, 1 / (inside / 50), rtol=1e-12)
        np.testing.assert_allclose(row.sel_induction, ceiling, rtol=2e-3)
    else:
        assert inside == 0 and ceiling == 1e8
        assert row.sel_induction > 1e4  # only softmax leakage bounds it: far above any reference ceiling


def test_ceilings_at_the_demo_and_study_lengths():
    """T = 63 plus BOS (the organism's length) and T = 256 (the study's)."""
    short = synthetic_induction(ProbeSpec(n_examples=2000, seq_len=63, id_low=3, id_high=256), bos_token_id=0)
    study = synthetic_induction(ProbeSpec())
    assert round(selectivity_ceilings(short)["induction"], 1) == 61.3
    assert round(selectivity_ceilings(study)["induction"]) == 238
    assert round(selectivity_ceilings(study)["duplicate"]) == 251
    for probe in (short, study):
        ceilings = selectivity_ceilings(probe)
        assert ceilings["first"] == ceilings["previous"] == ceilings["self"] == 1e8  # never in the baseline
        assert ceilings["local"] == 0.25 / 1e-8  # all attention on four targets: 1/4 each
        assert all(v == 1e8 for k, v in selectivity_ceilings(clean_baseline(probe)).items() if k != "local")


def test_the_clean_baseline_equals_a_naive_one_from_full_patterns():
    probe = synthetic_induction(ProbeSpec(n_examples=24, seq_len=64))
    clean = clean_baseline(probe)
    model = tiny_model("gpt_neox")
    heads = screen(ModelAdapter(model), clean, ScreenConfig.of(batch_size=5, baseline="clean")).heads
    patterns, _, _ = full_patterns(model, probe)
    q = probe.query[0]
    reference = baseline_positions(q)
    naive = []
    for i in range(probe.n):
        own = {probe.induction[i], probe.duplicate[i]}
        kept = [p for p in reference if p not in own]
        assert len(kept) >= 48
        naive.append(patterns[:, i, :, q, :][..., kept].mean(axis=-1))  # [layers, heads]
    naive_baseline = np.mean(naive, axis=0)
    shape = naive_baseline.shape
    np.testing.assert_allclose(heads.mean_baseline.to_numpy().reshape(shape), naive_baseline, rtol=1e-5)
    induction = np.mean([patterns[:, i, :, q, probe.induction[i]] for i in range(probe.n) if probe.valid[i]], axis=0)
    np.testing.assert_allclose(heads.sel_induction.to_numpy().reshape(shape), induction / naive_baseline, rtol=1e-5)
    # Some example had its target among the reference positions, so the two baselines differ.
    assert (clean.baseline < 0).any()


def test_threshold_warnings_name_the_threshold_and_the_ceiling():
    demo = ScreenConfig.of(n_examples=256, seq_len=63, id_low=3, id_high=256, prepend_bos=True)
    warnings = ceiling_warnings(demo, planned_ceilings(demo))
    assert len(warnings) == 1 and "induction threshold 50x" in warnings[0] and "62.7x" in warnings[0]
    assert not ceiling_warnings(ScreenConfig(), planned_ceilings(ScreenConfig()))  # 50 < 238 / 2
    clean = ScreenConfig.of(n_examples=256, seq_len=63, id_low=3, id_high=256, prepend_bos=True, baseline="clean")
    assert not ceiling_warnings(clean, planned_ceilings(clean))


def test_the_baseline_is_in_the_hash_and_the_default_hash_is_unchanged():
    assert ScreenConfig().config_hash == "b1268a110f458fad"  # results written before the option keep their hash
    assert ScreenConfig.of(baseline="clean").config_hash != ScreenConfig().config_hash
    with pytest.raises(Exception, match="unknown baseline 'tidy'"):
        ScreenConfig.of(baseline="tidy").validate()
