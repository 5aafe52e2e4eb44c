"""PNG plots for run directories (matplotlib, no display needed)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_curves(path: str | Path, curves: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str):
    """One line per named (x, y) curve, saved as a PNG at `path`."""
    figure, axes = plt.subplots(figsize=(6, 4))
    for name, (x, y) in curves.items():
        axes.plot(x, y, label=name, marker="." if len(x) < 60 else None)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if len(curves) > 1:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
