"""Composition (composition.py): the weight scores against a numpy computation from the saved
weights on three architectures (grouped-query, fused Conv1D, fused interleaved), and the ablation
drops on the hand-built induction model, where only the previous-token head matters."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from induction_model import ID_LOW, INDUCTION_HEAD, PREVIOUS_HEAD, SEQ_LEN, VOCAB, induction_model
from models_zoo import tiny_model
from safetensors.numpy import load_file

from headtrace.composition import ablation_drops, composition_scores, composition_table
from headtrace.models import ModelAdapter
from headtrace.probes import synthetic_induction
from headtrace.schema import ScreenConfig


def saved_weights(arch: str, folder) -> tuple[dict, dict]:
    """Per (layer, head): W_Q, W_K, W_V [hd, d] and W_O [d, hd] read from the saved safetensors."""
    model = tiny_model(arch)
    model.save_pretrained(folder)
    weights = load_file(str(folder / "model.safetensors"))
    config = model.config.to_dict()
    d, h = 64, 4
    kv = config.get("num_key_value_heads") or h
    hd = d // h
    out = {}
    for layer in range(2):
        if arch == "llama":
            p = f"model.layers.{layer}.self_attn."
            q, k, v = (weights[p + f"{n}_proj.weight"] for n in "qkv")
            o = weights[p + "o_proj.weight"]
        elif arch == "gpt2":  # Conv1D: [in, out]
            p = f"transformer.h.{layer}.attn."
            q, k, v = np.split(weights[p + "c_attn.weight"].T, 3)
            o = weights[p + "c_proj.weight"].T
        else:  # gpt_neox: rows [head, (q, k, v), hd]
            p = f"gpt_neox.layers.{layer}.attention."
            fused = weights[p + "query_key_value.weight"].reshape(h, 3, hd, d)
            q, k, v = (fused[:, i].reshape(h * hd, d) for i in range(3))
            o = weights[p + "dense.weight"]
        for head in range(h):
            g = head // (h // kv)
            rows, kv_rows = slice(head * hd, (head + 1) * hd), slice(g * hd, (g + 1) * hd)
            out[layer, head] = [m.astype(np.float64) for m in (q[rows], k[kv_rows], v[kv_rows], o[:, rows])]
    return model, out


def numpy_scores(w: dict, receiver, sender) -> tuple[float, float, float]:
    q, k, v, o = w[receiver]
    _, _, v1, o1 = w[sender]
    qk, ov, ov1 = q.T @ k, o @ v, o1 @ v1
    norm = np.linalg.norm

    def score(m):
        return norm(m @ ov1) / (norm(m) * norm(ov1))

    return score(qk), score(qk.T), score(ov)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gpt_neox"])
def test_scores_equal_numpy_from_the_saved_weights(arch, tmp_path):
    model, weights = saved_weights(arch, tmp_path)
    receivers = [(1, head) for head in range(4)]
    table = composition_scores(ModelAdapter(model), receivers)
    assert len(table) == 16
    for row in table.itertuples():
        expected = numpy_scores(weights, (row.receiver_layer, row.receiver_head), (row.sender_layer, row.sender_head))
        np.testing.assert_allclose([row.k_comp, row.q_comp, row.v_comp], expected, rtol=1e-6)
    assert table[["k_comp", "q_comp", "v_comp"]].to_numpy().std() > 1e-3  # scores differ between pairs


def test_only_the_previous_token_head_matters_to_the_induction_head():
    model = induction_model()
    adapter = ModelAdapter(model)
    config = ScreenConfig.of(n_examples=16, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB, batch_size=16)
    probe = synthetic_induction(config.probe)
    drops = ablation_drops(adapter, probe, config, [INDUCTION_HEAD]).set_index("sender")
    previous = "L{}H{}".format(*PREVIOUS_HEAD)
    assert list(drops.index) == ["L0H0", "L0H1", "L0H2"]
    assert (
        drops.loc[previous, "sel_clean"] > 50 and drops.loc[previous, "drop"] > 0.9 * drops.loc[previous, "sel_clean"]
    )
    assert (drops.drop(index=previous)["drop"].abs() < 1e-6).all()
    # From the weights, the induction head's keys read the previous-token head alone (the others write nothing).
    from headtrace.screen import screen

    heads = screen(adapter, probe, config).heads
    table = composition_table(adapter, heads, probe, config, causal=True)
    assert set(table.receiver) == {"L1H0"}
    assert table.set_index("sender").k_comp.idxmax() == previous
    assert table.set_index("sender").loc[previous, "sender_previous"]


def test_f9_brackets_the_link_and_the_report_draws_it(tmp_path):
    """Two revisions of the hand-built model: without the induction head's keys (no induction head),
    then whole. F9 names the link between them; the report draws the matrix and the DLA."""
    from headtrace.findings import write_findings
    from headtrace.report import build_report
    from headtrace.screen import screen
    from headtrace.store import COMPOSITION, ResultsDir

    config = ScreenConfig.of(n_examples=16, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB, batch_size=16)
    probe = synthetic_induction(config.probe)
    before = induction_model()
    with torch.no_grad():
        d = before.config.n_embd
        before.transformer.h[1].attn.c_attn.weight[:, d : d + d // 3] = 0  # L1H0's keys
    results = ResultsDir(tmp_path)
    for name, tokens, model in (("step1", 1e3, before), ("step2", 2e3, induction_model())):
        adapter = ModelAdapter(model)
        heads = screen(adapter, probe, config, model_name="toy", revision=name, tokens=tokens)
        results.write_shard(heads.heads, heads.run)
        table = composition_table(adapter, heads.heads, probe, config, causal=True)
        if len(table):
            results.write_table(COMPOSITION, table)
    findings = write_findings(tmp_path).set_index("finding")
    row = findings.loc["F9"]
    numbers = json.loads(row.numbers)
    assert row.status == "holds" and (numbers["previous_revision"], numbers["revision"]) == ("step1", "step2")
    assert numbers["strongest_pair"] == [None, "L0H0 -> L1H0"]
    assert numbers["final_links"]["L1H0"]["previous_drop"] > 50
    page = build_report(tmp_path).read_text()
    assert "composition-toy" in page and "dla-toy" in page


def test_the_watcher_measures_drops_at_the_onset_bracket(tmp_path):
    """A watcher with causal composition, shown the model without and then with its induction head:
    the onset's bracket (both screens) gets the drops of the onset's induction head."""
    from headtrace.store import COMPOSITION, ResultsDir
    from headtrace.watch import Watcher

    config = ScreenConfig.of(n_examples=16, seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB, batch_size=16)
    before = induction_model()
    with torch.no_grad():
        d = before.config.n_embd
        before.transformer.h[1].attn.c_attn.weight[:, d : d + d // 3] = 0  # L1H0's keys
    with Watcher(tmp_path, "toy", config, revisions=None, causal_composition=True) as watch:
        watch.screen(before, 1, 1e3)
        assert not (tmp_path / COMPOSITION).exists()  # no induction head yet
        watch.screen(induction_model(), 2, 2e3)
    table = ResultsDir(tmp_path).read_tables(COMPOSITION).set_index(["revision", "sender"])
    assert sorted(set(table.index.get_level_values(0))) == ["step000001", "step000002"]
    assert set(table.receiver) == {"L1H0"} and table["drop"].notna().all()
    assert table.loc[("step000002", "L0H0"), "drop"] > 50 > table.loc[("step000001", "L0H0"), "sel_clean"]


def test_a_panels_composition_section_runs_after_the_screen_and_resumes(tmp_path):
    """`[composition]` with `causal = true` on the last revision of a local series; a second run
    finds it done."""
    from headtrace.panel import load_panel, run_panel
    from headtrace.store import COMPOSITION, ResultsDir

    before = induction_model()
    with torch.no_grad():
        d = before.config.n_embd
        before.transformer.h[1].attn.c_attn.weight[:, d : d + d // 3] = 0  # L1H0's keys
    before.save_pretrained(tmp_path / "ckpt" / "step1")
    induction_model().save_pretrained(tmp_path / "ckpt" / "step2")
    panel = tmp_path / "panel.toml"
    panel.write_text(
        f'name = "p"\n[screen]\nn_examples = 16\nseq_len = {SEQ_LEN}\nid_low = {ID_LOW}\nid_high = {VOCAB}\n'
        f'[[models]]\nid = "toy"\nsource = "local"\npath = "{tmp_path / "ckpt"}"\ntokens_per_step = 1000\n'
        'revisions = "all"\n[composition]\ncausal = true\nrevisions = "final"\n'
    )
    run_panel(load_panel(panel), tmp_path / "out")
    path = ResultsDir(tmp_path / "out").table_path(COMPOSITION, "toy", "step2")
    table = pd.read_parquet(path).set_index("sender")
    assert table.loc["L0H0", "drop"] > 50 and table.receiver.unique().tolist() == ["L1H0"]
    written = path.stat().st_mtime_ns
    run_panel(load_panel(panel), tmp_path / "out")
    assert path.stat().st_mtime_ns == written
