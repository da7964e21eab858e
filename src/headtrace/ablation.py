"""Group ablation: does the model need a circuit's heads, more than it needs as many other heads?

A head is ablated at the input of its layer's output projection (its slice of the per-head
outputs), at every position, by zeroing it (default) or by replacing it with its mean output over
the whole probe (every example and position, measured in the clean pass). Conditions:

    clean     nothing ablated
    circuit   the circuit's heads
    random    matched-random heads, one row per seed: the same layers and count per layer as the
              circuit, disjoint from it (where a layer holds too few other heads, the draw takes all
              of them and the row's `shortfall` says how many are missing; it never draws fewer silently)
    layers    every head of the circuit's layers (upper bound)
    single    each circuit head alone

Circuits: the screen's all-head sets (`schema.HEAD_SETS`; previous-token is the reference's shipped circuit),
`final:<set>` (that set at the model's last revision screened in the results directory, the same
heads at every revision ablated: F8, causal emergence), `pr-top:K` (the K heads of highest
time-integrated PR over the revisions stored in the results directory, as the study ranked them),
or a head list.

Metrics per condition at the query (hooks.CapabilityAccumulator): top-1, top-5, loss, mean logit of
the answer. The deciding metric is top-1 when the clean top-1 is at least `MIN_TOP1` (there is room
to fall), else the loss; `AblationConfig.metric` sets it instead. damage = clean - ablated (top-1)
or ablated - clean (loss); the differential is damage(circuit) - mean damage(random seeds), with a
bootstrap interval that resamples examples and seeds; the verdict is "necessary" when the interval
lies above 0, else "not shown".

How it runs fast. One clean pass (full forward) gives the clean metrics, the per-head means and the
residual stream entering the first layer with ablated heads. Every other condition replays only the
layers from there on, and several conditions share one forward: the micro-batch is stacked `stack`
times along the batch and each block gets its own head mask. `strategy="naive"` runs one full pass
per condition (the reference for tests and benchmarks/ablation_batching.py).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch

from headtrace import __version__
from headtrace.errors import HeadtraceError
from headtrace.hooks import CapabilityAccumulator, head_output_hooks, micro_batches
from headtrace.models import HeadLayout, LayerInput, ModelAdapter, head_id, load_model, load_tokenizer
from headtrace.probes import Probe, build_probe
from headtrace.schema import AblationConfig, Head, ScreenConfig, check_heads_exist, heads_in_set, parse_circuit
from headtrace.screen import screen
from headtrace.sources import checkpoint_location
from headtrace.spectral import time_integrated_pr
from headtrace.store import ResultsDir, read_results

Progress = Callable[[int, int], None]

CONDITIONS = ("clean", "circuit", "random", "layers", "single")
METRICS = CapabilityAccumulator.METRICS
MIN_TOP1 = 0.1  # below this clean top-1, top-1 cannot fall far enough to decide: the loss decides


@dataclass(frozen=True)
class Condition:
    kind: str  # one of CONDITIONS
    heads: tuple[Head, ...]
    seed: int = -1
    shortfall: int = 0

    @property
    def label(self) -> str:
        return heads_text(self.heads)


@dataclass
class AblationResult:
    """One row per condition (the stored table), and how long the run took."""

    table: pd.DataFrame
    wall_s: float = 0.0
    circuit_source: str = ""  # given | stored screen | screened
    stats: np.ndarray | None = field(default=None, repr=False)  # [conditions, examples, 4]

    @property
    def verdict(self) -> str:
        return str(self.table.verdict.iloc[0])


# --------------------------------------------------------------------------------------------
# Circuits.


def heads_text(heads) -> str:
    return ",".join(head_id(l, h) for l, h in sorted(heads))


def circuit_from_screen(heads: pd.DataFrame, circuit: str) -> tuple[Head, ...]:
    """The heads of one of the screen's head sets (schema.HEAD_SETS) in a heads table."""
    return heads_in_set(heads, circuit)


def pr_ranking(heads: pd.DataFrame) -> pd.DataFrame:
    """Per head of one model's revisions: time-integrated PR (spectral.time_integrated_pr, the trapezoid
    of max(PR - 1, 0) over log(tokens)), highest first; ties in layer, head order."""
    rows = []
    for (layer, head), group in heads.sort_values("tokens", kind="stable").groupby(["layer", "head"], sort=True):
        measured = group.loc[group["pr"].notna() & (group["tokens"] > 0)]
        rows.append(
            {
                "layer": int(layer),
                "head": int(head),
                "head_id": head_id(int(layer), int(head)),
                "integral": time_integrated_pr(measured["tokens"].to_numpy(), measured["pr"].to_numpy()),
                "n_revisions": len(measured),
            }
        )
    ranking = pd.DataFrame(rows)
    return ranking.sort_values("integral", ascending=False, kind="stable", na_position="last").reset_index(drop=True)


def pr_top_circuit(out: str | Path | None, model: str, k: int) -> tuple[tuple[Head, ...], str]:
    """The `k` heads of `model` with the highest time-integrated PR over the revisions stored in `out`."""
    if out is None:
        raise HeadtraceError(
            f"pr-top:{k} ranks heads by PR over a panel's revisions: pass --out DIR holding "
            f"{model}'s screened or imported revisions"
        )
    heads, _ = read_results(out)
    heads = heads.loc[(heads["model"] == model) & heads["pr"].notna() & (heads["tokens"] > 0)]
    n_revisions = heads["revision"].nunique()
    if n_revisions < 2:
        raise HeadtraceError(
            f"pr-top:{k} needs PR at two or more revisions of {model} with known tokens in '{out}' "
            f"(found {n_revisions}); screen the panel there (headtrace run) or import it"
        )
    ranking = pr_ranking(heads).dropna(subset=["integral"])
    if len(ranking) < k:
        raise HeadtraceError(
            f"pr-top:{k}: {model} has {len(ranking)} heads with a PR trajectory; pick K <= {len(ranking)}"
        )
    chosen = ranking.head(k)
    return (
        tuple(sorted(zip(chosen["layer"], chosen["head"]))),
        f"time-integrated PR over {n_revisions} revisions in {out}",
    )


def final_circuit(out: str | Path | None, model: str, head_set: str) -> tuple[tuple[Head, ...], str]:
    """final:<head_set>: the set's heads at `model`'s last revision (training order) screened in
    `out`, and where they came from (ResultsDir.final_circuit)."""
    if out is None:
        raise HeadtraceError(
            f"final:{head_set} takes the circuit from {model}'s last revision screened in a results folder: "
            "pass --out DIR"
        )
    heads, last = ResultsDir(out).final_circuit(model, head_set)
    return heads, f"{head_set} at the last revision {last} in {out}"


# --------------------------------------------------------------------------------------------
# Conditions.


def matched_random(circuit: tuple[Head, ...], n_heads: int, rng: np.random.Generator) -> tuple[tuple[Head, ...], int]:
    """Heads in the circuit's layers, as many per layer, disjoint from it; and the shortfall (heads
    that could not be drawn because a layer holds too few others)."""
    chosen, shortfall = [], 0
    for layer in sorted({l for l, _ in circuit}):
        count = sum(1 for l, _ in circuit if l == layer)
        others = [h for h in range(n_heads) if (layer, h) not in circuit]
        take = min(count, len(others))
        shortfall += count - take
        chosen += [(layer, int(h)) for h in rng.choice(others, size=take, replace=False)] if take else []
    return tuple(sorted(chosen)), shortfall


def conditions_for(circuit: tuple[Head, ...], layout: HeadLayout, config: AblationConfig) -> list[Condition]:
    """clean, circuit, random (one per seed), layers, single (one per circuit head): in that order."""
    if not circuit:
        raise HeadtraceError("the circuit is empty: nothing to ablate")
    conditions = [Condition("clean", ()), Condition("circuit", circuit)]
    for s in range(config.draws):
        heads, shortfall = matched_random(circuit, layout.n_heads, np.random.default_rng([config.seed, 0, s]))
        conditions.append(Condition("random", heads, seed=s, shortfall=shortfall))
    layers = sorted({l for l, _ in circuit})
    conditions.append(Condition("layers", tuple((l, h) for l in layers for h in range(layout.n_heads))))
    if config.singles:
        conditions += [Condition("single", (head,)) for head in circuit]
    return conditions


# --------------------------------------------------------------------------------------------
# Running conditions.


class _Masks:
    """Which heads the next forward keeps, per layer: [blocks, heads] bool, or None (keep all)."""

    def __init__(self, layout: HeadLayout, device: torch.device):
        self.layout, self.device = layout, device
        self.keep: list[torch.Tensor | None] = [None] * layout.n_layers
        self.fill: list[torch.Tensor] | None = None  # per-layer [heads, dim] means (mean mode)

    def set(self, conditions: list[Condition]) -> None:
        keep = torch.ones(len(conditions), self.layout.n_layers, self.layout.n_heads, dtype=torch.bool)
        for block, condition in enumerate(conditions):
            for l, h in condition.heads:
                keep[block, l, h] = False
        self.keep = [
            None if bool(keep[:, l].all()) else keep[:, l].to(self.device) for l in range(self.layout.n_layers)
        ]

    def clear(self) -> None:
        self.keep = [None] * self.layout.n_layers

    def __call__(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        keep = self.keep[layer]
        if keep is None:
            return None
        blocks = x.view(keep.shape[0], -1, *x.shape[1:])  # [blocks, b, L, heads, dim]
        fill = self.fill[layer].to(x.dtype) if self.fill is not None else x.new_zeros(())
        return torch.where(keep[:, None, None, :, None], blocks, fill).view_as(x)


def run_conditions(
    adapter: ModelAdapter,
    probe: Probe,
    conditions: list[Condition],
    mode: str = "zero",
    batch_size: int = 16,
    stack: int = 8,
    cache_mb: int = 2048,
    strategy: str = "replay",
    progress: Progress | None = None,
) -> np.ndarray:
    """Per-example metrics [conditions, examples, 4] (columns METRICS); conditions[0] must be clean.

    strategy "replay": one clean pass, then the later layers replayed with `stack` conditions per
    forward; "naive": one full forward per condition and micro-batch."""
    if not conditions or conditions[0].heads:
        raise ValueError("the first condition must be the clean one (no heads)")
    if strategy not in ("replay", "naive"):
        raise ValueError(f"unknown strategy {strategy!r}")
    layout, device = adapter.layout, adapter.device
    batches = micro_batches(probe.n, batch_size)
    stats = np.zeros((len(conditions), probe.n, len(METRICS)))
    masks = _Masks(layout, device)
    ablated = list(range(1, len(conditions)))  # an empty set here still runs (a check of the machinery)
    first = min((l for c in conditions for l, _ in c.heads), default=layout.n_layers - 1)
    total = probe.n * len(conditions)
    width = adapter.model.get_input_embeddings().weight.shape[1]
    element = torch.finfo(adapter.dtype).bits // 8
    # Keep the residual stream entering `first` from the clean pass when it fits; else recompute it.
    cache = strategy == "replay" and probe.n * probe.seq_len * width * element <= cache_mb * 2**20
    cached: list[LayerInput] = []

    def inputs(rows: slice) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.as_tensor(probe.input_ids[rows], device=device)
        query = torch.as_tensor(probe.query[rows], device=device)
        answer = torch.as_tensor(probe.answer[rows], device=device)
        return ids, query, answer

    with torch.inference_mode(), head_output_hooks(adapter, masks):
        # The clean pass: clean metrics, per-head means, the residual stream entering `first`.
        sums = [
            torch.zeros(layout.n_heads, layout.head_dim, dtype=torch.float64, device=device)
            for _ in range(layout.n_layers)
        ]
        positions = 0

        def accumulate(layer: int, x: torch.Tensor) -> None:
            sums[layer] += x.sum(dim=(0, 1), dtype=torch.float64)

        with head_output_hooks(adapter, accumulate) if mode == "mean" else contextlib.nullcontext():
            for rows in batches:
                ids, query, answer = inputs(rows)
                if cache and ablated:
                    with adapter.recording_layer_input(first) as captured:
                        hidden = adapter.hidden_states(ids)
                    cached.append(captured[0])
                else:
                    hidden = adapter.hidden_states(ids)
                stats[0, rows] = (
                    CapabilityAccumulator.per_example(adapter.logits_at(hidden, query), answer).cpu().numpy()
                )
                positions += ids.numel()
                if progress:
                    progress(rows.stop - rows.start, total)
        if mode == "mean":
            masks.fill = [s / positions for s in sums]

        # The ablated conditions.
        group = 1 if strategy == "naive" else stack
        chunks = [ablated[i : i + group] for i in range(0, len(ablated), group)]
        for index, rows in enumerate(batches):
            ids, query, answer = inputs(rows)
            b = rows.stop - rows.start
            start = None
            if strategy == "replay" and chunks:
                start = cached[index] if cache else adapter.layer_input(ids, first)
            for chunk in chunks:
                c = len(chunk)
                masks.set([conditions[i] for i in chunk])
                try:
                    hidden = adapter.hidden_states(ids) if start is None else adapter.replay(start, first, repeat=c)
                finally:
                    masks.clear()
                logits = adapter.logits_at(hidden, query.repeat(c))
                block_stats = CapabilityAccumulator.per_example(logits, answer.repeat(c)).view(c, b, -1)
                stats[chunk, rows] = block_stats.cpu().numpy()
                if progress:
                    progress(c * b, total)
    return stats


# --------------------------------------------------------------------------------------------
# Summaries.


def decided_by(clean_top1: float, metric: str = "auto") -> str:
    """The deciding metric: `metric` when set, else top1 when the clean top-1 leaves room to fall
    (>= MIN_TOP1), else loss."""
    if metric != "auto":
        return metric
    return "top1" if clean_top1 >= MIN_TOP1 else "loss"


def differential(
    circuit: np.ndarray, random: np.ndarray, metric: str, n_bootstrap: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """damage(circuit) - mean damage(random) for one metric, and its 95% bootstrap interval.

    circuit: [examples]; random: [seeds, examples] (per-example values of the metric). The clean
    values cancel in the difference of damages. Each bootstrap draw resamples examples (the same
    ones for circuit and random) and seeds, with replacement."""
    sign = -1.0 if metric == "loss" else 1.0  # damage: a fall in top-1/top-5/logit, a rise in loss
    n, s = circuit.shape[0], random.shape[0]
    point = sign * (random.mean() - circuit.mean())
    draws = []
    for start in range(0, n_bootstrap, 256):
        k = min(256, n_bootstrap - start)
        w_examples = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(k)]) / n  # [k, n]
        w_seeds = np.stack([np.bincount(rng.integers(0, s, s), minlength=s) for _ in range(k)]) / s  # [k, s]
        random_mean = ((w_seeds @ random) * w_examples).sum(axis=1)
        draws.append(sign * (random_mean - w_examples @ circuit))
    low, high = np.percentile(np.concatenate(draws), [2.5, 97.5])
    return float(point), float(low), float(high)


def ablate(
    adapter: ModelAdapter,
    probe: Probe,
    circuit: tuple[Head, ...],
    config: AblationConfig = AblationConfig(),
    screen_config: ScreenConfig = ScreenConfig(),
    model_name: str = "",
    revision: str | None = None,
    tokens: float | None = None,
    strategy: str = "replay",
    progress: Progress | None = None,
) -> AblationResult:
    """Ablate `circuit` and its controls on `probe`; one row per condition."""
    config.validate()
    probe.check_vocab(adapter.vocab_size)
    started = time.perf_counter()
    conditions = conditions_for(circuit, adapter.layout, config)
    stats = run_conditions(
        adapter,
        probe,
        conditions,
        config.mode,
        screen_config.batch_size,
        config.stack,
        config.cache_mb,
        strategy,
        progress,
    )
    means = stats.mean(axis=1)  # [conditions, 4]
    metric = decided_by(means[0, 0], config.metric)
    column = METRICS.index(metric)
    kinds = np.array([c.kind for c in conditions])
    circuit_values = stats[kinds == "circuit", :, column][0]
    random_values = stats[kinds == "random", :, column]
    point, low, high = differential(
        circuit_values, random_values, metric, config.n_bootstrap, np.random.default_rng([config.seed, 1])
    )
    table = pd.DataFrame(
        {
            "condition": kinds.astype(object),
            "seed": np.array([c.seed for c in conditions], dtype=np.int64),
            "heads": [c.label for c in conditions],
            "n_ablated": np.array([len(c.heads) for c in conditions], dtype=np.int64),
            "shortfall": np.array([c.shortfall for c in conditions], dtype=np.int64),
            **{name: means[:, i] for i, name in enumerate(METRICS)},
        }
    )
    final = parse_circuit(config.circuit).final
    table = table.assign(
        model=model_name,
        revision=revision or "",
        tokens=np.float64(np.nan if tokens is None else tokens),
        circuit=config.circuit,
        circuit_heads=heads_text(circuit),
        mode=config.mode,
        verdict="necessary" if low > 0 else "not shown",
        decided_by=metric,
        differential=point,
        differential_low=low,
        differential_high=high,
        probe=probe.description.get("kind", "custom"),
        n_examples=probe.n,
        seq_len=probe.seq_len,
        n_seeds=config.draws,
        n_bootstrap=config.n_bootstrap,
        screen_config_hash=screen_config.config_hash,
        config_hash=config.config_hash(screen_config, circuit if final else None),
        config_json=json.dumps(config.to_dict(), sort_keys=True),
        headtrace_version=__version__,
    )
    return AblationResult(table=table, wall_s=time.perf_counter() - started, stats=stats)


# --------------------------------------------------------------------------------------------
# One checkpoint, end to end: what `headtrace ablate` and a panel call.


def resolve_circuit(
    config: AblationConfig,
    adapter: ModelAdapter,
    probe: Probe,
    screen_config: ScreenConfig,
    model_name: str,
    revision: str | None = None,
    tokens: float | None = None,
    out: str | Path | None = None,
    progress: Progress | None = None,
) -> tuple[tuple[Head, ...], str]:
    """The circuit's heads and where they came from: a given list, the final circuit stored under `out`
    (final:<set>), a stored screen under `out`
    (same model, revision and screen config), or a screen run now (stored under `out` if given)."""
    spec = parse_circuit(config.circuit)
    label = f"{model_name}" + (f"@{revision}" if revision else "")
    if spec.final:
        heads, source = final_circuit(out, model_name, spec.head_set)
        check_heads_exist(heads, adapter.layout.n_layers, adapter.layout.n_heads, label)
        return heads, source
    if spec.pr_top:
        heads, source = pr_top_circuit(out, model_name, spec.pr_top)
        if max(l for l, _ in heads) >= adapter.layout.n_layers or max(h for _, h in heads) >= adapter.layout.n_heads:
            raise HeadtraceError(
                f"the PR ranking in '{out}' names heads that {label} does not have; is it another model's?"
            )
        return heads, source
    if spec.heads:
        check_heads_exist(spec.heads, adapter.layout.n_layers, adapter.layout.n_heads, label)
        return spec.heads, "given"
    name = spec.head_set
    heads = ResultsDir(out).stored_screen(model_name, revision, screen_config.config_hash) if out else None
    source = "stored screen"
    if heads is None:
        result = screen(
            adapter, probe, screen_config, model_name=model_name, revision=revision, tokens=tokens, progress=progress
        )
        heads, source = result.heads, "screened"
        if out is not None:
            ResultsDir(out).write_shard(result.heads, result.run, result.patterns)
    circuit = circuit_from_screen(heads, name)
    if not circuit:
        raise HeadtraceError(
            f"the {name} circuit of {label} is empty (no head passes its screen threshold): nothing "
            "to ablate; name heads instead, e.g. --circuit L2H11,L4H12"
        )
    return circuit, source


def ablate_checkpoint(
    model: str,
    revision: str | None = None,
    screen_config: ScreenConfig = ScreenConfig(),
    config: AblationConfig = AblationConfig(),
    out: str | Path | None = None,
    tokens: float | None = None,
    screen_progress: Progress | None = None,
    progress: Progress | None = None,
    adapter: ModelAdapter | None = None,
    probe: Probe | None = None,
    name: str | None = None,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
) -> AblationResult:
    """Load MODEL at `revision` (unless `adapter` is given), build the probe (unless given), find the
    circuit, ablate, optionally write DIR/ablations/<model>@<revision>.parquet; the tables label the
    result `name` (default: MODEL).

    >>> ablate_checkpoint("EleutherAI/pythia-160m", "step3000").table  # doctest: +SKIP
    """
    config.validate()
    screen_config.validate()
    location, hub_revision, found_tokens = (model, revision, None) if adapter else checkpoint_location(model, revision)
    tokens = found_tokens if tokens is None else tokens
    adapter = adapter or load_model(
        location,
        revision=hub_revision,
        dtype=screen_config.dtype,
        device=screen_config.device,
        trust_remote_code=trust_remote_code,
        cache_dir=cache_dir,
    )
    probe = probe or build_probe(
        screen_config.probe, lambda: load_tokenizer(location, hub_revision, trust_remote_code, cache_dir)
    )
    name = name or model
    circuit, source = resolve_circuit(
        config, adapter, probe, screen_config, name, revision, tokens, out, screen_progress
    )
    result = ablate(adapter, probe, circuit, config, screen_config, name, revision, tokens, progress=progress)
    result.circuit_source = source
    if out is not None:
        ResultsDir(out).write_ablation(result.table)
    return result
