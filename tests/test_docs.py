"""Every example in README.md and docs/*.md runs.

A document's fenced blocks run in order, in one temporary folder: Python blocks in the venv's
Python, shell blocks in bash with the venv's `headtrace` first on the PATH, TOML blocks as panel files
(written under the name their first line gives, `# pythia.toml`, for the blocks after them). Hub
ids are served by the local hub server (tests/hub_server.py: tiny random models under the real
names), `path/to/checkpoint-dir` is a tiny local checkpoint, and the repository's `panels/` and
`tests/data/` are at hand. A shell block right after `<!-- not run: REASON -->` is left out for that
reason (the demo, sweeps, benchmarks, GPU panels); Python blocks always run.

Where an example needs what the suite has not got, SUBSTITUTIONS rewrites it, each with its reason,
and the test fails when a rewrite no longer matches its document. SETUPS gives the blocks that use
the reader's own objects (`model`, `args`, `data`, `train_step`) small ones, defined before the block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hub_server import OLMO_BRANCHES, PYTHIA_BRANCHES, HubServer, fake_repo

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh", "bash", "toml"}
LANGUAGES = RUN | {"text"}  # text: listings, diagrams, formulas
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+) -->$")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")

# (document, pattern, replacement, why): rewrites that let an example run here, quickly; a
# document of None rewrites every document.
SUBSTITUTIONS = [
    (
        None,
        r"(-n |n_examples ?= ?)\d+",
        r"\g<1>16",
        "probes of 16 sequences: the examples' sizes are for real models, the suite's are tiny",
    ),
    (None, r"(device=\"|--device )cuda", r"\g<1>cpu", "the suite has no GPU"),
    (
        "README.md",
        r"--circuit induction",
        "--circuit L1H0,L1H1",
        "the hub server's tiny random models have no induction circuit: name two heads",
    ),
    (
        "docs/commands.md",
        r"induction_threshold = 50\.0",
        "induction_threshold = 0.0",
        "the hub server's tiny random models have no induction head at 50x: at 0x every head is in the final set",
    ),
    (
        "docs/organism.md",
        r"TrainConfig\(steps=2000\)",
        "TrainConfig(steps=40, batch_size=4, n_checkpoints=3, checkpoint_every=None, checkpoint_loss_drop=None)",
        "a short run with 3 checkpoints, not minutes of training",
    ),
]


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository
    line: int  # of the opening fence
    lang: str
    text: str
    not_run: str | None  # the reason, when marked

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} ({self.lang})"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the `not run` mark right before each."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, f"{path.name}:{i + 1}: a fenced block is not closed"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = NOT_RUN.match(before.strip())
        found.append(
            Block(
                str(path.relative_to(ROOT)),
                i + 1,
                fence["lang"],
                "\n".join(lines[i + 1 : end]) + "\n",
                mark["reason"] if mark else None,
            )
        )
        i = end + 1
    return found


def test_every_block_names_its_language_and_only_shell_blocks_are_left_out():
    for path in DOCS:
        marks = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith("<!-- not run")]
        found = blocks(path)
        for block in found:
            assert block.lang in LANGUAGES, f"{block}: name the block's language, one of {sorted(LANGUAGES)}"
            if block.not_run is not None:
                assert block.lang in ("sh", "bash"), f"{block}: only shell blocks may be left out; Python blocks run"
        assert len(marks) == sum(b.not_run is not None for b in found), (
            f"{path.name}: a `not run` mark "
            "must sit right before the block it leaves out, with its reason: <!-- not run: REASON -->"
        )
    assert sum(len(blocks(p)) for p in DOCS) > 20
    for doc, pattern, _new, why in SUBSTITUTIONS:  # a rewrite that no longer matches says so
        assert any(
            re.search(pattern, block.text)
            for path in DOCS
            if doc in (None, str(path.relative_to(ROOT)))
            for block in blocks(path)
            if block.lang in RUN and block.not_run is None
        ), (doc, pattern, why)


@pytest.fixture(scope="module")
def docs_hub():
    """The hub ids the documents name: tiny random GPT-NeoX on Pythia's branches, OLMo on OLMo's."""
    repos = [
        fake_repo(name, "gpt_neox", PYTHIA_BRANCHES) for name in ("EleutherAI/pythia-160m", "EleutherAI/pythia-1b")
    ]
    with HubServer([*repos, fake_repo("allenai/OLMo-1B-0724-hf", "olmo", OLMO_BRANCHES)]) as server:
        yield server


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from models_zoo import tiny_model

    path = tmp_path_factory.mktemp("world") / "checkpoint-dir"
    tiny_model("gpt_neox").save_pretrained(path)
    return path


# Code run before a block that holds the snippet: the reader's own objects, made small.
TRAINER_SETUP = """
import torch
from transformers import TrainingArguments
from models_zoo import tiny_model

torch.manual_seed(0)
model = tiny_model("gpt_neox").train()                 # a tiny GPT-NeoX, 8 steps of 2 sequences
args = TrainingArguments(output_dir="trainer", max_steps=8, per_device_train_batch_size=2, report_to="none",
                         save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
data = [{"input_ids": row, "labels": row} for row in torch.randint(100, 10000, (16, 64))]
"""
LOOP_SETUP = """
import torch
from models_zoo import tiny_model

torch.manual_seed(0)
model = tiny_model("gpt_neox").train()                 # a tiny GPT-NeoX and one SGD step on a random batch
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

def train_step(model):
    ids = torch.randint(100, 10000, (2, 64))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
LOADED_SETUP = """
from models_zoo import tiny_model

model = tiny_model("gpt_neox")                          # a model the reader has loaded: a tiny GPT-NeoX
"""
SETUPS = {
    "Trainer(model=model, args=args, train_dataset=data": TRAINER_SETUP,
    "watch.prepare(model)": LOOP_SETUP,
    "screen_model(model,": LOADED_SETUP,
}


def substituted(block: Block) -> str:
    text = block.text
    for doc, pattern, new, _why in SUBSTITUTIONS:
        if doc in (None, block.doc):
            text = re.sub(pattern, new, text)
    return text


def run_block(block: Block, text: str, folder: Path, env: dict[str, str]) -> None:
    if block.lang in ("python", "sh", "bash"):
        if block.lang == "python":
            setup = "".join(code for snippet, code in SETUPS.items() if snippet in text)
            command = [sys.executable, "-c", setup + text]
        else:
            command = ["bash", "-euo", "pipefail", "-c", text]
        proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (
            f"{block} exited {proc.returncode}:\n{text}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    elif block.lang == "toml":
        from headtrace.panel import load_panel

        first = text.splitlines()[0]
        name = first[2:].strip() if re.fullmatch(r"# [\w.-]+\.toml", first) else f".block-{block.line}.toml"
        (folder / name).write_text(text)
        load_panel(folder / name)


SLOW = {"README.md"}  # over 30 s on 2 cores: most of its examples load a model


@pytest.mark.parametrize(
    "doc", [pytest.param(d, marks=pytest.mark.slow) if d.name in SLOW else d for d in DOCS], ids=lambda p: p.name
)
def test_the_examples_run(doc, docs_hub, checkpoint, tmp_path):
    folder = tmp_path / "work"
    (folder / "path" / "to").mkdir(parents=True)
    (folder / "path" / "to" / "checkpoint-dir").symlink_to(checkpoint)
    (folder / "panels").symlink_to(ROOT / "panels")
    (folder / "tests").mkdir()
    (folder / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    env = {name: value for name, value in os.environ.items() if name not in ("HF_HUB_OFFLINE", "HF_HUB_CACHE")}
    # One torch thread: on a shared 2-core machine two threads per process can run ten times slower.
    env |= {
        "HF_ENDPOINT": docs_hub.url,
        "HF_HOME": str(tmp_path / "hf"),
        "COLUMNS": "100",
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")]),
    }  # models_zoo
    for block in blocks(doc):
        if block.lang in RUN and block.not_run is None:
            run_block(block, substituted(block), folder, env)
