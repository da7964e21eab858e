"""The code organism's data: the running Python's standard library source, BPE-tokenised by a
tokenizer trained on it and saved with every checkpoint, its provenance in organism.json; and the
named organisms (`preset`) as the CLI, the demo and seed-family panels build them."""

from __future__ import annotations

import dataclasses
import json
import platform
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from headtrace.errors import HeadtraceError
from headtrace.families import organism_for
from headtrace.organism import BOS_ID, preset, train
from headtrace.organism.corpus import batch, text_corpus, text_provenance
from headtrace.organism.demo import demo_screen, family_panel_toml

CODE = preset("code")
STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    return text_corpus("stdlib", CODE.corpus.vocab_size).stream  # ~20 s: the tokenizer is trained on 12 MB


def test_the_tokenizer_gives_back_the_standard_librarys_files_byte_for_byte(stream, tmp_path):
    from headtrace.models import load_tokenizer
    from headtrace.organism.trainer import corpus_tokenizer

    corpus_tokenizer(CODE.corpus).save_pretrained(tmp_path)
    tokenizer = load_tokenizer(str(tmp_path))
    first = stream[: int(np.flatnonzero(stream == 1)[0])]  # the first document, up to its EOS (id 1)
    assert tokenizer.decode(first.tolist()) == (STDLIB / "__future__.py").read_text()
    code = "def f(x):\n    return {'a': x}  # ünïcode\n"
    assert tokenizer.decode(tokenizer(code)["input_ids"]) == code
    assert len(tokenizer) == CODE.corpus.vocab_size and stream.max() < CODE.corpus.vocab_size


def window_start(stream: np.ndarray, row: np.ndarray) -> int | None:
    """Where in the text a training row's window starts (positions 1-6 are never a copy's
    destination, so they locate it), the best match of the rest; None for a row not from the text."""
    starts = np.flatnonzero(stream[: -len(row)] == row[1])
    for k in range(1, 6):
        starts = starts[stream[starts + k] == row[1 + k]]
    if not len(starts):
        return None
    return int(min(starts, key=lambda s: int((stream[s : s + len(row) - 1] != row[1:]).sum())))


def test_code_batches_are_stdlib_windows_with_a_tenth_copied_and_a_tenth_probe_kind(stream):
    ids = batch(CODE.corpus, step=5, batch_size=64)
    assert ids.shape == (64, 128) and ids.dtype == np.int64 and (ids[:, 0] == BOS_ID).all()
    assert np.array_equal(ids, batch(CODE.corpus, step=5, batch_size=64))
    assert not np.array_equal(ids, batch(CODE.corpus, step=6, batch_size=64))
    rows = np.concatenate([batch(CODE.corpus, step=s, batch_size=16) for s in range(12)])
    starts = [window_start(stream, row) for row in rows]
    probe_kind = [row for row, s in zip(rows, starts) if s is None]
    copied = [float((stream[s : s + 127] != row[1:]).mean()) for row, s in zip(rows, starts) if s is not None]
    assert 0.04 < len(probe_kind) / len(rows) < 0.18  # 10% of 192 sequences, drawn
    assert all((row[1:] >= 3).all() for row in probe_kind)  # uniform ids above the special tokens
    # 10% of a window's positions lie in copied spans (a copy onto equal tokens changes nothing)
    assert 0.05 < np.mean(copied) < 0.11, np.mean(copied)


def test_a_code_organism_saves_its_tokenizer_and_records_its_text(tmp_path):
    from headtrace.models import load_tokenizer

    small = dataclasses.replace(
        CODE,
        recipe=dataclasses.replace(CODE.recipe, n_layers=2, n_heads=2, d_model=32, d_mlp=64),
        train=dataclasses.replace(
            CODE.train, steps=3, batch_size=2, n_checkpoints=2, checkpoint_every=None, checkpoint_loss_drop=None
        ),
    )
    out = tmp_path / "code"
    result = train(out, small)
    assert [c["step"] for c in result.checkpoints] == [1, 3]
    meta = json.loads((out / "organism.json").read_text())
    assert meta["organism"]["corpus"]["source"] == "stdlib" and meta["organism"]["train"]["lr_schedule"] == "constant"
    text = meta["corpus_text"]
    assert text == text_provenance("stdlib") and text["python"] == platform.python_version()
    assert text["licence"] == "PSF-2.0" and len(text["sha256"]) == 64 and text["files"] > 500
    tokenizer = load_tokenizer(str(out / "step000003"))
    assert tokenizer.decode(tokenizer("import os\n")["input_ids"]) == "import os\n"
    assert train(out, small).reused

    meta["corpus_text"]["python"] = "3.0.0"  # trained on another release's library: not reused, not overwritten
    (out / "organism.json").write_text(json.dumps(meta))
    with pytest.raises(HeadtraceError, match=r"trained on another text \(Python 3.0.0's\)"):
        train(out, small)
    assert (out / "step000003").is_dir()


def test_the_tiny_organisms_settings_read_as_they_were_saved_before_the_code_organism():
    saved = preset("tiny").to_dict()
    assert "source" not in saved["corpus"] and "probe_share" not in saved["corpus"]
    assert "lr_schedule" not in saved["train"]
    assert saved["corpus"]["spans_per_sequence"] == 3 and saved["train"]["steps"] == 2000


def test_named_organisms_in_the_demo_and_in_seed_family_panels():
    code_screen = demo_screen(CODE.corpus).to_dict()
    assert code_screen["baseline"] == "reference" and code_screen["seq_len"] == 127
    assert demo_screen(preset("tiny").corpus).to_dict()["baseline"] == "clean"

    def fail(key, message):
        return HeadtraceError(f"{key}: {message}")

    member = organism_for({"preset": "code", "steps": 50, "weight_decay": 0.5}, seed=2, fail=fail)
    assert member == dataclasses.replace(
        preset("code", seed=2), train=dataclasses.replace(preset("code", seed=2).train, steps=50, weight_decay=0.5)
    )
    assert organism_for({}, seed=1, fail=fail) == preset("tiny", seed=1)
    with pytest.raises(HeadtraceError, match="organism.preset = 'huge' is not one of: tiny, code"):
        organism_for({"preset": "huge"}, seed=1, fail=fail)
    panel = family_panel_toml("demo", demo_screen(CODE.corpus), [0, 1], steps=40, organism="code")
    assert 'organism = { preset = "code", steps = 40 }' in panel
