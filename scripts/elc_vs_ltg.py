"""ELC-BERT vs LTG-BERT at equal compute (issue 8, experiment 1).

    python scripts/elc_vs_ltg.py configs/experiments/elc_vs_ltg.yaml [--skip-blimp]

With --skip-blimp no model is scored; scores already on disk (e.g. from `elc-bert eval-blimp RUN --out SUMMARY_DIR
--name blimp`) are still reported.

Trains one tokenizer on the training files, then pretrains every (model, seed) of the plan from the same base config
with that tokenizer (finished runs are skipped, interrupted ones resume from their last checkpoint), scores each on
BLiMP and the supplement (`elc-bert eval-blimp`'s scorer), and writes into `results_dir`: `results.md` /
`results.json` (final losses, BLiMP overall and per field, supplement), `loss_curves.png` (MLM loss of every run),
`alpha.png` (the ELC-BERT runs' layer weights) and `blimp_fields.png` (BLiMP accuracy per field and run).
"""

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import matplotlib
import numpy as np
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

import elc_bert  # noqa: E402,F401  (registers the Auto classes)
from elc_bert.data.text import corpus_files, read_documents  # noqa: E402
from elc_bert.data.tokenizer import train_tokenizer  # noqa: E402
from elc_bert.training.config import load_config  # noqa: E402
from elc_bert.training.pretrain import PretrainConfig, pretrain  # noqa: E402


def shared_tokenizer(base: PretrainConfig, directory: Path) -> Path:
    if not (directory / "tokenizer.json").exists():
        files = [f for name in base.train_files for f in corpus_files(Path(base.data_dir) / name, "train")]
        lines = (line for document in read_documents(files) for line in document)
        train_tokenizer(lines, base.vocab_size, base.min_frequency).save_pretrained(directory)
    return directory


def pretrain_all(plan: dict) -> dict[tuple[str, int], Path]:
    """Pretrains the runs that have no summary yet; returns each run's summary folder. The run folders (checkpoints,
    models) stay in `runs_dir`; each summary (metrics, alpha, BLiMP scores) is a small folder under
    `results_dir`/runs, meant to be committed, so that a later session on a fresh clone skips finished runs."""
    base = load_config(PretrainConfig, plan["base"], [])
    runs_dir = Path(plan["runs_dir"])
    tokenizer = shared_tokenizer(base, runs_dir / "tokenizer")
    runs = {}
    for seed in plan["seeds"]:
        for name, model_fields in plan["models"].items():
            output_dir = runs_dir / f"{name}-seed{seed}"
            summary_dir = Path(plan["results_dir"]) / "runs" / f"{name}-seed{seed}"
            runs[(name, seed)] = summary_dir
            if (summary_dir / "metrics.json").exists():
                continue
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
            summary_dir.mkdir(parents=True, exist_ok=True)
            model = AutoModelForMaskedLM.from_pretrained(output_dir)
            if model.config.layer_combination == "elc":
                (summary_dir / "alpha.json").write_text(json.dumps(model.layer_weights().tolist()))
            shutil.copy(output_dir / "metrics.json", summary_dir / "metrics.json")
    return runs


def score_blimp(plan: dict, runs: dict, score_missing: bool = True) -> dict:
    """{(name, seed): {suite: summary}}; runs not yet scored are scored first, or left out without `score_missing`."""
    from elc_bert.evaluation.blimp import evaluate_blimp

    scores = {}
    for (name, seed), summary_dir in runs.items():
        scores[(name, seed)] = {}
        for suite, data in plan["blimp"].items():
            path = summary_dir / f"{suite}.json"
            if not path.exists():
                if not score_missing:
                    continue
                run = Path(plan["runs_dir"]) / f"{name}-seed{seed}"
                model = AutoModelForMaskedLM.from_pretrained(run)
                tokenizer = AutoTokenizer.from_pretrained(run)
                evaluate_blimp(model, tokenizer, data, summary_dir, name=suite)
            scores[(name, seed)][suite] = json.loads(path.read_text())
    return scores


def write(plan: dict, runs: dict, scores: dict):
    results_dir = Path(plan["results_dir"])
    results_dir.mkdir(parents=True, exist_ok=True)
    metrics = {key: json.loads((run / "metrics.json").read_text()) for key, run in runs.items()}
    suites = [suite for suite in plan["blimp"] if any(suite in by_suite for by_suite in scores.values())]
    header = "| " + " | ".join(["model", "seed", "final train loss", "validation loss", *suites]) + " |"
    lines = [
        "ELC-BERT vs LTG-BERT, `configs/pretrain/tiny.yaml` on the local stand-in corpus (BabyLM 2023 files present in "
        "../shared/data, 4 of 10 sources, + WikiText-2 train; not the BabyLM corpus). Accuracies in %. Command: "
        "`python scripts/elc_vs_ltg.py configs/experiments/elc_vs_ltg.yaml`.",
        "",
        header,
        "|---" * (header.count("|") - 1) + "|",
    ]
    table = {}
    for (name, seed), metric in metrics.items():
        losses = [entry["loss"] for entry in metric["log_history"] if "loss" in entry]
        row = {"final_train_loss": losses[-1], "eval_loss": metric["final"].get("eval_loss")}
        for suite, summary in scores.get((name, seed), {}).items():
            row[suite] = summary["overall"]
            row[f"{suite}_fields"] = summary["fields"]
        table[f"{name}/seed{seed}"] = row
        cells = [f"{100 * row[suite]:.1f}" if suite in row else "not scored yet" for suite in suites]
        evaluation = "n/a" if row["eval_loss"] is None else f"{row['eval_loss']:.3f}"
        cells = [name, str(seed), f"{row['final_train_loss']:.3f}", evaluation, *cells]
        lines.append("| " + " | ".join(cells) + " |")
    if "blimp" in suites:
        fields = sorted({field for row in table.values() for field in row.get("blimp_fields", {})})
        lines += ["", "BLiMP accuracy per field (%):", "", "| model/seed | " + " | ".join(fields) + " |"]
        lines.append("|---" * (len(fields) + 1) + "|")
        for key, row in table.items():
            if "blimp_fields" not in row:
                continue
            lines.append(f"| {key} | " + " | ".join(f"{100 * row['blimp_fields'][f]:.1f}" for f in fields) + " |")
    (results_dir / "results.md").write_text("\n".join(lines) + "\n")
    (results_dir / "results.json").write_text(json.dumps(table, indent=2))
    print("\n".join(lines))

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for (name, seed), metric in metrics.items():
        history = metric["log_history"]
        for key, style in (("loss", "-"), ("eval_loss", "--")):
            steps = [entry["step"] for entry in history if key in entry]
            axis.plot(steps, [entry[key] for entry in history if key in entry], style, label=f"{name} s{seed} {key}")
    axis.set(xlabel="step", ylabel="MLM loss", title="Pretraining (train -, validation --)", ylim=(None, None))
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(results_dir / "loss_curves.png", dpi=120)
    plt.close(figure)

    scored = {key: row["blimp_fields"] for key, row in table.items() if "blimp_fields" in row}
    if scored:
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
        figure.savefig(results_dir / "blimp_fields.png", dpi=120)
        plt.close(figure)

    elc_runs = [(key, run) for key, run in runs.items() if plan["models"][key[0]].get("layer_combination") == "elc"]
    if elc_runs:
        figure, axes = plt.subplots(1, len(elc_runs), figsize=(4 * len(elc_runs), 3.4), squeeze=False)
        for axis, ((name, seed), run) in zip(axes[0], elc_runs):
            alpha = np.array(json.loads((run / "alpha.json").read_text()))
            image = axis.imshow(alpha, cmap="viridis", vmin=0, vmax=1)
            axis.set(title=f"{name} seed {seed}", xlabel="source y_j (0 = embeddings)", ylabel="block n")
            axis.set_xticks(range(alpha.shape[1]))
            axis.set_yticks(range(alpha.shape[0]), [str(n) for n in range(1, alpha.shape[0] + 1)])
        figure.colorbar(image, ax=axes[0].tolist())
        figure.savefig(results_dir / "alpha.png", dpi=120)
        plt.close(figure)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--skip-blimp", action="store_true", help="score no model; scores on disk are still reported")
    args = parser.parse_args()
    plan = yaml.safe_load(args.plan.read_text())
    runs = pretrain_all(plan)
    scores = score_blimp(plan, runs, score_missing=not args.skip_blimp)
    write(plan, runs, scores)


if __name__ == "__main__":
    main()
