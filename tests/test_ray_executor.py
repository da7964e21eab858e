"""The Ray executor on a real local Ray cluster gives the same tables as the local executor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headtrace.executors import RayOptions
from headtrace.panel import load_panel, run_panel
from headtrace.store import read_results, ResultsDir
from panel_helpers import PYTHIA, assert_same_tables, fake_hub, panel_file, point_hub_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local cluster for the module (start-up is slow on 2 cores); workers inherit this environment."""
    import ray

    hub = fake_hub().start()
    home = tmp_path_factory.mktemp("hf")
    patch = pytest.MonkeyPatch()
    point_hub_env(patch, hub.url, home)
    patch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield hub
    ray.shutdown()
    patch.undo()
    hub.stop()


def test_ray_executor_writes_the_same_tables_as_the_local_executor(ray_cluster, tmp_path):
    panel = load_panel(panel_file(tmp_path, {PYTHIA: ["step4", "step8"]}))
    on_ray = run_panel(panel, tmp_path / "ray", executor="ray", ray=RayOptions(cpus_per_task=1, max_retries=1))
    assert not on_ray.failed and len(on_ray.computed) == 2
    run_panel(panel, tmp_path / "local", executor="local")
    assert_same_tables(read_results(tmp_path / "ray"), read_results(tmp_path / "local"))
    # The shared directory resumes like any other: nothing left to do.
    assert len(run_panel(panel, tmp_path / "ray", executor="ray").skipped) == 2


def test_ray_executor_ablates_like_the_local_executor(ray_cluster, tmp_path):
    from panel_helpers import SCREEN

    screen = SCREEN + '[ablation]\ncircuit = "L1H1,L1H3"\nseeds = 2\nrevisions = "all"\n'
    panel = load_panel(panel_file(tmp_path, {PYTHIA: ["step4", "step8"]}, screen=screen))
    on_ray = run_panel(panel, tmp_path / "ray", executor="ray", ray=RayOptions(cpus_per_task=1, max_retries=1))
    assert not on_ray.failed and len(on_ray.stages["ablation"].done) == 2 and not on_ray.stages["ablation"].failed
    run_panel(panel, tmp_path / "local", executor="local")
    import pandas as pd

    pd.testing.assert_frame_equal(
        ResultsDir(tmp_path / "ray").read_ablations(), ResultsDir(tmp_path / "local").read_ablations(), check_exact=True
    )


def test_a_seed_family_runs_on_ray_one_task_per_member_and_revision(ray_cluster, tmp_path):
    from hub_server import fake_repo
    from panel_helpers import SCREEN

    for seed in (1, 2):
        ray_cluster.add(fake_repo(f"{PYTHIA}-seed{seed}", "gpt_neox", ["main", "step4", "step8"]))
    path = tmp_path / "family.toml"
    path.write_text(
        f'name = "family"\n{SCREEN}[[models]]\nid = "{PYTHIA}-seed{{seed}}"\nseeds = [1, 2]\n'
        f'seed0 = "{PYTHIA}"\nrevisions = ["step4", "step8"]\n'
    )
    panel = load_panel(path)
    on_ray = run_panel(panel, tmp_path / "ray", executor="ray", ray=RayOptions(cpus_per_task=1, max_retries=1))
    assert not on_ray.failed and len(on_ray.planned) == len(on_ray.computed) == 3 * 2
    run_panel(panel, tmp_path / "local", executor="local")
    assert_same_tables(read_results(tmp_path / "ray"), read_results(tmp_path / "local"))
    _, runs = read_results(tmp_path / "ray")
    assert set(zip(runs.model, runs.family, runs.seed)) == {
        (PYTHIA, PYTHIA, 0),
        (f"{PYTHIA}-seed1", PYTHIA, 1),
        (f"{PYTHIA}-seed2", PYTHIA, 2),
    }
