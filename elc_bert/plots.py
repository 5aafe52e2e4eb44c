"""PNG plots of the package's results. One owner for each figure that several parts draw: training curves
(`plot_curves`), ELC-BERT's layer weights alpha (`plot_layer_weights`) and DWAtt's depth profile
(`plot_depth_profile`), means with their intervals against a count (`plot_means_against_counts`); `new_figure` and
`save` for the figures that one module alone draws.

Figures are `matplotlib.figure.Figure` objects written with their own `savefig`: matplotlib is imported only when a
plot is drawn, pyplot keeps no state of ours (no figure to close) and the backend of the program that imports the
package is never switched. Imports only `extras` (which names the missing extra) from the rest of the package, so
that every layer may draw.
"""

from pathlib import Path

from .extras import needs

DPI = 120
MAX_ANNOTATED_LAYERS = 12  # above this, alpha's cells are too small to hold their values


def new_figure(width: float, height: float):
    """A matplotlib Figure of `width` x `height` inches, not registered with pyplot."""
    with needs("plots", "drawing a figure"):
        from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def save(figure, path: str | Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)


def _label_and_save(figure, axes, path, xlabel: str, ylabel: str, title: str, legend: bool) -> None:
    """The axis labels, title, grid and (for several series) legend of a line plot, then the PNG at `path`."""
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    if legend:
        axes.legend()
    save(figure, path)


def plot_curves(path: str | Path, curves: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str) -> None:
    """One line per named (x, y) curve, saved as a PNG at `path`."""
    figure = new_figure(6, 4)
    axes = figure.subplots()
    for name, (x, y) in curves.items():
        axes.plot(x, y, label=name, marker="." if len(x) < 60 else None)
    _label_and_save(figure, axes, path, xlabel, ylabel, title, legend=len(curves) > 1)


def plot_means_against_counts(
    path: str | Path,
    series: dict[str, tuple[list[int], list[float], list[float | None]]],
    xlabel: str,
    ylabel: str,
    title: str,
    ylim: tuple[float, float] | None = None,
) -> None:
    """One line per named series of (counts, means, half-widths) at `path`, each half-width an error bar of the mean
    (None: no interval, e.g. one trial, and no bar); `ylim` fixes the y range (e.g. 0 to 100 for a %). The x axis is
    logarithmic with a tick at each count, labelled with it as an integer, so that counts spread over decades (N = 8,
    32, 128) are evenly spaced and a single count is one point with its bar and its label."""
    figure = new_figure(6, 4)
    axes = figure.subplots()
    axes.set_xscale("log")
    counts = sorted({count for xs, _, _ in series.values() for count in xs})
    for name, (xs, means, half_widths) in series.items():
        (line,) = axes.plot(xs, means, marker="o", label=name)
        bars = [(x, mean, half) for x, mean, half in zip(xs, means, half_widths) if half is not None]
        if bars:
            x, mean, half = zip(*bars)
            axes.errorbar(x, mean, yerr=half, fmt="none", ecolor=line.get_color(), capsize=4)
    axes.minorticks_off()
    axes.set_xticks(counts, [str(count) for count in counts])
    if counts:  # a margin of a third of a decade past each end: a single count would otherwise have no width
        axes.set_xlim(min(counts) / 10 ** (1 / 3), max(counts) * 10 ** (1 / 3))
    if ylim is not None:
        axes.set_ylim(*ylim)
    _label_and_save(figure, axes, path, xlabel, ylabel, title, legend=len(series) > 1)


def draw_layer_weights(axes, alpha, title: str = "ELC layer weights alpha"):
    """ELC-BERT's layer weights as a heatmap on `axes`: `alpha` is L x (L+1) (`ElcBertModel.layer_weights()`), row n
    = softmax(theta^(n)), how much block n reads of each earlier state (column 0: the embeddings y_0). Returns the
    image, for a colorbar."""
    import numpy as np

    alpha = np.asarray(alpha, dtype=float)
    layers = alpha.shape[0]
    image = axes.imshow(alpha, cmap="viridis", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(layers + 1), ["emb"] + [str(i) for i in range(1, layers + 1)])
    axes.set_yticks(range(layers), [str(i) for i in range(1, layers + 1)])
    axes.set(xlabel="source state (emb = y_0)", ylabel="block n", title=title)
    if layers <= MAX_ANNOTATED_LAYERS:
        for row in range(layers):
            for column in range(row + 1):
                color = "black" if alpha[row, column] > 0.6 else "white"  # readable on viridis' light end
                axes.text(column, row, f"{alpha[row, column]:.2f}", ha="center", va="center", fontsize=7, color=color)
    return image


def plot_layer_weights(path: str | Path, panels: dict[str, object]) -> None:
    """One `draw_layer_weights` heatmap per named alpha matrix (the name is the panel's title), side by side."""
    layers = max(len(alpha) for alpha in panels.values())
    width, height = max(4.5, 1.5 + 0.45 * (layers + 1)), max(3.0, 1.2 + 0.4 * layers)
    figure = new_figure(width * len(panels), height)
    for axes, (title, alpha) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.items()):
        figure.colorbar(draw_layer_weights(axes, alpha, title), ax=axes)
    save(figure, path)


def draw_depth_profile(
    axes, profiles: dict[str, list[float]], title: str = "DWAtt depth profile", first_state: int = 0
) -> None:
    """DWAtt's mean weight of each fused state on `axes`, one line per named profile. The fused states are z_n for
    n = `first_state`, `first_state` + 1, ...: 0 (the embeddings, then each layer's output) when the model fuses the
    embeddings (`fuse_embeddings`), else 1 (layer 1 first)."""
    for label, weights in profiles.items():
        axes.plot(range(len(weights)), weights, marker="o", label=label)
    states = max(len(weights) for weights in profiles.values())
    axes.set_xticks(range(states), [str(n) if n else "emb" for n in range(first_state, first_state + states)])
    xlabel = "fused state (emb = the embeddings)" if first_state == 0 else "fused state (layer)"
    axes.set(xlabel=xlabel, ylabel="mean DWAtt weight", title=title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)


def plot_depth_profile(
    path: str | Path, profiles: dict[str, list[float]], title: str = "DWAtt depth profile", first_state: int = 0
) -> None:
    """`draw_depth_profile` as a PNG at `path`."""
    figure = new_figure(6, 4)
    draw_depth_profile(figure.subplots(), profiles, title, first_state)
    save(figure, path)
