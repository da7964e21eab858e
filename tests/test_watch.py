"""Screens inside the training loop (headtrace.watch): the schedule, a Hugging Face Trainer with
`HeadtraceCallback`, a custom loop with `Watcher`, the organism trainer, and `results --follow`.

The promises: a watched screen's heads table is bit-identical to screening the saved checkpoint of
the same step; training with a watcher is bit-identical to training without one; the callback and
a custom loop write the same tables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from headtrace.errors import HeadtraceError
from headtrace.organism import CorpusConfig, Organism, TrainConfig, checkpoint_steps, recipe, train
from headtrace.organism.demo import demo_screen, panel_toml
from headtrace.organism.trainer import build_tokenizer
from headtrace.panel import load_panel, run_panel
from headtrace.schema import ScreenConfig
from headtrace.screen import screen_checkpoint
from headtrace.store import RUNS, OutputLock, ResultsDir, read_results
from headtrace.watch import Watcher, revision_name, schedule, training_state_kept

VOCAB, LENGTH, BATCH, STEPS = 64, 48, 4, 12
WATCHED = [1, 3, 6, 12]
CONFIG = ScreenConfig.of(
    n_examples=16, seq_len=LENGTH - 1, id_low=3, id_high=VOCAB, prepend_bos=True, baseline="clean", batch_size=8
)


# ----------------------------------------------------------------------------------------------
# The schedule.


def test_schedules_name_the_steps_the_organism_trainer_would():
    def due(revisions, total):
        return [s for s in range(0, total + 300) if schedule(revisions, total).due(s)]

    assert due("log:12", 2000) == checkpoint_steps(2000, 12)
    assert due("every:250", 1000) == [250, 500, 750, 1000]
    assert due("log:4,every:5", 12) == sorted(set(checkpoint_steps(12, 4)) | {5, 10})
    assert schedule([0, 3, 7]).steps == {0, 3, 7} and not schedule(None).steps
    unbounded = schedule("every:4")  # no total: a modulus, still O(1)
    assert [s for s in range(1, 13) if unbounded.due(s)] == [4, 8, 12] and not unbounded.due(0)
    assert revision_name(128) == "step000128" and revision_name(5, 10**7) == "step00000005"


@pytest.mark.parametrize(
    "revisions, total, message",
    [
        ("log:24", None, "give total_steps"),
        ("logs:3", 10, "unknown revisions 'logs:3'"),
        ("every:0", 10, "selects nothing"),
        (25, 10, "pass 'every:25'"),
        ([1, -2], 10, "integers >= 0"),
    ],
)
def test_bad_schedules_are_one_line_errors(revisions, total, message):
    with pytest.raises(HeadtraceError, match=message):
        schedule(revisions, total)


def test_an_every_step_schedule_is_a_modulo_whatever_the_run_length(tmp_path):
    """`every:K` is never a list of steps: the callback and a watcher are made in O(1) memory."""
    import tracemalloc

    from headtrace import HeadtraceCallback  # the class is built (transformers imported) before measuring

    tracemalloc.start()
    started = time.perf_counter()
    callback = HeadtraceCallback(out=tmp_path / "callback", revisions="every:1")
    watch = Watcher(tmp_path / "loop", "tiny", CONFIG, revisions="every:1,log:12", total_steps=10**15)
    elapsed, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    watch.close()
    assert elapsed < 1 and peak < 50 * 2**20, (elapsed, peak)
    assert callback.revisions == "every:1" and watch.due(1) and watch.due(10**15) and not watch.due(10**15 + 1)


def test_importing_headtrace_loads_neither_torch_nor_transformers():
    code = (
        "import sys, headtrace; assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
        "from headtrace import Watcher, ScreenConfig; assert 'transformers' not in sys.modules; "
        "from headtrace import HeadtraceCallback; import transformers; "
        "assert issubclass(HeadtraceCallback, transformers.TrainerCallback)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ----------------------------------------------------------------------------------------------
# A Hugging Face Trainer.


def tiny_model(dropout: float = 0.1):
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=2 * LENGTH,
        bos_token_id=0,
        eos_token_id=1,
        hidden_dropout=dropout,
        attention_dropout=dropout,
        tie_word_embeddings=False,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 32):
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(3, VOCAB, (n, LENGTH), generator=generator)
        self.ids[:, 0] = 0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def saving_callback(folder: Path, steps: list[int]):
    """Saves the model (and tokenizer) at `steps`: the checkpoints a panel would screen."""
    from transformers import TrainerCallback

    class Save(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step in steps:
                model.save_pretrained(folder / revision_name(state.global_step))
                processing_class.save_pretrained(folder / revision_name(state.global_step))

    return Save()


def run_trainer(tmp: Path, callbacks: list, dropout: float = 0.1, optim: str = "adamw_torch", sequential: bool = False):
    from transformers import Trainer, TrainingArguments, default_data_collator

    model = tiny_model(dropout)
    args = TrainingArguments(
        output_dir=str(tmp / "trainer"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=100,
        seed=0,
        optim=optim,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **(
            {"lr_scheduler_type": "constant", "max_grad_norm": 0.0, "train_sampling_strategy": "sequential"}
            if sequential
            else {}
        ),
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(),
        data_collator=default_data_collator,
        processing_class=build_tokenizer(VOCAB),
        callbacks=callbacks,
    )
    if sequential:
        trainer.model_accepts_loss_kwargs = False  # the plain mean loss, as the custom loop computes it
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def watched_trainer(tmp_path_factory):
    """One Trainer run with the callback (and checkpoints saved at the watched steps), one without."""
    from headtrace import HeadtraceCallback

    tmp = tmp_path_factory.mktemp("trainer")
    callback = HeadtraceCallback(
        out=tmp / "results", revisions=WATCHED, config=CONFIG, model_id="tiny", tokens_per_step=BATCH * LENGTH
    )
    with_callback = run_trainer(tmp, [callback, saving_callback(tmp / "checkpoints", WATCHED)])
    without = run_trainer(tmp / "plain", [])
    return tmp, callback, with_callback, without


def test_training_with_the_callback_is_bit_identical_to_training_without(watched_trainer):
    _, _, with_callback, without = watched_trainer
    ours, theirs = with_callback.model.state_dict(), without.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert with_callback.model.training == without.model.training
    assert with_callback.model.config._attn_implementation == "sdpa"


def test_the_callback_writes_what_screening_the_saved_checkpoints_gives(watched_trainer):
    tmp, _, trainer, _ = watched_trainer
    heads, runs = read_results(tmp / "results")
    names = [revision_name(s) for s in WATCHED]
    assert list(runs.revision) == names and list(runs.step) == WATCHED
    assert list(runs.tokens) == [s * BATCH * LENGTH for s in WATCHED]
    assert (runs.source == "watch").all() and runs.checkpoint_hash.isna().all() and (runs.schema_version == 1).all()
    for step, name in zip(WATCHED, names):
        saved = screen_checkpoint(
            str(tmp / "checkpoints"), revision=name, config=CONFIG, name="tiny", tokens=step * BATCH * LENGTH
        )
        live = heads[heads.revision == name].reset_index(drop=True)
        pd.testing.assert_frame_equal(live, saved.heads, check_exact=True)
        run = runs[runs.revision == name].iloc[0]
        assert run.config_hash == saved.run.config_hash.iloc[0] and run.top1 == saved.run.top1.iloc[0]
    # The scalars went through the Trainer's own log.
    logged = [e for e in trainer.state.log_history if "headtrace/top1" in e]
    assert [e["step"] for e in logged] == WATCHED
    assert logged[-1]["headtrace/sink_fraction"] == runs.sink_fraction.iloc[-1]
    assert logged[-1]["headtrace/best_induction"] == heads[heads.revision == names[-1]].sel_induction.max()


def test_a_custom_loop_with_a_watcher_writes_what_the_callback_writes(tmp_path):
    """The same training (SGD, constant rate, batches in order) through the Trainer with the
    callback, and through a plain loop calling `Watcher.step`."""
    from headtrace import HeadtraceCallback

    callback = HeadtraceCallback(
        out=tmp_path / "callback", revisions="log:4", config=CONFIG, model_id="tiny", tokens_per_step=BATCH * LENGTH
    )
    run_trainer(tmp_path, [callback], dropout=0.0, optim="sgd", sequential=True)

    model = tiny_model(dropout=0.0)
    watch = Watcher(
        tmp_path / "loop", "tiny", CONFIG, revisions="log:4", total_steps=STEPS, tokenizer=build_tokenizer(VOCAB)
    )
    watch.prepare(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    data = RandomTokens()
    model.train()
    for step in range(1, STEPS + 1):
        ids = data.ids[((step - 1) * BATCH) % len(data) :][:BATCH]
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        model.zero_grad()
        watch.step(model, step, tokens_seen=step * BATCH * LENGTH)
    assert [e["step"] for e in watch.screened] == checkpoint_steps(STEPS, 4)
    ours, theirs = read_results(tmp_path / "loop"), read_results(tmp_path / "callback")
    pd.testing.assert_frame_equal(ours[0], theirs[0], check_exact=True)
    assert list(ours[1].top1) == list(theirs[1].top1)


def test_a_screen_that_fails_inside_the_trainer_warns_and_training_goes_on(tmp_path, monkeypatch):
    from headtrace import HeadtraceCallback

    def full_disk(self, model, step, tokens_seen=None):
        raise HeadtraceError("cannot write results: No space left on device")

    monkeypatch.setattr(Watcher, "screen", full_disk)
    callback = HeadtraceCallback(out=tmp_path / "results", revisions=[3], config=CONFIG, model_id="tiny")
    with pytest.warns(UserWarning, match="screen at step 3 failed, training goes on: cannot write"):
        trainer = run_trainer(tmp_path, [callback], dropout=0.0)
    assert trainer.state.global_step == STEPS


def test_milestones_save_their_checkpoint_for_the_ablation(tmp_path):
    """save_at_milestones: where a milestone of trajectory.py is first reached, the checkpoint is
    saved into a folder of checkpoints that `headtrace ablate --revision` reads."""
    config = CONFIG.replace(sink_threshold=0.0, induction_threshold=0.0)
    watch = Watcher(
        tmp_path / "results",
        "tiny",
        config,
        revisions=[1, 2],
        save_at_milestones=True,
        tokenizer=build_tokenizer(VOCAB),
    )
    model = tiny_model()
    watch.step(model, 1, 100)
    watch.step(model, 2, 200)  # every milestone was reached at step 1: nothing more to save
    folder = tmp_path / "results" / "checkpoints" / "tiny"
    listed = json.loads((folder / "revisions.json").read_text())
    assert [e["revision"] for e in listed] == ["step000001"] and listed[0]["tokens"] == 100
    assert any(m.startswith("induction >=") for m in listed[0]["milestones"])
    assert set(watch.milestones.values()) == {"step000001"}
    again = screen_checkpoint(str(folder), revision="step000001", config=config, name="tiny", tokens=100)
    heads, _ = read_results(tmp_path / "results")
    pd.testing.assert_frame_equal(heads[heads.revision == "step000001"].reset_index(drop=True), again.heads)


def test_the_model_is_screened_in_its_own_dtype_and_the_config_says_so(tmp_path):
    model = tiny_model().to(torch.bfloat16)
    watch = Watcher(tmp_path, "tiny", CONFIG, revisions=[1])
    run = watch.step(model, 1, 10).run.iloc[0]
    assert run["dtype"] == "bfloat16" and json.loads(run.config_json)["dtype"] == "bfloat16"
    assert run.config_hash == CONFIG.replace(dtype="bfloat16").config_hash != CONFIG.config_hash
    assert next(model.parameters()).dtype == torch.bfloat16


def test_the_screen_leaves_training_state_as_it_was():
    import random

    import numpy as np

    model = tiny_model()
    model.train()
    model.gpt_neox.layers[0].eval()  # a frozen part stays frozen
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.setstate(states[0]), np.random.set_state(states[1]), torch.set_rng_state(states[2])
    with training_state_kept(model):
        assert not model.training and not torch.is_grad_enabled()
        random.random(), np.random.rand(), torch.rand(3)
    assert model.training and not model.gpt_neox.layers[0].training and model.gpt_neox.layers[1].training
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_bad_settings_fail_before_training(tmp_path):
    model = tiny_model()
    with pytest.raises(HeadtraceError, match="id-high 64"):
        Watcher(
            tmp_path, "tiny", ScreenConfig.of(n_examples=4, seq_len=47, id_low=3, id_high=500), revisions=[1]
        ).prepare(model)
    with pytest.raises(HeadtraceError, match="give total_steps"):
        Watcher(tmp_path, "tiny", CONFIG, revisions="log:5")
    with pytest.raises(HeadtraceError, match="pass one"):
        Watcher(tmp_path / "r", "tiny", CONFIG, overwrite=True, resume=True)
    with Watcher(tmp_path / "r", "tiny", CONFIG, revisions=[1]) as watch:
        watch.screen(model, 1, 10)
    with pytest.raises(HeadtraceError, match="another config"):  # a resumed run screens as it did
        Watcher(tmp_path / "r", "tiny", CONFIG.replace(seed=7), revisions=[1], resume=True).prepare(model)
    watch = Watcher(tmp_path / "r", "tiny", CONFIG, revisions=[1], resume=True)
    assert (
        Watcher(tmp_path / "r", "tiny", CONFIG, revisions=[1], rank=1).screen(model, 1) is None
    )  # rank 1 never screens
    sharded = type("FullyShardedDataParallel", (torch.nn.Module,), {})()
    with pytest.raises(HeadtraceError, match="FSDP shards the parameters"):
        watch.prepare(sharded)
    ddp_like = torch.nn.DataParallel(model)  # .module is unwrapped, as DDP's
    assert watch.screen(ddp_like, 2, 20).heads.equals(watch.screen(model, 2, 20).heads)
    watch.close()
    with pytest.raises(HeadtraceError, match="closed"):
        watch.screen(model, 3, 30)


# ----------------------------------------------------------------------------------------------
# One run per model and folder: the lock, the run id, refused / resumed / replaced.


def test_two_watched_runs_into_one_folder_never_mix(tmp_path):
    model = tiny_model(dropout=0.0)
    first = Watcher(tmp_path, "tiny", CONFIG, revisions=[1, 2])
    with pytest.raises(HeadtraceError, match=r"in use by a watcher of tiny \(pid \d+ .*pick another --out"):
        OutputLock(ResultsDir(tmp_path)).__enter__()  # a panel, while the model trains
    with pytest.raises(HeadtraceError, match="in use by a watcher of tiny .*pick another results folder"):
        Watcher(tmp_path, "other", CONFIG, revisions=None)
    first.step(model, 1, 10)
    first.step(model, 2, 20)
    first.close()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["watch"]["run_id"] == first.run_id and manifest["config_hash"] == CONFIG.config_hash
    assert [(s["revision"], s["run_id"]) for s in manifest["shards"]] == [
        ("step000001", first.run_id),
        ("step000002", first.run_id),
    ]
    with OutputLock(ResultsDir(tmp_path)):  # the run ended: a panel may use the folder
        pass

    # Another run of the same model is refused before it writes: one line, the folder and the ways out.
    second = Watcher(tmp_path, "tiny", CONFIG, revisions=[3])
    with pytest.raises(HeadtraceError) as refused:
        second.prepare(model)
    message = str(refused.value)
    assert message.startswith(f"'{tmp_path}' holds 2 screens of tiny from run {first.run_id}") and "\n" not in message
    assert "overwrite=True" in message and "resume=True" in message and "another model_id" in message
    second.close()
    assert list(read_results(tmp_path)[1].step) == [1, 2]

    # The same run, resumed from its checkpoint: its screens are kept, the new ones join them.
    resumed = Watcher(tmp_path, "tiny", CONFIG, revisions=[3], resume=True)
    resumed.step(model, 3, 30)
    resumed.close()
    runs = read_results(tmp_path)[1]
    assert list(runs.step) == [1, 2, 3] and set(runs.run_id) == {first.run_id} == {resumed.run_id}

    # overwrite=True: the earlier run's screens go before the new run writes its own.
    with Watcher(tmp_path, "tiny", CONFIG, revisions=[5], overwrite=True) as again:
        again.step(model, 5, 50)
    runs = read_results(tmp_path)[1]
    assert list(runs.step) == [5] and list(runs.run_id) == [again.run_id] != [first.run_id]
    assert not [p for p in (tmp_path / "heads").iterdir() if "step00000" in p.name and "step000005" not in p.name]


def test_the_callback_refuses_another_run_before_training_and_frees_the_folder_at_its_end(watched_trainer):
    from headtrace import HeadtraceCallback

    tmp, callback, _, _ = watched_trainer
    with OutputLock(ResultsDir(tmp / "results")):  # on_train_end let it go
        pass
    again = HeadtraceCallback(out=tmp / "results", revisions=WATCHED, config=CONFIG, model_id="tiny")
    with pytest.raises(HeadtraceError, match="screens of tiny from run .*overwrite=True"):
        run_trainer(tmp / "again", [again])
    assert again.watcher.closed and list(read_results(tmp / "results")[1].step) == WATCHED
    assert set(read_results(tmp / "results")[1].run_id) == {callback.watcher.run_id}


# ----------------------------------------------------------------------------------------------
# The organism trainer: screens at its checkpoint steps, saves only the final one.


TINY_CORPUS = CorpusConfig(vocab_size=64, seq_len=64, span_min=4, span_max=12, spans_per_sequence=2)


def tiny_organism(steps: int = 8) -> Organism:
    return Organism(
        recipe=recipe("dense", n_layers=2, n_heads=2, d_model=32, d_mlp=64),
        corpus=TINY_CORPUS,
        train=TrainConfig(steps=steps, batch_size=4, n_checkpoints=4, checkpoint_every=None, checkpoint_loss_drop=None),
    )


@pytest.fixture(scope="module")
def watched_organism(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("organism")
    screen = demo_screen(TINY_CORPUS, n_examples=8)
    watch = Watcher(tmp / "results", "organism-dense", screen, revisions=None)
    result = train(tmp / "organisms" / "dense", tiny_organism(), watch=watch, save="all")
    return tmp, screen, watch, result


def test_watched_organism_screens_equal_panel_screens_of_its_checkpoints(watched_organism):
    tmp, screen, _, result = watched_organism
    assert [e["step"] for e in result.screened] == checkpoint_steps(8, 4) == [e["step"] for e in result.checkpoints]
    assert json.loads((tmp / "organisms" / "dense" / "organism.json").read_text())["screened"] == result.screened
    panel = tmp / "demo.toml"
    panel.write_text(panel_toml("organism-test", screen, {"organism-dense": "organisms/dense"}))
    run = run_panel(load_panel(panel), tmp / "panel-results")
    assert not run.failed and len(run.computed) == 4
    watched, screened = read_results(tmp / "results"), read_results(tmp / "panel-results")
    pd.testing.assert_frame_equal(watched[0], screened[0], check_exact=True)
    same = ["model", "revision", "tokens", "top1", "top5", "loss", "n_induction_heads", "sink_fraction", "config_hash"]
    pd.testing.assert_frame_equal(watched[1][same], screened[1][same], check_exact=True)
    for folder in ("results", "panel-results"):  # the demo's screen keeps patterns, watched or in a panel
        assert len(list((tmp / folder / "patterns").glob("*.npz"))) == 4


def test_the_demo_layout_saves_the_final_checkpoint_and_reuses_it(watched_organism, tmp_path):
    _, screen, _, saved_all = watched_organism
    out = tmp_path / "organisms" / "dense"

    def watched():
        return Watcher(tmp_path / "results", "organism-dense", screen, revisions=None)

    first = train(out, tiny_organism(), watch=watched())
    assert [e["revision"] for e in first.checkpoints] == ["step000008"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["step000008"]
    assert first.losses == saved_all.losses  # screening changes nothing in training
    assert (out / "step000008" / "model.safetensors").read_bytes() == (
        saved_all.out / "step000008" / "model.safetensors"
    ).read_bytes()
    assert train(out, tiny_organism(), watch=watched()).reused
    # A panel over what is saved: the final screen is already there, the ablation runs on it (and
    # finds no circuit in a model this small).
    (tmp_path / "demo.toml").write_text(
        panel_toml("demo", screen, {"organism-dense": "organisms/dense"}, ablation_draws=2)
    )
    run = run_panel(load_panel(tmp_path / "demo.toml"), tmp_path / "results")
    assert run.skipped == run.stages["ablation"].todo == ["organism-dense@step000008.parquet"] and not run.failed
    # Without its screens the organism is trained again (the trajectory is not in the checkpoint).
    shutil.rmtree(tmp_path / "results")
    again = train(out, tiny_organism(), watch=watched())
    assert not again.reused and len(read_results(tmp_path / "results")[1]) == 4


def test_ctrl_c_keeps_the_screens_and_training_again_starts_over(watched_organism, tmp_path):
    screen = watched_organism[1]
    out = tmp_path / "organisms" / "dense"

    def interrupt(step: int, total: int, loss: float) -> None:
        if step == 4:
            raise KeyboardInterrupt

    watch = Watcher(tmp_path / "results", "organism-dense", screen, revisions=None)
    with pytest.raises(KeyboardInterrupt):
        train(out, tiny_organism(), on_step=interrupt, watch=watch)
    meta = json.loads((out / "organism.json").read_text())
    assert [e["step"] for e in meta["screened"]] == [1, 2, 4] and not meta["complete"]
    assert list(read_results(tmp_path / "results")[1].step) == [1, 2, 4] and not list(out.glob("step*"))
    again = train(out, tiny_organism(), watch=Watcher(tmp_path / "results", "organism-dense", screen, revisions=None))
    assert not again.reused and [e["step"] for e in again.screened] == checkpoint_steps(8, 4)


# ----------------------------------------------------------------------------------------------
# headtrace results --follow.


def follow(folder: Path, *options) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headtrace",
            "results",
            str(folder),
            "--follow",
            "--interval",
            "0.1",
            *map(str, options),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_results_follow_shows_each_revision_as_it_is_screened(watched_organism, tmp_path):
    source = watched_organism[0] / "results"
    shards = sorted(p.name for p in (source / RUNS).glob("*.parquet"))
    folder = tmp_path / "live"

    def add(name: str) -> None:
        for table in ("heads", "runs"):
            (folder / table).mkdir(parents=True, exist_ok=True)
            shutil.copy(source / table / name, folder / table / name)

    add(shards[0])
    process = follow(folder)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()

    def wait_for(text: str) -> None:
        deadline = time.monotonic() + 60
        while not any(text in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(text in line for line in lines), lines

    wait_for("step000001")
    add(shards[2])
    wait_for("step000004")
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == f"stopped following {folder}/ (2 revisions)"
    assert not any("step000002" in line for line in lines)


def test_results_follow_waits_for_a_folder_and_stops_at_its_timeout(tmp_path):
    process = follow(tmp_path / "not-yet", "--timeout", "1")
    stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 0, stderr
    assert "no revisions yet" in stderr and stderr.strip().splitlines()[-1].startswith("stopped following")
