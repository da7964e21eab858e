"""The organism's trainer: AdamW with warmup and cosine decay (or a constant rate), on its corpus, saving
Hugging Face checkpoints at log-spaced steps, every K steps, and wherever the smoothed training
loss falls (so that they gather in the induction transition).

Output layout: config.py (what `LocalSource(organism=True)` and `headtrace run` read). Each
checkpoint is written to a hidden temporary folder and renamed into place, and
`revisions.json` is rewritten atomically after each one, so an interrupted run (Ctrl-C) leaves
exactly the finished checkpoints, all listed and loadable. Same settings and seed give
bit-identical checkpoints: the init is seeded and batch k is a pure function of (seed, k).

With a `Watcher` (headtrace.watch; what `headtrace demo` does), each of those steps is screened in
place instead of saved, and only the final checkpoint is saved (what the ablation needs), plus the
scheduled steps given in `keep` (config.causal_steps: what F8 ablates); organism.json lists the
screened revisions under "screened" and the kept steps under "kept".
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from headtrace.errors import HeadtraceError
from headtrace.organism.config import ORGANISM_FILE, REVISIONS_FILE, Organism, TrainConfig, revision_name
from headtrace.organism.corpus import SPECIAL_TOKENS, CorpusConfig, batch, text_corpus, text_provenance
from headtrace.organism.recipes import build_model
from headtrace.store import atomic_folder, write_json_atomic

if TYPE_CHECKING:
    from headtrace.watch import Watcher

# (step just finished, total steps, training loss): the progress bar; may raise to stop training.
StepCallback = Callable[[int, int, float], None]


@dataclass
class TrainResult:
    out: Path
    checkpoints: list[dict] = field(default_factory=list)  # revisions.json entries, in order
    screened: list[dict] = field(default_factory=list)  # revisions a Watcher screened, in order
    losses: list[float] = field(default_factory=list)  # per step
    wall_s: float = 0.0
    reused: bool = False  # the directory already held this organism, complete: nothing was trained


def build_tokenizer(vocab_size: int):
    """A word-level tokenizer over the organism's ids: "<bos>", "<eos>", "<unk>", then "t3", "t4", ..."""
    # transformers: loaded when a tokenizer is built, not with the trainer
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return _with_specials(core)


def corpus_tokenizer(corpus: CorpusConfig):
    """The tokenizer saved with the checkpoints: word-level over the ids for the synthetic corpus, the
    BPE trained on the text for a text corpus."""
    if corpus.source == "zipf":
        return build_tokenizer(corpus.vocab_size)
    from tokenizers import Tokenizer

    return _with_specials(Tokenizer.from_str(text_corpus(corpus.source, corpus.vocab_size).tokenizer_json))


def _with_specials(core):
    """A `tokenizers` tokenizer as transformers saves and loads it, with the organism's special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", model_max_length=2 * 1024
    )


class LossDropSaves:
    """Says when the smoothed training loss has fallen `drop` since the last save."""

    SMOOTHING = 0.1  # weight of the newest loss in the exponential moving average

    def __init__(self, drop: float | None):
        self.drop = drop
        self.smoothed: float | None = None
        self.at_last_save: float | None = None

    def update(self, loss: float) -> bool:
        self.smoothed = loss if self.smoothed is None else self.smoothed + self.SMOOTHING * (loss - self.smoothed)
        if self.at_last_save is None:
            self.at_last_save = self.smoothed
        return self.drop is not None and self.at_last_save - self.smoothed >= self.drop

    def saved(self) -> None:
        self.at_last_save = self.smoothed


def _lr_factor(step: int, config: TrainConfig) -> float:
    """Linear warmup, then constant or cosine decay to 10% of the peak (step counts from 0)."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.lr_schedule == "constant":
        return 1.0
    progress = (step - config.warmup_steps) / max(config.steps - config.warmup_steps, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def arithmetic() -> dict:
    """What rounds the training: the same seed on another thread count or torch build gives other
    weights (recorded in organism.json, checked before a folder is reused)."""
    return {"torch": torch.__version__, "threads": torch.get_num_threads()}


def _prepare(out: Path, organism: Organism, watch: "Watcher | None" = None, keep: Sequence[int] = ()) -> bool:
    """Make `out` ready; True when it already holds this very organism, complete (nothing to do).

    A directory with the same organism.json but unfinished is trained again from scratch (the
    result is the same, bit for bit), and so is a finished one whose screens (from its own watched
    run) `watch` no longer finds in its results folder; any other non-empty directory is refused."""
    wanted = organism.to_dict()
    meta = out / ORGANISM_FILE
    if out.is_dir() and any(out.iterdir()):
        try:
            existing = json.loads(meta.read_text())
        except (OSError, ValueError):
            existing = None
        if existing is None or existing.get("organism") != wanted:
            raise HeadtraceError(
                f"'{out}' is not empty and holds no organism with these settings; pick another --out or delete it"
            )
        text = text_provenance(organism.corpus.source) if organism.corpus.source != "zipf" else None
        if existing.get("corpus_text") != text:
            raise HeadtraceError(
                f"'{out}' holds this organism trained on another text (Python "
                f"{(existing.get('corpus_text') or {}).get('python')}'s); pick another --out or delete it"
            )
        trained_with, now = existing.get("arithmetic"), arithmetic()
        if trained_with is not None and trained_with != now:
            same_torch = trained_with.get("torch") == now["torch"]
            hint = f"pass --threads {trained_with.get('threads')} to reuse it" if same_torch else "delete it"
            raise HeadtraceError(
                f"'{out}' holds this organism trained with {trained_with.get('threads')} torch thread(s) on torch "
                f"{trained_with.get('torch')} (now {now['threads']} on {now['torch']}), which rounds differently; "
                f"{hint}, or pick another --out"
            )
        screened = [e["revision"] for e in existing.get("screened") or []]
        kept = existing.get("kept", []) == sorted(keep)
        if (
            existing.get("complete")
            and kept
            and (watch is None or watch.has_screened(screened, existing.get("run_id")))
        ):
            return True
        for child in out.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return False


def _save(model, tokenizer, out: Path, name: str, step: int, tokens: int, listed: list[dict], meta: dict) -> None:
    """One checkpoint, atomically: write a hidden folder, rename it, then update the listings."""

    def write(folder: Path) -> None:
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)

    atomic_folder(out / name, write)
    listed.append({"revision": name, "step": step, "tokens": tokens})
    write_json_atomic(listed, out / REVISIONS_FILE)
    write_json_atomic(meta, out / ORGANISM_FILE)


def train(
    out: str | Path,
    organism: Organism = Organism(),
    on_step: StepCallback | None = None,
    watch: "Watcher | None" = None,
    save: str | None = None,
    keep: Sequence[int] = (),
) -> TrainResult:
    """Train `organism` into `out`; `on_step` is called after every optimiser step.

    With `watch`, the checkpoint steps (and any the watcher schedules) are screened into the
    watcher's results folder as training goes; training from scratch, the watcher replaces an
    earlier run's screens of its model (`Watcher.start(overwrite=True)`), and it is closed at the
    end, so that a panel can run on its folder. `save`: "all" checkpoints, or the "final" one
    (default: "final" with a watcher, else "all"); `keep`: scheduled steps saved as well (a directory
    trained with other kept steps is trained again)."""
    try:
        return _train(Path(out), organism, on_step, watch, save, keep)
    finally:
        if watch is not None:
            watch.close()


def _train(
    out: Path,
    organism: Organism,
    on_step: StepCallback | None,
    watch: "Watcher | None",
    save: str | None,
    keep: Sequence[int] = (),
) -> TrainResult:
    organism.validate()
    save = save or ("final" if watch is not None else "all")
    if save not in ("all", "final"):
        raise HeadtraceError(f"save must be 'all' or 'final' (got {save!r})")
    result = TrainResult(out=out)
    if _prepare(out, organism, watch, keep):
        result.checkpoints = json.loads((out / REVISIONS_FILE).read_text())
        result.screened = json.loads((out / ORGANISM_FILE).read_text()).get("screened") or []
        result.reused = True
        return result
    if watch is not None:
        watch.start(overwrite=True)  # trained from scratch: an earlier run's screens of this model go
    config, corpus = organism.train, organism.corpus
    torch.manual_seed(config.seed)
    model = build_model(organism.recipe, corpus.vocab_size, context=2 * corpus.seq_len)
    model.train()
    tokenizer = corpus_tokenizer(corpus)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, config))
    saves = set(config.checkpoint_steps())
    loss_drop = LossDropSaves(config.checkpoint_loss_drop)
    meta = {"organism": organism.to_dict(), "complete": False, "revisions": REVISIONS_FILE, "kept": sorted(keep)}
    if corpus.source != "zipf":
        meta["corpus_text"] = text_provenance(corpus.source)
    meta["arithmetic"] = arithmetic()
    if watch is not None:
        watch.prepare(model)  # a setting that does not fit fails now, not after minutes of training
        meta["screened"] = result.screened = watch.screened
        meta["run_id"] = watch.run_id
    started = time.perf_counter()
    for step in range(1, config.steps + 1):
        ids = torch.from_numpy(batch(corpus, step - 1, config.batch_size))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        result.losses.append(loss.item())
        checkpoint = loss_drop.update(result.losses[-1]) or step in saves
        tokens = step * config.batch_size * corpus.seq_len
        if checkpoint:
            loss_drop.saved()
        if watch is not None and (checkpoint or watch.due(step)):
            watch.screen(model, step, tokens)
            write_json_atomic(meta, out / ORGANISM_FILE)
        if checkpoint and (save == "all" or step == config.steps or step in keep):
            meta["complete"] = step == config.steps
            model.eval()
            _save(model, tokenizer, out, revision_name(step, config.steps), step, tokens, result.checkpoints, meta)
            model.train()
        if on_step is not None:
            on_step(step, config.steps, result.losses[-1])
    result.wall_s = time.perf_counter() - started
    return result
