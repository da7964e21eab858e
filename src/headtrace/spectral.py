"""Per-head spectral signal: participation ratio of the head's output at the query.

Streaming: a head's outputs X [n, head_dim] are never held; the screen accumulates the Gram matrix
X^T X and the column sums, whose eigenvalues give both participation ratios exactly (the squared
singular values of X are the eigenvalues of X^T X).
"""

from __future__ import annotations

import numpy as np
import torch


class GramAccumulator:
    """Running X^T X and sum(X) per head, for X = one layer's per-head outputs [b, heads, dim]."""

    def __init__(self, n_heads: int, head_dim: int, device: torch.device, dtype: torch.dtype = torch.float64):
        self.gram = torch.zeros(n_heads, head_dim, head_dim, device=device, dtype=dtype)
        self.total = torch.zeros(n_heads, head_dim, device=device, dtype=dtype)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.to(self.gram.dtype)
        self.gram += torch.einsum("bhd,bhe->hde", x, x)
        self.total += x.sum(dim=0)
        self.count += x.shape[0]

    def participation_ratios(self) -> tuple[np.ndarray, np.ndarray]:
        """(entropy PR, covariance PR) per head; see `entropy_pr` and `covariance_pr`."""
        gram = self.gram.double().cpu().numpy()
        mean = self.total.double().cpu().numpy() / max(self.count, 1)
        entropy = np.array([entropy_pr(np.linalg.eigvalsh(g)) for g in gram])
        cov = (gram - self.count * mean[:, :, None] * mean[:, None, :]) / max(self.count - 1, 1)
        covariance = np.array([covariance_pr(np.linalg.eigvalsh(c)) for c in cov])
        return entropy, covariance


def entropy_pr(eigenvalues: np.ndarray) -> float:
    """exp(entropy) of p = s^2 / sum(s^2), from eigenvalues s^2 of the (uncentered) Gram matrix.

    The reference definition: 1 for a rank-one output, head_dim for an isotropic one."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    total = lam.sum()
    if not np.isfinite(total) or total <= 0:
        return float("nan")
    p = lam[lam > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def covariance_pr(eigenvalues: np.ndarray) -> float:
    """The classic participation ratio (sum lambda)^2 / sum lambda^2 of the covariance (centered)."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    denom = (lam**2).sum()
    if not np.isfinite(denom) or denom <= 0:
        return float("nan")
    return float(lam.sum() ** 2 / denom)


def time_integrated_pr(tokens: np.ndarray, pr: np.ndarray) -> float:
    """Trapezoid of max(PR - 1, 0) over log(tokens): a trajectory's accumulated excess dimension."""
    tokens = np.asarray(tokens, dtype=np.float64)
    excess = np.clip(np.asarray(pr, dtype=np.float64) - 1.0, 0.0, None)
    keep = np.isfinite(excess) & (tokens > 0)
    if keep.sum() < 2:
        return float("nan")
    return float(np.trapezoid(excess[keep], np.log(tokens[keep])))
