"""A results folder for the head view: the hand-built induction model (tests/induction_model.py)
screened at two revisions with kept patterns (its induction head weaker at the first), and a
second model screened without them."""

from __future__ import annotations

from pathlib import Path

import torch
from induction_model import ID_LOW, VOCAB, induction_model

from headtrace.schema import ScreenConfig
from headtrace.screen import screen_model

CONFIG = ScreenConfig.of(n_examples=16, seq_len=64, id_low=ID_LOW, id_high=VOCAB, batch_size=8)
KEPT = CONFIG.replace(keep_patterns=4)
MODEL, PLAIN = "induction", "plain"


def headview_results(out: Path) -> Path:
    model = induction_model()
    with torch.no_grad():
        query = model.transformer.h[1].attn.c_attn.weight[:, : model.config.n_embd]
        query.mul_(0.1)  # the induction head barely attends yet
        early = screen_model(model, KEPT, name=MODEL, revision="step100", tokens=1e5, out=str(out))
        query.mul_(10.0)
    screen_model(model, KEPT, name=MODEL, revision="step200", tokens=2e5, out=str(out))
    screen_model(model, CONFIG, name=PLAIN, revision="step200", tokens=2e5, out=str(out))
    assert early.heads.set_index("head_id").sel_induction["L1H0"] < 50
    return out
