"""`elc-bert analyze`: every measurement of `metrics.py` and `manipulations.py` (and, when asked, `recovery.py`) on one
model and a text sample, as report.md, report.json and PNG plots."""

import json
from pathlib import Path

from .. import plots
from ..data.text import read_lines
from ..models.errors import InputError, InputNotFoundError
from .interventions import STRATEGIES
from .manipulations import manipulation_sweep, weight_predictability
from .metrics import (
    PseudoPerplexity,
    TaskMetric,
    depth_profiles,
    leave_one_out,
    painters_sweep,
    representation_metrics,
    text_batches,
    weight_statistics,
)
from .recovery import RECOVERY_PNG, check_recovery, recovery_speed

REPORT_JSON = "report.json"  # what `analyze` measured, every number
REPORT_MD = "report.md"  # the same as Markdown tables
PREDICTABILITY_PNG = "weight_predictability.png"
MANIPULATIONS_PNG = "weight_manipulations.png"


def load_sentences(data: str | Path, max_sentences: int = 256, min_words: int = 5) -> list[str]:
    """Up to `max_sentences` lines of at least `min_words` words from a text file (gzip when it ends in .gz) or a
    folder (its files whose name holds "test", else all, sorted; e.g. WikiText-2's test split). WikiText headings
    (`= Title =`) are left out. A file that is not UTF-8 text is an InputError naming it and the line."""
    data = Path(data)
    if data.is_dir():
        files = sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith("."))
        files = [p for p in files if "test" in p.name] or files
    elif data.is_file():
        files = [data]
    else:
        raise InputNotFoundError(f"--data {data}: no such file or folder")
    sentences = []
    for path in files:
        for line in read_lines(path):  # a file that is not UTF-8 text is named with its line
            line = line.strip()
            if len(line.split()) >= min_words and not (line.startswith("=") and line.endswith("=")):
                sentences.append(line)
            if len(sentences) >= max_sentences:
                return sentences
    if not sentences:
        raise InputError(f"--data {data}: no line of at least {min_words} words in {[str(f) for f in files]}")
    return sentences


def analyze(
    model,
    tokenizer,
    sentences: list[str],
    out_dir: str | Path,
    strategies=STRATEGIES,
    batch_size: int = 16,
    max_length: int = 128,
    seed: int = 0,
    metric: str = "auto",
    pppl_sentences: int = 16,
    manipulations: bool = True,
    recovery: dict | None = None,
) -> dict:
    """Runs every measurement and writes `out_dir`/report.json, report.md and the PNGs; returns the report.
    `metric`: "auto" (TaskMetric: masked-token loss with fixed masks, next-token loss, or representation drift for
    an encoder without LM head) or "pppl" (masked-LM pseudo-perplexity on the first `pppl_sentences` sentences:
    exact, one forward per token). `manipulations`: the weight-manipulation sweep (`manipulation_sweep`).
    `recovery`: the keyword arguments of `recovery_speed` (steps, lr, ...: resumable in `out_dir`), trained
    against the TaskMetric (also under "pppl"), correlated with the leave-one-out ablation; None: not measured."""
    if metric not in ("auto", "pppl"):
        raise InputError(f"metric must be 'auto' or 'pppl', got {metric!r}")
    if recovery is not None:
        check_recovery(model, **recovery)  # bad settings refused before the first measurement
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    batches = text_batches(tokenizer, sentences, batch_size, max_length)
    task_metric = TaskMetric(model, tokenizer, batches, seed=seed)
    if metric == "pppl":
        metric = PseudoPerplexity(model, tokenizer, text_batches(tokenizer, sentences[:pppl_sentences], 16, max_length))
    else:
        metric = task_metric
    report = {
        "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
        "sentences": len(sentences),
        "representation": representation_metrics(model, batches),
        "weights": weight_statistics(model, seed=seed),
        "weight_predictability": weight_predictability(model),
        "leave_one_out": leave_one_out(model, metric),
        "painters": painters_sweep(model, metric, strategies=strategies) if strategies else None,
        "manipulations": manipulation_sweep(model, metric, seed=seed) if manipulations else None,
        "depth_profiles": depth_profiles(model, batches),
        "first_fused_state": 0 if getattr(model.config, "fuse_embeddings", True) else 1,  # DWAtt's z_0 or z_1 first
        "recovery": None,
    }
    if recovery is not None:
        importance = report["leave_one_out"] if metric is task_metric else leave_one_out(model, task_metric)
        report["recovery"] = recovery_speed(model, task_metric, out_dir, importance=importance, **recovery)
    (out_dir / REPORT_JSON).write_text(json.dumps(report, indent=2))
    (out_dir / REPORT_MD).write_text(markdown(report))
    write_plots(report, out_dir)
    return report


def markdown(report: dict) -> str:
    representation, weights, loo = report["representation"], report["weights"], report["leave_one_out"]
    lines = [
        f"# Layer analysis: {report['model']}",
        "",
        f"{report['sentences']} sentences, {representation['tokens']} real tokens. Metric: {loo['metric']} "
        f"(lower is better); unmodified model: {loo['baseline']:.4f}.",
        "",
        "## Leave-one-out ablation",
        "",
        "| layer skipped | metric | change | removal helps |",
        "|---|---|---|---|",
    ]
    for row in loo["layers"]:
        change = "n/a" if row["change_percent"] is None else f"{row['change_percent']:+.1f}%"
        lines.append(f"| {row['layer']} | {row['metric']:.4f} | {change} | {'yes' if row['removal_helps'] else ''} |")
    lines += [
        "",
        "## Layer stream (layer l maps h_l to h_l+1)",
        "",
        "| layer | block influence (1 - cos) | angular distance | relative magnitude | weight norm |",
        "|---|---|---|---|---|",
    ]
    for layer, (bi, angle, magnitude) in enumerate(
        zip(representation["block_influence"], representation["angular_distance"], representation["relative_magnitude"])
    ):
        lines.append(f"| {layer} | {bi:.4f} | {angle:.4f} | {magnitude:.4f} | {weights['layers'][layer]['norm']:.2f} |")
    lines += [
        "",
        f"Consecutive weight-delta correlation: {weights['delta_correlation']:.3f}; with the layers shuffled "
        f"(null): {weights['delta_correlation_shuffled_mean']:.3f} +- {weights['delta_correlation_shuffled_std']:.3f} "
        "(independent layers give -0.5 by construction).",
    ]
    lines += _predictability_markdown(report)
    if report["manipulations"]:
        lines += _manipulations_markdown(report["manipulations"])
    if report["recovery"]:
        lines += _recovery_markdown(report["recovery"])
    if report["painters"]:
        painters = report["painters"]
        strategies = list(painters["curves"])
        counts = [point["middle_layers"] for point in painters["curves"][strategies[0]]]
        lines += ["", "## Painters sweep", "", f"{painters['metric']} by middle layers changed (M).", ""]
        lines += ["| strategy | " + " | ".join(f"M = {m}" for m in counts) + " |", "|---" * (len(counts) + 1) + "|"]
        for strategy in strategies:
            cells = [f"{point['metric']:.4f}" for point in painters["curves"][strategy]]
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    optional = {
        PREDICTABILITY_PNG: report["weight_predictability"]["layers"],
        MANIPULATIONS_PNG: report["manipulations"],
        RECOVERY_PNG: report["recovery"],
        "painters_sweep.png": report["painters"],
        "depth_profiles.png": report["depth_profiles"],
    }
    plotted = ["similarity_cosine.png", "similarity_cka.png", "layer_metrics.png", "leave_one_out.png"]
    lines += ["", "Plots: " + ", ".join(plotted + [name for name, drawn in optional.items() if drawn])]
    return "\n".join(lines) + "\n"


def _cell(value, form: str = ".3f") -> str:
    return "n/a" if value is None else format(value, form)


def _predictability_markdown(report: dict) -> list[str]:
    predictability = report["weight_predictability"]
    if not predictability["layers"]:
        return []
    substituted = {}
    if report["manipulations"] and "predicted" in report["manipulations"]["manipulations"]:
        substituted = {row["layer"]: row["metric"]["predicted"] for row in report["manipulations"]["layers"]}
    lines = [
        "",
        "## Weight predictability",
        "",
        "Each layer's weights predicted from its neighbours, per tensor type: (W_l-1 + W_l+1) / 2, the one neighbour "
        "at the ends; R^2 = 1 - ||W_l - prediction||^2 / ||W_l - mean(W_l)||^2, pooled over the tensor types "
        "(per type: report.json). Metric: with the prediction substituted for the layer's weights.",
        "",
        "| layer | R^2 | metric with the prediction |",
        "|---|---|---|",
    ]
    for row in predictability["layers"]:
        lines.append(f"| {row['layer']} | {_cell(row['r2'])} | {_cell(substituted.get(row['layer']), '.4f')} |")
    return lines


def _manipulations_markdown(sweep: dict) -> list[str]:
    names = sweep["manipulations"]
    lines = [
        "",
        "## Weight manipulations",
        "",
        f"{sweep['metric']} with one layer's weights changed (unmodified: {sweep['baseline']:.4f}): scaled, plus "
        "noise (std a fraction of each tensor's RMS), magnitude-pruned or rank-truncated matrices (a share of entries "
        "zeroed, of singular values kept), or the neighbour prediction substituted.",
        "",
        "| layer | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for row in sweep["layers"]:
        lines.append(f"| {row['layer']} | " + " | ".join(f"{row['metric'][name]:.4f}" for name in names) + " |")
    return lines


def _recovery_markdown(recovery: dict) -> list[str]:
    settings = recovery["settings"]
    lines = [
        "",
        "## Recovery speed",
        "",
        f"Each layer {'re-initialised' if settings['reset'] == 'reinit' else 'zeroed'} on a copy of the model, then "
        f"{settings['steps']} steps of {settings['optimizer']} (lr {settings['lr']:g}) on the "
        f"{'layer alone' if settings['train'] == 'layer' else 'whole model'} against the {settings['metric']} on "
        "half of the sentences, measured on the other half (unmodified there: "
        f"{settings['baseline']:.4f}); recovered: at or under {recovery['threshold']:.4f} (tolerance "
        f"{settings['tolerance_percent']:g}%). Area: "
        "between the curve and the unmodified value, in metric x steps.",
        "",
        "| layer | steps to recover | area | metric after the reset | after the last step |",
        "|---|---|---|---|---|",
    ]
    for row in recovery["layers"]:
        steps = "not in budget" if row["steps_to_recover"] is None else str(row["steps_to_recover"])
        first, last = row["curve"][0], row["curve"][-1]
        lines.append(f"| {row['layer']} | {steps} | {row['area']:.3f} | {first:.4f} | {last:.4f} |")
    if recovery["spearman"]:
        cells = [
            f"{name.replace('_', ' ')} {_cell(value['rho'], '+.2f')} (p {_cell(value['p'], '.2g')})"
            for name, value in recovery["spearman"].items()
        ]
        lines += ["", "Spearman's rho of the leave-one-out loss against: " + "; ".join(cells) + "."]
    return lines


def write_plots(report: dict, out_dir: Path):
    representation = report["representation"]
    for key, title in (("cosine_map", "cosine"), ("cka_map", "linear CKA")):
        figure = plots.new_figure(5, 4.2)
        axis = figure.subplots()
        image = axis.imshow(representation[key], cmap="viridis", vmin=0, vmax=1)
        axis.set(title=f"Layer-stream similarity ({title})", xlabel="h_j", ylabel="h_i")
        figure.colorbar(image)
        plots.save(figure, out_dir / f"similarity_{'cosine' if key == 'cosine_map' else 'cka'}.png")

    figure = plots.new_figure(6, 3.6)
    axis = figure.subplots()
    for key in ("block_influence", "angular_distance", "relative_magnitude"):
        axis.plot(representation[key], marker="o", label=key.replace("_", " "))
    axis.set(xlabel="layer", title="Layer stream metrics")
    axis.legend()
    plots.save(figure, out_dir / "layer_metrics.png")

    loo = report["leave_one_out"]
    figure = plots.new_figure(6, 3.6)
    axis = figure.subplots()
    values = [row["metric"] for row in loo["layers"]]
    axis.bar(
        range(len(values)), values, color=["tab:green" if row["removal_helps"] else "tab:blue" for row in loo["layers"]]
    )
    axis.axhline(loo["baseline"], color="black", linestyle="--", label="no layer skipped")
    axis.set(xlabel="layer skipped", ylabel=loo["metric"], title="Leave-one-out (green: removal helps)")
    axis.legend()
    plots.save(figure, out_dir / "leave_one_out.png")

    if report["painters"]:
        painters = report["painters"]
        figure = plots.new_figure(6, 4)
        axis = figure.subplots()
        for strategy, points in painters["curves"].items():
            axis.plot([p["middle_layers"] for p in points], [p["metric"] for p in points], marker="o", label=strategy)
        axis.axhline(painters["baseline"], color="black", linestyle="--", label="unmodified")
        axis.set(xlabel="middle layers changed (M)", ylabel=painters["metric"], title="Painters sweep")
        axis.legend(fontsize=8)
        plots.save(figure, out_dir / "painters_sweep.png")

    predictability = report["weight_predictability"]
    if predictability["layers"]:
        types = predictability["tensor_types"]
        figure = plots.new_figure(max(5, 1 + 0.5 * len(predictability["layers"])), max(3.5, 1 + 0.3 * len(types)))
        axis = figure.subplots()
        grid = [[row["r2_by_type"][name] for row in predictability["layers"]] for name in types]
        grid = [[float("nan") if value is None else value for value in values] for values in grid]
        image = axis.imshow(grid, cmap="viridis", aspect="auto", vmax=1)
        axis.set_yticks(range(len(types)), types, fontsize=6)
        axis.set(xlabel="layer", title="R^2 of the weights predicted from the neighbours")
        figure.colorbar(image)
        plots.save(figure, out_dir / PREDICTABILITY_PNG)

    if report["manipulations"]:
        sweep = report["manipulations"]
        figure = plots.new_figure(6, 4)
        axis = figure.subplots()
        layers = [row["layer"] for row in sweep["layers"]]
        for name in sweep["manipulations"]:
            axis.plot(layers, [row["metric"][name] for row in sweep["layers"]], marker="o", label=name)
        axis.axhline(sweep["baseline"], color="black", linestyle="--", label="unmodified")
        axis.set(xlabel="layer manipulated", ylabel=sweep["metric"], title="Weight manipulations")
        axis.legend(fontsize=7)
        plots.save(figure, out_dir / MANIPULATIONS_PNG)

    profiles = report["depth_profiles"]
    if profiles:  # ELC-BERT's alpha and/or DWAtt's depth weights over the text sample, one panel each
        figure = plots.new_figure(5 * len(profiles), 4)
        for axis, (key, values) in zip(figure.subplots(1, len(profiles), squeeze=False)[0], profiles.items()):
            if key == "alpha":
                figure.colorbar(plots.draw_layer_weights(axis, values), ax=axis)
            else:
                plots.draw_depth_profile(axis, {"text sample": values}, first_state=report["first_fused_state"])
        plots.save(figure, out_dir / "depth_profiles.png")
