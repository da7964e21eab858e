"""Bad input and faults met at the command line (issue 16): each ends in one line, early, with the exit
code that names its kind, and loses nothing already written. Real files, real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from headtrace.schema import ScreenConfig
from headtrace.screen import screen_checkpoint
from headtrace.store import ResultsDir
from panel_helpers import REVISIONS, local_panel, save_checkpoints

EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 3, 130  # the documented exit codes (docs/reliability.md)
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference" / "pythia-1b"
SMALL = ("-n", "16", "--seq-len", "64")


def headtrace(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "headtrace", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )


def one_line_error(proc: subprocess.CompletedProcess, code: int = EXIT_USAGE) -> str:
    """The process ended with `code` and exactly one `error:` line and no traceback; returns that line."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Path:
    """A local series of checkpoints, one subfolder per revision."""
    return save_checkpoints(tmp_path_factory.mktemp("series") / "tiny-series")


@pytest.fixture(scope="module")
def broken(tmp_path_factory, series) -> Path:
    """A checkpoint folder whose config is fine and whose weights file is truncated to 100 kB."""
    folder = tmp_path_factory.mktemp("broken") / "truncated"
    folder.mkdir()
    for file in (series / "step1").iterdir():
        data = file.read_bytes()
        (folder / file.name).write_bytes(data[:100_000] if file.suffix == ".safetensors" else data)
    return folder


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """A results directory: the study's Pythia-1B results, imported (no torch needed)."""
    out = tmp_path_factory.mktemp("imported") / "results"
    proc = headtrace("import-reference", *sorted(REFERENCE.glob("*.json")), "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


# Defect 1 -------------------------------------------------------------------------------------


def test_a_revision_of_a_local_checkpoint_is_refused_and_a_series_serves_its_subfolder(series, tmp_path):
    out = tmp_path / "out"
    for model in (series / "step1", tmp_path / "model.gguf"):
        (tmp_path / "model.gguf").write_bytes(b"GGUF")
        line = one_line_error(headtrace("screen", model, "--revision", "step999", *SMALL, "--out", out))
        assert f"--revision step999 does not apply to '{model}'" in line and "drop --revision" in line
    assert not out.exists()
    assert "revision 'step9' does not exist; closest: step3, step2, step1" in one_line_error(
        headtrace("screen", series, "--revision", "step9", *SMALL)
    )

    proc = headtrace("screen", series, "--revision", "step2", *SMALL, "--out", out)
    assert proc.returncode == 0, proc.stderr
    stored = pd.read_parquet(out / "heads")
    assert set(stored.model) == {"tiny-series"} and set(stored.revision) == {"step2"}
    direct = screen_checkpoint(str(series / "step2"), config=ScreenConfig.of(n_examples=16, seq_len=64)).heads
    assert stored.mean_induction.tolist() == direct.mean_induction.tolist()  # step2's weights, not another's


# Defect 2 -------------------------------------------------------------------------------------


def test_a_truncated_weights_file_is_one_line_and_in_a_panel_fails_its_revision_alone(broken, tmp_path):
    line = one_line_error(headtrace("screen", broken, *SMALL))
    assert f"'{broken / 'model.safetensors'}'" in line and "truncated or corrupt" in line

    checkpoints = save_checkpoints(tmp_path / "ckpt")
    weights = checkpoints / "step2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    proc = headtrace("run", local_panel(tmp_path, checkpoints, REVISIONS), "--out", tmp_path / "out")
    line = one_line_error(proc, EXIT_FAILED)
    assert "1 of 3 revisions failed (tiny/neox@step2)" in line
    assert str(weights) in " ".join(proc.stderr.split())
    assert sorted(p.name for p in (tmp_path / "out" / "runs").iterdir()) == [
        "tiny--neox@step1.parquet",
        "tiny--neox@step3.parquet",
    ]


# Defect 3 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["runs", "heads"])
def test_a_corrupt_parquet_file_is_one_line_naming_it(imported, tmp_path, folder):
    out = tmp_path / "results"
    subprocess.run(["cp", "-r", imported, out], check=True)
    victim = sorted((out / folder).glob("*.parquet"))[3]
    victim.write_bytes(victim.read_bytes()[:300])
    for command in ("results", "findings", "report"):
        line = one_line_error(headtrace(command, out))
        assert f"cannot read '{victim}'" in line and "`headtrace run` re-screens" in line
    assert victim.name not in set(ResultsDir(out).existing_runs().shard)  # so `headtrace run` does re-screen it


# Defect 4 -------------------------------------------------------------------------------------


def test_results_save_creates_its_folder_and_writes_the_format_its_extension_names(imported, tmp_path):
    for name in ("t.json", "t.csv", "t.parquet"):
        path = tmp_path / "new" / "folder" / name
        proc = headtrace("results", imported, "--save", path)
        assert proc.returncode == 0, proc.stderr
        table = {
            "json": lambda p: pd.DataFrame(json.loads(p.read_text())),
            "csv": pd.read_csv,
            "parquet": pd.read_parquet,
        }[name.split(".")[1]](path)
        assert len(table) == 10 * 128 and {"model", "revision", "head_id", "sel_induction"} <= set(table.columns)
    line = one_line_error(headtrace("results", imported, "--save", tmp_path / "t.txt"))
    assert "cannot tell the format of" in line and ".parquet, .csv, .json" in line
    assert not (tmp_path / "t.txt").exists()


# Defect 5 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["screen", "--seq-len", "1024"], "probe length 1024 exceeds the model's context of 512 tokens"),
        (["screen", "--id-high", "20000"], "the model's vocabulary has 10240 entries; pass --id-high 10240"),
        (["ablate", "--circuit", "L7H0"], "head L7H0 does not exist"),
    ],
)
def test_probe_and_heads_are_checked_from_the_config_before_the_weights_load(broken, args, message):
    """The weights file is truncated: had the model been loaded first, that would be the error."""
    command, *options = args
    assert message in one_line_error(headtrace(command, broken, "-n", "4", *options))


def test_an_unwritable_out_fails_before_the_screen_with_the_right_advice(series, tmp_path):
    """A real read-only filesystem (a tmpfs mounted read-only in a private mount namespace)."""
    readonly = tmp_path / "ro"
    readonly.mkdir()
    cli = f"{sys.executable} -m headtrace screen {series / 'step1'} {' '.join(SMALL)} -o {readonly}/results"
    script = f"mount -t tmpfs -o ro,size=1m tmpfs {readonly} && {cli}"
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount"]
    proc = subprocess.run(
        [*unshare, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    line = one_line_error(proc)
    assert "Read-only file system" in line and "pick another --out" in line and "free space" not in line
    assert "load step1" not in proc.stderr  # refused before the model loaded


def test_demo_checks_its_screen_settings_before_training(tmp_path):
    start = time.perf_counter()
    assert "n-examples must be >= 1" in one_line_error(
        headtrace("demo", "-n", "0", "--out", tmp_path / "d", timeout=120)
    )
    assert not (tmp_path / "d").exists() and time.perf_counter() - start < 60


# Defect 6 -------------------------------------------------------------------------------------


def test_exit_codes_tell_usage_errors_from_failed_work(series, tmp_path):
    assert headtrace("screen", series, "--no-such-option").returncode == EXIT_USAGE
    panel = local_panel(tmp_path, series, REVISIONS[:1], extra='[ablation]\ncircuit = "L7H0"\nseeds = 2\n')
    line = one_line_error(headtrace("run", panel, "--out", tmp_path / "out"), EXIT_FAILED)
    assert "ablation did not run for tiny/neox@step1" in line
    assert (tmp_path / "out" / "runs" / "tiny--neox@step1.parquet").is_file()  # the screen itself is kept


def test_ctrl_c_keeps_finished_revisions_and_prints_the_command_that_resumes(series, tmp_path):
    panel = local_panel(tmp_path, series, REVISIONS)
    panel.write_text(panel.read_text().replace("n_examples = 16", "n_examples = 3000"))
    out = tmp_path / "out"
    # A shell that runs the suite in the background starts it with SIGINT ignored, and children
    # inherit that: give the run the default disposition a terminal's Ctrl-C meets.
    process = subprocess.Popen(
        [sys.executable, "-m", "headtrace", "run", str(panel), "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 240
    while not list((out / "runs").glob("*.parquet")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last == (
        f"interrupted: finished revisions in {out}/ are kept and a re-run skips them; resume with: "
        f"headtrace run {panel} --out {out}"
    )
    assert 1 <= len(list((out / "runs").glob("*.parquet"))) < 3
    assert not [p for p in out.rglob("*.tmp")]


# Defect 7 -------------------------------------------------------------------------------------


def test_bracketed_text_in_messages_is_printed(tmp_path):
    panel = tmp_path / "p.toml"
    panel.write_text('[[models]]\nid = "a/b"\nrevison = ["step1"]\n')
    line = one_line_error(headtrace("run", panel))
    assert line == f"error: {panel}:3: unknown key 'revison' in [models]; did you mean 'revisions'?"


# Defect 8 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_results_files_follow_the_umask(tmp_path, umask):
    heads = pd.DataFrame({"model": ["m"], "revision": ["r"], "x": [1.0]})
    previous = os.umask(umask)
    try:
        path = ResultsDir(tmp_path).write_shard(heads, heads)
    finally:
        os.umask(previous)
    for file in (path, tmp_path / "heads" / path.name):
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask


# Item 12 --------------------------------------------------------------------------------------

WRAPPER = """
import sys
from headtrace.cli import main
try:
    main()
finally:
    print("heavy modules:", sorted(m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr)
"""


def test_analysis_commands_and_usage_errors_import_neither_torch_nor_transformers(imported, tmp_path):
    commands = [
        ["results", imported],
        ["findings", imported],
        ["report", imported, "--out", tmp_path / "report"],
        ["show", imported, "L4H4"],
        ["import-reference", REFERENCE / "screen_step1.json", "--out", tmp_path / "imported"],
        ["screen", "--no-such-option"],
        ["--version"],
        ["results", tmp_path / "nothing-here"],
    ]
    for args in commands:
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert proc.returncode in (0, EXIT_USAGE), proc.stderr
        assert "heavy modules: []" in proc.stderr, (args, proc.stderr)


# Items 10 and 11: output that fits a terminal, the conventions users expect ---------------------


def test_the_screen_summary_lists_the_strongest_heads_and_all_prints_every_one():
    from transformers import LlamaConfig, LlamaForCausalLM

    from headtrace.cli import STRONGEST, out_console, print_screen_summary
    from headtrace.models import ModelAdapter
    from headtrace.probes import ProbeSpec, synthetic_induction
    from headtrace.screen import screen

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=10240,
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            max_position_embeddings=128,
        )
    )
    config = ScreenConfig.of(n_examples=8, seq_len=64, label_threshold=0.0)  # every head gets a label
    result = screen(
        ModelAdapter(model.eval()),
        synthetic_induction(ProbeSpec(n_examples=8, seq_len=64)),
        config,
        model_name="m",
        revision="r",
    )
    result.run["ceiling_induction"] = 1234.0
    for all_heads, rows in ((False, STRONGEST), (True, 16)):
        with out_console.capture() as captured:
            print_screen_summary(result, all_heads)
        text = captured.get()
        assert sum(line.lstrip("│ ").startswith("L") and "H" in line[:8] for line in text.splitlines()) == rows
    assert "(--all: every one)" not in text and "all 16 labelled heads" in text
    for said in (
        "induction circuit (>= 50x)",
        "sink heads (first-token >= 30x)",
        "top-1 at the query",
        "selectivity ceilings of this probe (reference baseline): induction 1234.0x",
        "duplicate ",
    ):
        assert said in text


def test_conventions_version_help_dtype_and_device_aliases_and_a_short_default_name(series, tmp_path):
    assert headtrace("--version").stdout.strip().startswith("headtrace ")
    assert "--trust-remote-code" in headtrace("screen", "-h").stdout
    line = one_line_error(headtrace("screen", series / "step1", "--dtype", "fp64"))
    assert "unknown dtype 'fp64'; use auto, float32, bfloat16, float16 (or fp32, bf16, fp16)" in line
    proc = headtrace("screen", series / "step1", *SMALL, "--dtype", "auto", "--device", "auto", "-o", tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    proc = headtrace("screen", series / "step1", *SMALL, "--dtype", "fp32", "--name", "mine", "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    assert "screen mine " in proc.stderr and str(series) not in proc.stderr  # a short label leaves room for the bar
    first, named = (pd.read_parquet(tmp_path / folder / "runs").iloc[0] for folder in ("a", "b"))
    assert (first["model"], first["device"], first["dtype"]) == (
        "step1",
        "cpu",
        "float32",
    )  # the folder's name, not its path
    assert named.model == "mine" and json.loads(named.config_json)["dtype"] == "float32"


def test_the_findings_table_wraps_its_statements_at_80_columns(imported):
    proc = subprocess.run(
        [sys.executable, "-m", "headtrace", "findings", str(imported)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    table = pd.read_parquet(imported / "findings.parquet")
    cells = [line.split("│")[-2] for line in proc.stdout.splitlines() if line.startswith("│")]  # the last column
    shown = " ".join(" ".join(cells).split())  # the statement column, its wrapped lines joined
    for statement in table.statement:
        assert " ".join(statement.split()) in shown


def test_download_bars_stay_on_while_transformers_own_bars_are_off():
    import huggingface_hub
    import transformers
    from transformers import modeling_gguf_pytorch_utils

    from headtrace.cli import _quiet_transformers

    _quiet_transformers()
    assert not huggingface_hub.utils.are_progress_bars_disabled()
    assert not transformers.utils.logging.is_progress_bar_enabled()
    assert modeling_gguf_pytorch_utils.tqdm is transformers.utils.logging.tqdm  # the GGUF reader's bar obeys it
