"""headtrace: when did each attention circuit form?

Screens every attention head of a checkpoint on a probe batch (six-class selectivity, sink score,
participation ratio, induction capability), across the revisions of a training run, or inside the
training loop itself (`Watcher`, `HeadtraceCallback`: headtrace.watch).
"""

import importlib

__version__ = "0.1.0"

# Loaded on first use, so that `import headtrace` loads neither torch nor transformers.
_LAZY = {
    "Watcher": "headtrace.watch",
    "HeadtraceCallback": "headtrace.watch",
    "ScreenConfig": "headtrace.schema",
    "open": "headtrace.headview",  # headtrace.open(DIR): a results folder for a notebook
}
_NAMES = {"open": "open_results"}
__all__ = ["HeadtraceCallback", "ScreenConfig", "Watcher", "__version__", "open"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), _NAMES.get(name, name))
    raise AttributeError(f"module 'headtrace' has no attribute {name!r}")
