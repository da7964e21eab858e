"""Models already loaded in TransformerLens or nnsight, screened as they are (`screen_model`, the
Watcher) and against the Hugging Face screen of the same weights. The TransformerLens models are
built from the tiny configs with converted weights; nothing is downloaded."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from models_zoo import tiny_model
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from headtrace.errors import HeadtraceError
from headtrace.probes import CHANNELS
from headtrace.schema import ScreenConfig
from headtrace.screen import screen_model
from headtrace.store import read_results
from headtrace.watch import Watcher

CONFIG = ScreenConfig.of(n_examples=12, seq_len=48, batch_size=5)
NUMBERS = [f"mean_{name}" for name in CHANNELS] + [
    "sel_induction",
    "sel_previous",
    "sel_first",
    "sink_score",
    "pr",
    "pr_cov",
    "dla",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A word-level tokenizer made here (the screen feeds token ids; the libraries want some tokenizer)."""
    folder = tmp_path_factory.mktemp("tokenizer")
    vocab = {"<bos>": 0, "<unk>": 1} | {f"t{i}": i for i in range(2, 100)}
    PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        bos_token="<bos>",
        eos_token="<bos>",
        unk_token="<unk>",
    ).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def hooked_transformer(arch: str, folder):
    """A TransformerLens HookedTransformer holding the tiny model's weights, layer norms unfolded and
    weights uncentred, so that it computes what the Hugging Face model computes."""
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading

    model = tiny_model(arch)
    model.config.n_ctx = (
        model.config.max_position_embeddings
        if hasattr(model.config, "max_position_embeddings")
        else model.config.n_positions
    )
    model.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HookedTransformer's deprecation notice (TransformerLens 3.x)
        cfg = loading.get_pretrained_model_config(
            str(folder), hf_cfg=model.config.to_dict(), fold_ln=False, device="cpu"
        )
        hooked = HookedTransformer(cfg)
    state = loading.get_pretrained_state_dict(str(folder), cfg, hf_model=model)
    hooked.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    )
    return hooked.eval(), model


def assert_same_screen(got, expected, rtol: float):
    assert list(got.heads.head_id) == list(expected.heads.head_id)
    np.testing.assert_allclose(
        got.heads[NUMBERS].to_numpy(float), expected.heads[NUMBERS].to_numpy(float), rtol=rtol, atol=1e-7
    )
    for metric in ("top1", "top5", "loss", "mean_logit_answer"):
        np.testing.assert_allclose(got.run[metric][0], expected.run[metric][0], rtol=rtol, atol=1e-6)
    assert got.heads.best_selectivity.max() > 3  # the heads attend selectively: the comparison means something


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2"])
def test_a_hooked_transformer_screens_as_its_hugging_face_model(arch, tmp_path):
    hooked, model = hooked_transformer(arch, tmp_path / "tiny")
    got = screen_model(hooked, CONFIG, name="tiny")
    expected = screen_model(model, CONFIG, name="tiny")
    assert_same_screen(got, expected, rtol=1e-4)
    run = got.run.iloc[0]
    assert run.attention_route == "transformer-lens" and run.layout.startswith("HookedTransformer")
    assert (got.heads.head_id[:5] == ["L0H0", "L0H1", "L0H2", "L0H3", "L1H0"]).all()


def test_a_transformer_bridge_screens_as_its_hugging_face_model(tokenizer):
    """The bridge wraps (and rewires) the model it is given: the Hugging Face screen runs on a copy."""
    from transformer_lens.model_bridge import TransformerBridge

    model = tiny_model("llama")  # grouped-query attention
    expected = screen_model(copy.deepcopy(model), CONFIG, name="tiny")
    bridge = TransformerBridge.boot_transformers("meta-llama/Llama-3.2-1B", hf_model=model, tokenizer=tokenizer)
    got = screen_model(bridge, CONFIG, name="tiny")
    assert_same_screen(got, expected, rtol=1e-4)
    assert got.run.attention_route[0] == "transformer-lens"


def test_an_nnsight_model_is_screened_as_the_model_it_wraps(tokenizer):
    from nnsight import LanguageModel

    model = tiny_model("gemma2")
    expected = screen_model(model, CONFIG, name="tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nnsight 0.8 names LanguageModel's successor
        wrapped = LanguageModel(model, tokenizer=tokenizer)
    got = screen_model(wrapped, CONFIG, name="tiny")
    pd.testing.assert_frame_equal(got.heads, expected.heads)
    assert got.run.attention_route[0] == "scores"


def test_the_watcher_takes_transformer_lens_and_nnsight_models(tmp_path, tokenizer):
    from nnsight import LanguageModel

    hooked, _ = hooked_transformer("gpt_neox", tmp_path / "tiny")
    with Watcher(tmp_path / "out", "hooked", CONFIG, revisions=None) as watcher:  # the folder's lock until closed
        watcher.prepare(hooked)
        result = watcher.screen(hooked, step=3)
    assert_same_screen(result, screen_model(hooked, CONFIG, name="hooked"), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = LanguageModel(tiny_model("llama"), tokenizer=tokenizer)
    with Watcher(tmp_path / "out", "wrapped", CONFIG, revisions=None) as watcher:
        watcher.screen(wrapped, step=3)
    _, runs = read_results(tmp_path / "out")
    assert sorted(runs.model) == ["hooked", "wrapped"] and set(runs.revision) == {"step000003"}
    assert hooked.training is False


def test_screen_model_keeps_the_training_state_and_refuses_what_it_cannot_screen():
    model = tiny_model("llama").train()
    state = torch.get_rng_state()
    screen_model(model, CONFIG, name="tiny")
    assert model.training and all(m.training for m in model.modules())
    assert torch.equal(state, torch.get_rng_state())
    with pytest.raises(HeadtraceError, match="cannot screen a builtins.str"):
        screen_model("EleutherAI/pythia-160m", CONFIG)
