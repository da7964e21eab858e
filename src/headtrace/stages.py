"""Per-checkpoint stages: what a panel's task does with one loaded checkpoint.

A task loads its checkpoint and builds the probe once; then each stage of the panel runs on it, in
order: the screen first (it writes the shard), then the stages a panel file names by a section of
their own, such as `[ablation]`. A stage says whether its result is already stored (so a re-run
resumes) and writes its own table into the results folder.

To add a measurement, subclass `Stage`, give it a `name` and register it:

    @STAGES.register("weight_norms")
    @dataclass(frozen=True)
    class WeightNorms(Stage):
        name = "weight_norms"
        def run(self, checkpoint: CheckpointContext) -> StageResult: ...

A panel file then enables it with a `[weight_norms]` section (keys: the dataclass's fields, plus
`revisions = "final" | "all" | "log:N" | [names]`). A stage whose `second_pass` is true runs after
every screen of the panel (it reads the last revision's screen, as the ablation of a final:<set>
circuit does). Stages must be picklable to run on Ray. Torch-free at
import: the built-in stages import the model code when they run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Callable, ClassVar

from headtrace.errors import HeadtraceError
from headtrace.registry import Registry
from headtrace.revisions import Revision
from headtrace.schema import ABLATION_MODES, AblationConfig, ScreenConfig, parse_circuit, tag
from headtrace.store import COMPOSITION, ResultsDir, read_table, run_record

Progress = Callable[[int, int], None]
FINAL_DEFAULT_REVISIONS = "log:8"  # where a final:<set> circuit is ablated unless the section says


class SettingError(HeadtraceError):
    """A bad value in a stage's panel section; `key` names it, so the message can give its line."""

    def __init__(self, key: str | None, message: str):
        super().__init__(message)
        self.key = key


@dataclass
class CheckpointContext:
    """One loaded checkpoint, shared by the stages of its task."""

    model: str  # the model's name in tables
    revision: Revision
    adapter: object  # models.ModelAdapter
    probe: object  # probes.Probe
    config: ScreenConfig  # this model's screen config
    results: ResultsDir
    progress: Callable[[str], Progress]  # a progress callback for a named step
    source: str = ""  # where the checkpoint came from (Checkpoint.source)
    checkpoint_hash: str | None = None
    downloaded_bytes: int = 0
    fetch_s: float = 0.0
    load_s: float = 0.0
    member: tuple[str, int] | None = None  # (family, seed) of a seed family's member (families.py)
    weights_warning: str | None = None  # shares weight files with, or equals, another revision (series.py)


@dataclass
class StageResult:
    """What a stage did: a short summary for people (the ablation's verdict) and, for the screen,
    the run record it wrote (the panel's manifest lists it)."""

    summary: str = ""
    record: dict | None = None


class Stage:
    """A per-checkpoint measurement (subclass it as a frozen dataclass; its fields are its settings)."""

    name: ClassVar[str] = ""
    default_revisions: ClassVar[str] = "all"  # which revisions a panel section without `revisions` selects

    @classmethod
    def section_keys(cls) -> dict[str, str]:
        """The keys of its panel section and their types (as dataclass annotations spell them)."""
        return {f.name: str(f.type) for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}

    @classmethod
    def from_section(cls, values: dict) -> "Stage":
        """The stage a panel section describes (values already type-checked against section_keys)."""
        return cls(**values)

    def describe(self) -> dict:
        """Its settings, as the manifest records them."""
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    @property
    def revisions_default(self) -> str:
        """The revisions its section selects without `revisions`."""
        return self.default_revisions

    @property
    def second_pass(self) -> bool:
        """Whether it runs after all the panel's screens (it needs the last revision's) instead of
        right after its own revision's screen."""
        return False

    def done(self, results: ResultsDir, model: str, revision: str, config: ScreenConfig) -> bool:
        """Whether `results` already holds this stage's result for (model, revision) under `config`."""
        return False

    def run(self, checkpoint: CheckpointContext) -> StageResult:
        raise NotImplementedError


STAGES: Registry[type[Stage]] = Registry("stage")


@STAGES.register("screen")
@dataclass(frozen=True)
class ScreenStage(Stage):
    """The screen: every head's selectivities, labels and PR, written as the (model, revision) shard."""

    name: ClassVar[str] = "screen"

    def done(self, results: ResultsDir, model: str, revision: str, config: ScreenConfig) -> bool:
        return results.stored_screen_hash(model, revision) == config.config_hash

    def run(self, checkpoint: CheckpointContext) -> StageResult:
        from headtrace.screen import screen  # torch, when a task runs (planning loads none)

        result = screen(
            checkpoint.adapter,
            checkpoint.probe,
            checkpoint.config,
            model_name=checkpoint.model,
            revision=checkpoint.revision.name,
            tokens=checkpoint.revision.tokens,
            progress=checkpoint.progress(""),
        )
        run = run_record(
            result.run,
            checkpoint.source,
            checkpoint.checkpoint_hash,
            checkpoint.downloaded_bytes,
            checkpoint.fetch_s,
            checkpoint.load_s,
            weights_warning=checkpoint.weights_warning,
        )
        heads = result.heads
        if checkpoint.member is not None:
            heads, run = tag(heads, *checkpoint.member), tag(run, *checkpoint.member)
        checkpoint.results.write_shard(heads, run, result.patterns)
        return StageResult(record=run.iloc[0].to_dict())


@STAGES.register("ablation")
@dataclass(frozen=True)
class AblationStage(Stage):
    """Group ablation of a circuit against matched-random heads (ablation.py), into DIR/ablations/;
    the circuit comes from the screen stored for this config. A final:<set> circuit (F8) is the set
    at the model's last revision: a second pass, on `log:8` revisions unless the section says."""

    name: ClassVar[str] = "ablation"
    default_revisions: ClassVar[str] = "final"
    config: AblationConfig = AblationConfig()

    @classmethod
    def section_keys(cls) -> dict[str, str]:
        return {
            **{f.name: str(f.type) for f in dataclasses.fields(AblationConfig)},
            "seeds": "int",
        }  # seeds: the old name of draws, still read

    @classmethod
    def from_section(cls, values: dict) -> "AblationStage":
        values = dict(values)
        if "seeds" in values:
            values["draws"] = values.pop("seeds")
        if values.get("mode", "zero") not in ABLATION_MODES:
            raise SettingError("mode", f"mode = '{values['mode']}' is not one of: {', '.join(ABLATION_MODES)}")
        config = AblationConfig(**values)
        try:
            parse_circuit(config.circuit)
        except HeadtraceError as exc:
            raise SettingError("circuit", str(exc)) from None
        config.validate()
        return cls(config)

    def describe(self) -> dict:
        return dataclasses.asdict(self.config)

    @property
    def revisions_default(self) -> str:
        return FINAL_DEFAULT_REVISIONS if self.second_pass else self.default_revisions

    @property
    def second_pass(self) -> bool:
        return parse_circuit(self.config.circuit).final

    def done(self, results: ResultsDir, model: str, revision: str, config: ScreenConfig) -> bool:
        if self.second_pass:  # the final circuit's heads are in the hash: a new last revision may change them
            try:
                heads, _ = results.final_circuit(model, parse_circuit(self.config.circuit).head_set)
            except HeadtraceError:
                return False
            return results.stored_ablation_hash(model, revision) == self.config.config_hash(config, heads)
        return results.stored_ablation_hash(model, revision) == self.config.config_hash(config)

    def run(self, checkpoint: CheckpointContext) -> StageResult:
        from headtrace.ablation import ablate_checkpoint  # torch, when a task runs (planning loads none)

        result = ablate_checkpoint(
            checkpoint.model,
            checkpoint.revision.name,
            checkpoint.config,
            self.config,
            out=checkpoint.results.root,
            tokens=checkpoint.revision.tokens,
            adapter=checkpoint.adapter,
            probe=checkpoint.probe,
            progress=checkpoint.progress("ablation"),
        )
        return StageResult(summary=result.verdict)


@STAGES.register("composition")
@dataclass(frozen=True)
class CompositionStage(Stage):
    """The induction heads' K-, Q- and V-composition with every earlier head from the weights
    (composition.py), into DIR/composition/; with `causal`, also each earlier head's ablation drop
    of their induction selectivity (one screen pass per earlier head). The induction heads come from
    the screen stored for this config."""

    name: ClassVar[str] = "composition"
    causal: bool = False

    def config_hash(self, config: ScreenConfig) -> str:
        payload = json.dumps({"composition": {"causal": self.causal}, "screen": config.config_hash}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def done(self, results: ResultsDir, model: str, revision: str, config: ScreenConfig) -> bool:
        path = results.table_path(COMPOSITION, model, revision)
        if not path.is_file():
            return False
        stored = read_table(path)  # a watcher's table has no config_hash: computed again here
        return "config_hash" in stored and len(stored) and stored.config_hash.iloc[0] == self.config_hash(config)

    def run(self, checkpoint: CheckpointContext) -> StageResult:
        from headtrace.composition import composition_table  # torch, when a task runs (planning loads none)

        results, config = checkpoint.results, checkpoint.config
        heads = results.stored_screen(checkpoint.model, checkpoint.revision.name, config.config_hash)
        if heads is None:
            raise HeadtraceError(f"composition of {checkpoint.model}@{checkpoint.revision.name}: no stored screen")
        table = composition_table(checkpoint.adapter, heads, checkpoint.probe, config, causal=self.causal)
        if not len(table):
            return StageResult(summary="no induction head: no composition")
        results.write_table(COMPOSITION, table.assign(config_hash=self.config_hash(config)))
        strongest = table.loc[table.k_comp.fillna(-1.0).idxmax()]
        link = f"{strongest.sender} -> {strongest.receiver}"
        return StageResult(summary=f"strongest K-composition {link}: {strongest.k_comp:.3f}")
