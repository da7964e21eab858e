"""The findings and report figures of three results folders, captured once so that later changes can
be checked against them byte for byte (tests/test_findings_golden.py).

The folders: the study's Pythia-1B files imported (tests/data/reference/), the planted seed family
of tests/test_families.py (three seeds, a gap, one single model), and the demo's tables (one run of
`headtrace demo`, seed 0, its heads, runs and ablation in tests/data/demo/). What is kept of each
(tests/data/golden/NAME.json): every row of findings.parquet as text, findings.md, and the SHA-256
of each report figure's SVG and PNG.

    python tests/findings_golden.py      # writes tests/data/golden/*.json from the code as it is
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Callable

import pandas as pd

from headtrace.findings import write_findings
from headtrace.reference import import_reference
from headtrace.report import build_report
from headtrace.store import ResultsDir

TESTS = Path(__file__).resolve().parent
REFERENCE = TESTS / "data" / "reference" / "pythia-1b"
DEMO = TESTS / "data" / "demo"
GOLDEN = TESTS / "data" / "golden"


def reference_folder(out: Path) -> Path:
    import_reference(sorted(REFERENCE.glob("*.json")), out)
    return out


def family_folder(out: Path) -> Path:
    from test_families import planted_results

    return planted_results(out)


def demo_folder(out: Path) -> Path:
    """The demo's results folder rebuilt from its tables: one shard per revision, its ablation."""
    heads, runs = pd.read_parquet(DEMO / "heads.parquet"), pd.read_parquet(DEMO / "runs.parquet")
    results = ResultsDir(out)
    for revision in runs.revision:
        results.write_shard(
            heads.loc[heads.revision == revision].reset_index(drop=True),
            runs.loc[runs.revision == revision].reset_index(drop=True),
        )
    results.write_ablation(pd.read_parquet(DEMO / "ablations.parquet"))
    return out


FOLDERS: dict[str, Callable[[Path], Path]] = {
    "reference": reference_folder,
    "family": family_folder,
    "demo": demo_folder,
}


def rows(table: pd.DataFrame) -> list[dict]:
    """Each findings row as text (numbers stay the JSON string they are stored as)."""
    return [
        {column: (None if pd.isna(value) else str(value)) for column, value in row.items()}
        for row in table.astype(object).to_dict("records")
    ]


def figures(report: Path) -> dict[str, str]:
    """File name -> SHA-256 of every figure file of a report."""
    folder = report.parent / "figures"
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


def capture(folder: Path) -> dict:
    """Findings (rows and findings.md) and report figures of a results folder, computed now."""
    write_findings(folder)
    table = pd.read_parquet(ResultsDir(folder).findings)
    return {
        "rows": rows(table),
        "findings_md": ResultsDir(folder).findings_md.read_text(),
        "figures": figures(build_report(folder)),
    }


def main(out: Path = GOLDEN) -> None:
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in FOLDERS.items():
            captured = capture(make(Path(tmp) / name))
            (out / f"{name}.json").write_text(json.dumps(captured, indent=1, sort_keys=True) + "\n")
            print(f"{out / name}.json: {len(captured['rows'])} rows, {len(captured['figures'])} figure files")


if __name__ == "__main__":
    sys.path.insert(0, str(TESTS))
    main()
