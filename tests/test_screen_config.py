"""ScreenConfig reads as the README writes it: flat keywords, or its parts whole, never both."""

import dataclasses
import pickle

import pytest

from headtrace.errors import HeadtraceError
from headtrace.probes import ProbeSpec
from headtrace.schema import ScreenConfig, Thresholds

# Hashes written by the code before flat keywords existed (ScreenConfig.of): stored results keep them.
PINNED = {
    "b1268a110f458fad": {},
    "1ef9a3021fa518a8": {"n_examples": 500, "seq_len": 256},
    "7bdea1ea2a3fc249": {"n_examples": 500, "device": "cuda", "dtype": "bfloat16"},
    "f974dda6eb0dddb8": {
        "n_examples": 256,
        "seq_len": 63,
        "id_low": 3,
        "id_high": 256,
        "prepend_bos": True,
        "baseline": "clean",
        "induction_threshold": 40.0,
        "pr_examples": 100,
    },
}


@pytest.mark.parametrize("digest", PINNED)
def test_flat_keywords_give_the_stored_hashes(digest):
    assert ScreenConfig(**PINNED[digest]).config_hash == digest
    assert ScreenConfig.of(**PINNED[digest]) == ScreenConfig(**PINNED[digest])


def test_flat_keywords_fill_the_parts():
    flat = ScreenConfig(n_examples=500, seq_len=128, device="cuda", dtype="bfloat16", sink_threshold=20.0)
    assert flat.probe == ProbeSpec(n_examples=500, seq_len=128)
    assert flat.thresholds == Thresholds(sink_threshold=20.0)
    assert (flat.device, flat.dtype, flat.batch_size, flat.pr_examples) == ("cuda", "bfloat16", 16, None)
    nested = ScreenConfig(
        probe=ProbeSpec(n_examples=500, seq_len=128),
        thresholds=Thresholds(sink_threshold=20.0),
        device="cuda",
        dtype="bfloat16",
    )
    assert nested == flat and nested.config_hash == flat.config_hash


def test_the_probe_kind_is_flat_and_a_probe_spec_is_whole():
    natural = ScreenConfig(probe="natural", texts="corpus.txt", n_examples=8)
    assert natural.probe == ProbeSpec(kind="natural", texts="corpus.txt", n_examples=8)
    assert natural.to_dict()["probe"] == "natural"


@pytest.mark.parametrize(
    "kwargs, part, flat",
    [
        ({"probe": ProbeSpec(seq_len=64), "n_examples": 5}, "probe=", "n_examples="),
        ({"thresholds": Thresholds(), "induction_threshold": 40.0}, "thresholds=", "induction_threshold="),
    ],
)
def test_a_part_and_a_flat_field_it_holds_are_refused_naming_both(kwargs, part, flat):
    with pytest.raises(HeadtraceError) as error:
        ScreenConfig(**kwargs)
    assert part in str(error.value) and flat in str(error.value) and "\n" not in str(error.value)


def test_a_part_with_flat_fields_of_another_part_is_fine():
    config = ScreenConfig(probe=ProbeSpec(seq_len=64), induction_threshold=40.0, batch_size=4)
    assert config.probe.seq_len == 64 and config.thresholds.induction_threshold == 40.0 and config.batch_size == 4


def test_unknown_names_are_refused():
    with pytest.raises(HeadtraceError, match="unknown screen setting 'n_exemples'"):
        ScreenConfig(n_exemples=5)


def test_copies_replace_and_pickle_keep_the_config():
    config = ScreenConfig(n_examples=64, seq_len=64, baseline="clean")
    assert dataclasses.replace(config, device="mps").to_dict() == {**config.to_dict(), "device": "mps"}
    assert config.replace(seq_len=96).probe == ProbeSpec(n_examples=64, seq_len=96, baseline="clean")
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.device = "cuda"
