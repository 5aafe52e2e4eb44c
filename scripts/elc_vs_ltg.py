"""ELC-BERT vs LTG-BERT at equal compute, at the strict-small and the small-cpu scale (docs/experiments.md).

    python scripts/elc_vs_ltg.py configs/experiments/elc_vs_ltg.yaml [--skip-blimp]
    python scripts/elc_vs_ltg.py configs/experiments/elc_vs_ltg_small_cpu.yaml --runs elc-bert-seed42   # one run only
    python scripts/elc_vs_ltg.py configs/experiments/elc_vs_ltg_small_cpu.yaml --no-train   # score checkpoints, report

With --skip-blimp no model is scored; scores already on disk (e.g. from `elc-bert eval-blimp RUN --out RESULTS_DIR/runs
--name blimp`) are still reported. With --runs only the named runs are pretrained (several processes can train runs
side by side, one thread each) and nothing is scored or reported; a named run whose summary exists but whose run
folder lacks the trained model (a fresh clone) is trained again: when its validation losses differ from the
summary's in any digit, the old summary (and the scores taken on the old model) moves to `<run>.before-retrain`.
With --no-train and --runs only the named runs are scored (processes side by side again), and the report covers
every run's scores on disk.

Trains one tokenizer on the training files, then pretrains every (model, seed) of the plan from the same base config
with that tokenizer (finished runs are skipped, interrupted ones resume from their last checkpoint), scores each on
BLiMP and the supplement (`elc-bert eval-blimp`'s scorer), and writes into `results_dir`: `results.md` /
`results.json` (final losses, BLiMP overall and per field, supplement), `loss_curves.png` (MLM loss of every run vs
tokens seen), `alpha.png` (the ELC-BERT runs' layer weights) and `blimp_fields.png` (BLiMP accuracy per field and
run). A plan with `checkpoint_blimp: {pairs_per_set: K}` also scores every saved checkpoint on the first K pairs of
each BLiMP set (the learning curve, `blimp_curve.png`), finished or not: a run still training contributes the
checkpoints it has; with `target: T` there, the report adds the tokens a least-squares line of accuracy against
log(tokens seen) through each run's checkpoints asks for an accuracy of T (an extrapolation).
"""

import argparse
import dataclasses
import json
from pathlib import Path

import matplotlib
import numpy as np
import scipy.stats
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

import elc_bert  # noqa: E402,F401  (registers the Auto classes)
from elc_bert import plots  # noqa: E402
from elc_bert import runs as runs_layout  # noqa: E402
from elc_bert.data.text import corpus_files, read_documents  # noqa: E402
from elc_bert.data.tokenizer import save_tokenizer, train_tokenizer  # noqa: E402
from elc_bert.job_configs import load_config  # noqa: E402
from elc_bert.job_configs.training_metrics import TrainingMetrics  # noqa: E402
from elc_bert.training.pretrain import PretrainConfig, pretrain  # noqa: E402


def shared_tokenizer(base: PretrainConfig, directory: Path) -> Path:
    if not (directory / "tokenizer.json").exists():
        files = [f for name in base.train_files for f in corpus_files(Path(base.data_dir) / name, "train")]
        lines = (line for document in read_documents(files) for line in document)
        save_tokenizer(train_tokenizer(lines, base.vocab_size, base.min_frequency), directory)
    return directory


def run_dir(plan: dict, name: str, seed: int) -> Path:
    return Path(plan["runs_dir"]) / f"{name}-seed{seed}"


def trained(run: Path) -> bool:
    """Whether a run folder holds its trained model (its metrics are written last, when the model is saved)."""
    return TrainingMetrics.read(run) is not None


def validation_losses(metrics: TrainingMetrics) -> list[tuple[int, float]]:
    return [(entry["step"], entry["eval_loss"]) for entry in metrics.log_history if "eval_loss" in entry]


def pretrain_all(plan: dict, only: list[str] | None = None) -> dict[tuple[str, int], Path]:
    """Pretrains the runs that have no summary yet (of `only`, when given: names like `elc-bert-seed42`); returns each
    run's summary folder. The run folders (checkpoints, models) stay in `runs_dir`; each summary (metrics, alpha,
    BLiMP scores) is a small folder under `results_dir`/runs, meant to be committed, so that a later session on a
    fresh clone skips finished runs."""
    base = load_config(PretrainConfig, plan["base"], plan.get("base_overrides", []))
    tokenizer = shared_tokenizer(base, Path(plan["runs_dir"]) / runs_layout.TOKENIZER)
    runs = {}
    for seed in plan["seeds"]:
        for name, model_fields in plan["models"].items():
            output_dir = run_dir(plan, name, seed)
            summary_dir = Path(plan["results_dir"]) / "runs" / f"{name}-seed{seed}"
            runs[(name, seed)] = summary_dir
            if only is not None and output_dir.name not in only:
                continue
            # a finished run is skipped, unless it is named and its run folder lacks the trained model (a fresh clone
            # keeps only the summaries): then it is trained again from the same config, so that it can be scored
            lost = only is not None and not trained(output_dir)
            before = TrainingMetrics.read(summary_dir)
            if before is not None and not lost:
                continue
            aside = summary_dir.with_name(summary_dir.name + ".before-retrain")
            if before is not None and aside.exists():
                raise SystemExit(f"{aside} exists: a summary set aside by an earlier retraining; move it first")
            print(f"\n== pretraining {name}, seed {seed} ==")
            config = dataclasses.replace(
                base,
                output_dir=str(output_dir),
                tokenizer=str(tokenizer),
                seed=seed,
                model={**base.model, **model_fields},
                training={**base.training, "disable_tqdm": False},
            )
            pretrain(config)
            after = TrainingMetrics.read(output_dir)
            if before is not None and validation_losses(after) != validation_losses(before):
                # not the model the summary's scores were taken on: keep them apart from the new model's
                summary_dir.rename(aside)
                print(f"trained again, not identically (validation losses differ): the old summary is now {aside}")
            summary_dir.mkdir(parents=True, exist_ok=True)
            model = AutoModelForMaskedLM.from_pretrained(output_dir)
            if model.config.layer_combination == "elc":
                (summary_dir / "alpha.json").write_text(json.dumps(model.layer_weights().tolist()))
            after.write(summary_dir)
    return runs


def score_blimp(plan: dict, runs: dict, score_missing: bool = True) -> dict:
    """{(name, seed): {suite: summary}} of the finished runs; runs not yet scored are scored first, or left out
    without `score_missing`."""
    from elc_bert.evaluation.blimp import evaluate_blimp

    scores = {}
    for (name, seed), summary_dir in runs.items():
        scores[(name, seed)] = {}
        if TrainingMetrics.read(summary_dir) is None:
            continue
        for suite, data in plan["blimp"].items():
            path = summary_dir / f"{suite}.json"
            if not path.exists():
                if not score_missing:
                    continue
                run = run_dir(plan, name, seed)
                if not trained(run):
                    missing = f"no trained model in {run}; {suite} not scored (--runs {run.name} trains it)"
                    print(f"{name} seed {seed}: {missing}")
                    continue
                model = AutoModelForMaskedLM.from_pretrained(run)
                tokenizer = AutoTokenizer.from_pretrained(run)
                evaluate_blimp(model, tokenizer, data, summary_dir, name=suite)
            scores[(name, seed)][suite] = json.loads(path.read_text())
    return scores


def score_checkpoints(plan: dict, runs: dict, score_missing: bool = True) -> dict:
    """{(name, seed): {step: BLiMP summary on the first `pairs_per_set` pairs of each set}} over the saved checkpoints
    of each run (those of `steps`, default all), kept as `summary_dir/checkpoints/blimp-step<N>.json` (overall and
    per field only)."""
    from elc_bert.evaluation.blimp import evaluate_blimp

    pairs = plan["checkpoint_blimp"]["pairs_per_set"]
    curves = {}
    for (name, seed), summary_dir in runs.items():
        curves[(name, seed)] = {}
        for checkpoint in runs_layout.checkpoints(run_dir(plan, name, seed)):
            step = int(checkpoint.name.split("-")[1])
            if step not in plan["checkpoint_blimp"].get("steps", [step]):
                continue
            path = summary_dir / "checkpoints" / f"blimp-step{step}.json"
            if not path.exists():
                if not score_missing or not (checkpoint / "model.safetensors").exists():
                    continue
                print(f"BLiMP ({pairs} pairs per set): {name} seed {seed}, step {step}")
                model = AutoModelForMaskedLM.from_pretrained(checkpoint)
                tokenizer = AutoTokenizer.from_pretrained(Path(plan["runs_dir"]) / runs_layout.TOKENIZER)
                result = evaluate_blimp(model, tokenizer, plan["blimp"]["blimp"], max_pairs_per_set=pairs)
                path.parent.mkdir(parents=True, exist_ok=True)
                kept = {key: result[key] for key in ("overall", "fields")}
                path.write_text(json.dumps({"step": step, "pairs_per_set": pairs, **kept}, indent=2))
        for path in sorted((summary_dir / "checkpoints").glob("blimp-step*.json")):
            entry = json.loads(path.read_text())
            curves[(name, seed)][entry["step"]] = entry
    return curves


def tokens_seen(base: PretrainConfig, step: int) -> int:
    """Sample positions in the batches of the first `step` optimizer steps (sequences x sample length: the padding of
    short samples included; the real tokens are fewer, see the pretraining guide)."""
    if base.long_seq_length is None:
        return step * base.batch_size * base.seq_length
    long_start = int(base.long_after * base.max_steps)
    short, long = min(step, long_start), max(0, step - long_start)
    return short * base.batch_size * base.seq_length + long * (base.batch_size // 4) * base.long_seq_length


def log_linear_trend(tokens: list[float], accuracies: list[float]) -> tuple[float, float] | None:
    """(slope, intercept) of the least-squares line of accuracy against log(tokens) through a learning curve's
    points, or None with fewer than 3 points."""
    if len(tokens) < 3:
        return None
    slope, intercept = np.polyfit(np.log(tokens), accuracies, 1)
    return float(slope), float(intercept)


def slope_interval(tokens: list[float], accuracies: list[float]) -> tuple[float, float]:
    """The 95% t-interval of a `log_linear_trend`'s slope, in accuracy points per doubling of the tokens."""
    fit = scipy.stats.linregress(np.log2(tokens), 100 * np.asarray(accuracies))
    half = scipy.stats.t.ppf(0.975, len(tokens) - 2) * fit.stderr
    return float(fit.slope - half), float(fit.slope + half)


def tokens_to_reach(trend: tuple[float, float], target: float) -> float | None:
    """Where a `log_linear_trend` reaches `target` (in the trend's token unit), or None when it does not rise. An
    extrapolation: a guide to the budget a trend asks for, not a prediction."""
    slope, intercept = trend
    return float(np.exp((target - intercept) / slope)) if slope > 0 else None


def run_metrics(plan: dict, runs: dict) -> dict:
    """{(name, seed): TrainingMetrics}: a finished run's metrics.json, or what a run still training logged up to its
    last checkpoint (no final metrics; left out when it has no checkpoint)."""
    metrics = {}
    for (name, seed), summary_dir in runs.items():
        metric = TrainingMetrics.read(summary_dir)
        if metric is None:
            states = [c / runs_layout.TRAINER_STATE for c in runs_layout.checkpoints(run_dir(plan, name, seed))]
            states = [state for state in states if state.exists()]
            if not states:
                continue
            metric = TrainingMetrics.of_checkpoint(states[-1].parent)
        metrics[(name, seed)] = metric
    return metrics


def write(plan: dict, plan_path: Path, runs: dict, scores: dict, curves: dict):
    results_dir = Path(plan["results_dir"])
    results_dir.mkdir(parents=True, exist_ok=True)
    base = load_config(PretrainConfig, plan["base"], plan.get("base_overrides", []))
    metrics = run_metrics(plan, runs)
    suites = [suite for suite in plan["blimp"] if any(suite in by_suite for by_suite in scores.values())]
    header = "| " + " | ".join(["model", "seed", "steps", "final train loss", "validation loss", *suites]) + " |"
    lines = [
        f"ELC-BERT vs LTG-BERT, `{plan['base']}` on the local stand-in corpus (BabyLM 2023 files present in "
        "../shared/data, 4 of 10 sources, + WikiText-2 train; not the BabyLM corpus). Accuracies in %. Command: "
        f"`python scripts/elc_vs_ltg.py {plan_path}`.",
        "",
        header,
        "|---" * (header.count("|") - 1) + "|",
    ]
    table = {}
    for (name, seed), metric in metrics.items():
        history = metric.log_history
        losses = [entry["loss"] for entry in history if "loss" in entry]
        evaluations = [loss for _, loss in validation_losses(metric)]
        row = {"step": metric.step, "finished": metric.final is not None, "final_train_loss": losses[-1]}
        row["eval_loss"] = (metric.final or {}).get("eval_loss", evaluations[-1] if evaluations else None)
        for suite, summary in scores.get((name, seed), {}).items():
            row[suite] = summary["overall"]
            row[f"{suite}_fields"] = summary["fields"]
        if curves.get((name, seed)):
            row["blimp_curve"] = {step: entry["overall"] for step, entry in sorted(curves[(name, seed)].items())}
        table[f"{name}/seed{seed}"] = row
        cells = [f"{100 * row[suite]:.1f}" if suite in row else "not scored" for suite in suites]
        evaluation = "n/a" if row["eval_loss"] is None else f"{row['eval_loss']:.3f}"
        steps = str(row["step"]) if row["finished"] else f"{row['step']} (training)"
        cells = [name, str(seed), steps, f"{row['final_train_loss']:.3f}", evaluation, *cells]
        lines.append("| " + " | ".join(cells) + " |")
    if "blimp" in suites:
        fields = sorted({field for row in table.values() for field in row.get("blimp_fields", {})})
        lines += ["", "BLiMP accuracy per field (%):", "", "| model/seed | " + " | ".join(fields) + " |"]
        lines.append("|---" * (len(fields) + 1) + "|")
        for key, row in table.items():
            if "blimp_fields" not in row:
                continue
            lines.append(f"| {key} | " + " | ".join(f"{100 * row['blimp_fields'][f]:.1f}" for f in fields) + " |")
    if any(curves.values()):
        pairs = plan["checkpoint_blimp"]["pairs_per_set"]
        steps = sorted({step for by_step in curves.values() for step in by_step})
        lines += ["", f"BLiMP at the checkpoints ({pairs} pairs per set, %), by step (M sample positions seen):", ""]
        lines.append("| model/seed | " + " | ".join(f"{s} ({tokens_seen(base, s) / 1e6:.1f} M)" for s in steps) + " |")
        lines.append("|---" * (len(steps) + 1) + "|")
        for (name, seed), by_step in curves.items():
            cells = [f"{100 * by_step[s]['overall']:.1f}" if s in by_step else "" for s in steps]
            lines.append(f"| {name}/seed{seed} | " + " | ".join(cells) + " |")
        target = plan["checkpoint_blimp"].get("target")
        if target is not None:
            heading = (
                f"Sample positions a line of BLiMP against log(positions seen) through the checkpoints asks for "
                f"{target:.0%}"
            )
            lines += ["", f"{heading} (an extrapolation; 3 checkpoints or more; the slope's 95% t-interval):", ""]
            estimates = []
            for (name, seed), by_step in curves.items():
                steps = sorted(by_step)
                tokens = [tokens_seen(base, step) for step in steps]
                trend = log_linear_trend(tokens, [by_step[step]["overall"] for step in steps])
                if trend is None:
                    continue
                needed = tokens_to_reach(trend, target)
                guess = f"{needed / 1e6:,.0f} M positions" if needed else "not reached (the line does not rise)"
                rise = 100 * trend[0] * np.log(2)  # accuracy is a fraction here
                low, high = slope_interval(tokens, [by_step[step]["overall"] for step in steps])
                flat = ": the line may be flat" if low <= 0 <= high else ""
                estimates.append(
                    f"- {name}/seed{seed}: {guess} ({len(steps)} checkpoints; {rise:+.2f} points per doubling, "
                    f"95% interval [{low:+.2f}, {high:+.2f}]{flat})"
                )
                table[f"{name}/seed{seed}"]["tokens_to_target"] = needed
                table[f"{name}/seed{seed}"]["points_per_doubling_ci95"] = [low, high]
            lines += estimates or ["(no run has 3 scored checkpoints yet)"]
    (results_dir / "results.md").write_text("\n".join(lines) + "\n")
    (results_dir / "results.json").write_text(json.dumps(table, indent=2))
    print("\n".join(lines))
    plot_losses(metrics, base, results_dir / "loss_curves.png")
    plot_blimp_fields(table, results_dir / "blimp_fields.png")
    plot_blimp_curves(curves, base, plan, results_dir / "blimp_curve.png")
    elc_runs = [
        (key, run)
        for key, run in runs.items()
        if plan["models"][key[0]].get("layer_combination") == "elc" and (run / "alpha.json").exists()
    ]
    if elc_runs:
        plot_alpha(elc_runs, results_dir / "alpha.png")


def plot_losses(metrics: dict, base: PretrainConfig, path: Path):
    figure, axis = plt.subplots(figsize=(6.5, 4))
    for (name, seed), metric in metrics.items():
        history = metric.log_history
        for key, style in (("loss", "-"), ("eval_loss", "--")):
            steps = [entry["step"] for entry in history if key in entry]
            tokens = [tokens_seen(base, step) / 1e6 for step in steps]
            axis.plot(tokens, [entry[key] for entry in history if key in entry], style, label=f"{name} s{seed} {key}")
    axis.set(xlabel="sample positions seen (M)", ylabel="MLM loss", title="Pretraining (train -, validation --)")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_blimp_fields(table: dict, path: Path):
    scored = {key: row["blimp_fields"] for key, row in table.items() if "blimp_fields" in row}
    if not scored:
        return
    fields = sorted({field for by_field in scored.values() for field in by_field})
    width = 0.8 / len(scored)
    figure, axis = plt.subplots(figsize=(1.2 * len(fields) + 2, 3.6))
    for i, (key, by_field) in enumerate(scored.items()):
        positions = [j + (i - (len(scored) - 1) / 2) * width for j in range(len(fields))]
        axis.bar(positions, [100 * by_field.get(field, np.nan) for field in fields], width, label=key)
    axis.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    axis.set_xticks(range(len(fields)), fields, rotation=20, ha="right")
    axis.set(ylabel="accuracy (%)", title="BLiMP per field (chance 50%)", ylim=(0, 100))
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_blimp_curves(curves: dict, base: PretrainConfig, plan: dict, path: Path):
    if not any(curves.values()):
        return
    figure, axis = plt.subplots(figsize=(6.5, 4))
    target = plan["checkpoint_blimp"].get("target")
    # trend lines stop at 10,000 times the last checkpoint's tokens, so that a nearly flat one keeps the data readable
    horizon = 1e4 * max(tokens_seen(base, step) / 1e6 for by_step in curves.values() for step in by_step)
    for (name, seed), by_step in curves.items():
        if not by_step:
            continue
        steps = sorted(by_step)
        tokens = [tokens_seen(base, step) / 1e6 for step in steps]
        accuracies = [100 * by_step[step]["overall"] for step in steps]
        line = axis.plot(tokens, accuracies, "o-", label=f"{name} s{seed}")[0]
        trend = log_linear_trend(tokens, accuracies) if target is not None else None
        needed = tokens_to_reach(trend, 100 * target) if trend is not None else None
        if needed is not None:  # the trend line, up to where it reaches the target or the horizon
            slope, intercept = trend
            ends = np.array([tokens[0], min(needed, horizon)])
            axis.plot(ends, intercept + slope * np.log(ends), "--", color=line.get_color(), linewidth=0.8)
    axis.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    if target is not None:
        axis.axhline(100 * target, color="grey", linewidth=0.8, linestyle="-.")
    pairs = plan["checkpoint_blimp"]["pairs_per_set"]
    title = f"BLiMP ({pairs} pairs per set) vs tokens" + (", with log-linear trends (--)" if target else "")
    axis.set(xlabel="sample positions seen (M)", ylabel="BLiMP accuracy (%)", title=title, xscale="log")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_alpha(elc_runs: list, path: Path):
    panels = {f"{name} seed {seed}": json.loads((run / "alpha.json").read_text()) for (name, seed), run in elc_runs}
    plots.plot_layer_weights(path, panels)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--skip-blimp", action="store_true", help="score no model; scores on disk are still reported")
    parser.add_argument(
        "--runs",
        nargs="+",
        help="pretrain only these runs (e.g. elc-bert-seed42), then stop; with --no-train, score only these",
    )
    parser.add_argument("--no-train", action="store_true", help="train nothing: score and report what is on disk")
    args = parser.parse_args()
    plan = yaml.safe_load(args.plan.read_text())
    runs = pretrain_all(plan, only=[] if args.no_train else args.runs)
    if args.runs and not args.no_train:
        return
    # with --no-train, --runs picks the runs to score (processes side by side); the report covers every run
    score = {key: not args.skip_blimp and (not args.runs or run_dir(plan, *key).name in args.runs) for key in runs}
    scores, curves = {}, {}
    for key, summary_dir in runs.items():  # the short learning-curve scores first, then all of BLiMP
        if "checkpoint_blimp" in plan:
            curves |= score_checkpoints(plan, {key: summary_dir}, score_missing=score[key])
        scores |= score_blimp(plan, {key: summary_dir}, score_missing=score[key])
    write(plan, args.plan, runs, scores, curves)


if __name__ == "__main__":
    main()
