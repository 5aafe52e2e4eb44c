"""The learning-rate probe of a pretraining size: short runs at several peak learning rates and seeds, and the rate
that learns with every seed (docs/experiments.md, "Learning-rate probe at small-cpu scale").

    OMP_NUM_THREADS=1 python scripts/lr_probe.py configs/experiments/lr_probe_small_cpu.yaml --runs lr0.01-seed42
    python scripts/lr_probe.py configs/experiments/lr_probe_small_cpu.yaml --report

Each run is `elc-bert pretrain` of the plan's base config with `learning_rate`, `seed` and the plan's `model` fields
(resumed from its last checkpoint when interrupted; finished runs are skipped), all with one tokenizer trained once
(the one `scripts/elc_vs_ltg.py` trains). With --runs only the named runs train (processes side by side); --report
writes `results.md`, `results.json` and `curves.png` into the plan's `results_dir` from what the runs have logged so
far: validation loss per evaluation, the final one, and the loss of a unigram model (each token predicted by its
training-corpus frequency) that a run stuck on the unigram plateau scores. A run "learns" when its final validation
loss is at least `learns_margin` below the unigram loss; the chosen rate is the one that learns with every seed and,
among those, has the lowest mean final loss.
"""

import argparse
import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import yaml
from elc_vs_ltg import shared_tokenizer

from elc_bert import plots, runs
from elc_bert.data.corpus import packed_samples
from elc_bert.data.tokenizer import load_tokenizer
from elc_bert.job_configs import load_config
from elc_bert.job_configs.training_metrics import TrainingMetrics
from elc_bert.training.pretrain import PretrainConfig, corpus, pretrain


def run_name(lr: float, seed: int) -> str:
    return f"lr{lr:g}-seed{seed}"


def train(plan: dict, only: list[str] | None) -> None:
    base = load_config(PretrainConfig, plan["base"], plan.get("base_overrides", []))
    tokenizer = shared_tokenizer(base, Path(plan["runs_dir"]) / runs.TOKENIZER)
    for lr in plan["learning_rates"]:
        for seed in plan["seeds"]:
            name = run_name(lr, seed)
            summary = Path(plan["results_dir"]) / "runs" / name
            if TrainingMetrics.read(summary) is not None or (only is not None and name not in only):
                continue
            print(f"\n== {name} ==", flush=True)
            output_dir = Path(plan["runs_dir"]) / name
            config = dataclasses.replace(
                base,
                output_dir=str(output_dir),
                tokenizer=str(tokenizer),
                seed=seed,
                learning_rate=lr,
                model={**base.model, **plan.get("model", {})},
                training={**base.training, "disable_tqdm": False},
            )
            pretrain(config)
            summary.mkdir(parents=True, exist_ok=True)
            TrainingMetrics.read(output_dir).write(summary)


def unigram_loss(plan: dict) -> float:
    """The validation cross-entropy (nats per token) of the unigram model of the training samples, special tokens
    left out of both: the loss of a model that has learned token frequencies and nothing else."""
    base = load_config(PretrainConfig, plan["base"], plan.get("base_overrides", []))
    tokenizer = load_tokenizer(Path(plan["runs_dir"]) / runs.TOKENIZER)
    special = set(tokenizer.all_special_ids)
    counts = Counter()
    data_dir = Path(base.data_dir)
    for ids in packed_samples(corpus(base.train_files, data_dir, "train"), tokenizer, base.seq_length, False)[
        "input_ids"
    ]:
        counts.update(i for i in ids if i not in special)
    total = sum(counts.values())
    dev = packed_samples(corpus(base.validation_files, data_dir, "dev"), tokenizer, base.seq_length, False)
    tokens = [i for ids in dev["input_ids"] for i in ids if i not in special]
    return -sum(math.log((counts[i] + 1) / (total + len(tokenizer))) for i in tokens) / len(tokens)


def report(plan: dict) -> None:
    out = Path(plan["results_dir"])
    unigram = unigram_loss(plan)
    margin = plan.get("learns_margin", 0.5)
    rows, curves = {}, {}
    for lr in plan["learning_rates"]:
        for seed in plan["seeds"]:
            name = run_name(lr, seed)
            metrics = TrainingMetrics.read(out / "runs" / name)
            if metrics is None:
                state = sorted((Path(plan["runs_dir"]) / name).glob("checkpoint-*/trainer_state.json"))
                history = TrainingMetrics.of_checkpoint(state[-1].parent).log_history if state else []
                final = None
            else:
                history, final = metrics.log_history, metrics.final.get("eval_loss")
            evals = [(e["step"], e["eval_loss"]) for e in history if "eval_loss" in e]
            curves[name] = ([s for s, _ in evals], [v for _, v in evals])
            rows[name] = {"lr": lr, "seed": seed, "evals": evals, "final": final}
    choice, table = None, []
    for lr in plan["learning_rates"]:
        finals = [rows[run_name(lr, seed)]["final"] for seed in plan["seeds"]]
        done = all(f is not None for f in finals)
        learns = done and all(f <= unigram - margin for f in finals)
        mean = sum(finals) / len(finals) if done else None
        table.append((lr, finals, mean, learns if done else None))
        if learns and (choice is None or mean < choice[1]):
            choice = (lr, mean)
    lines = [
        f"# Learning-rate probe ({plan['results_dir']})",
        "",
        f"Unigram model's validation loss: {unigram:.3f} nats; a run learns when it ends <= {unigram - margin:.3f}.",
        "",
        "| peak lr | "
        + " | ".join(f"final val loss, seed {s}" for s in plan["seeds"])
        + " | mean | learns with every seed |",
        "|---|" + "---|" * (len(plan["seeds"]) + 2),
    ]
    for lr, finals, mean, learns in table:
        cells = [f"{f:.3f}" if f is not None else "running" for f in finals]
        verdict = "?" if learns is None else ("yes" if learns else "no")
        lines.append(f"| {lr:g} | " + " | ".join(cells) + f" | {'' if mean is None else f'{mean:.3f}'} | {verdict} |")
    lines += [
        "",
        f"Chosen: **{choice[0]:g}**" if choice else "Chosen: none yet (runs missing, or none learns with every seed)",
    ]
    missing = [run_name(lr, seed) for lr, finals, _, _ in table for seed, f in zip(plan["seeds"], finals) if f is None]
    if choice and missing:
        lines[-1] += f" (provisional: {', '.join(missing)} not finished)"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(
        json.dumps(
            {"unigram_loss": unigram, "runs": rows, "chosen": choice and choice[0], "unfinished": missing}, indent=2
        )
        + "\n"
    )
    curves = {name: curve for name, curve in curves.items() if curve[0]}
    if curves:
        plots.plot_curves(out / "curves.png", curves, "step", "validation MLM loss", "Learning-rate probe")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--runs", nargs="+", help="train only these runs (names like lr0.01-seed42)")
    parser.add_argument("--report", action="store_true", help="only write the report of what the runs logged")
    args = parser.parse_args()
    plan = yaml.safe_load(args.plan.read_text())
    if not args.report:
        train(plan, args.runs)
    if args.report or args.runs is None:
        report(plan)


if __name__ == "__main__":
    main()
