"""headtrace: when did each attention circuit form?

Screens every attention head of a checkpoint on a probe batch (six-class selectivity, sink score,
participation ratio, induction capability), across the revisions of a training run.
"""

__version__ = "0.1.0"
