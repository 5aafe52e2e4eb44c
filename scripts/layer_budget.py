"""A training budget by layer importance against uniform training (issue 69, part 5): per seed, uniform training for
max_steps; the budget run (`layer_budget`: after W steps the k least important layers, by leave-one-out, are frozen);
and uniform training for the steps whose analytic FLOPs equal the budget run's (`training.layer_budget.step_flops`,
the leave-one-out measurement included). Then the validation loss with a 95% Student-t interval over seeds, the
compute saved (analytic FLOPs and measured seconds per step), a table and the loss curves.

    OMP_NUM_THREADS=1 python scripts/layer_budget.py configs/experiments/layer_budget.yaml [--runs budget-seed42]

With --runs only the named runs are trained (no report). A stopped run resumes; a finished one is not trained again.
Writes `results.md`, `results.json` and `loss_curves.png` into the plan's results_dir.
"""

import argparse
import json
import statistics
from pathlib import Path

import yaml

from elc_bert import plots
from elc_bert.analysis.layer_importance import leave_one_out_importance
from elc_bert.intervals import confidence_interval
from elc_bert.job_configs import PretrainConfig
from elc_bert.job_configs.training_metrics import TrainingMetrics
from elc_bert.models import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.training.layer_budget import RECORD, step_flops
from elc_bert.training.pretrain import pretrain

ARMS = ("uniform", "budget", "equal-flops")


def flops_plan(plan: dict) -> dict:
    """The analytic FLOPs of a uniform step, of the budget run, and the uniform steps that cost as much (the
    measurement: L + 1 forward passes over `samples` sequences, a forward pass being a third of a step's FLOPs)."""
    settings, budget = plan["pretrain"], plan["layer_budget"]
    model_config = ElcBertConfig.from_preset(settings["preset"], vocab_size=settings["vocab_size"], **settings["model"])
    flops = step_flops(
        ElcBertForMaskedLM(model_config),
        settings["batch_size"],
        settings["seq_length"],
        0.15,
        frozen=range(budget["freeze"]),  # every layer has the same size: any k layers save as much
    )
    steps, after = settings["max_steps"], budget["after_steps"]
    measurement = (model_config.num_hidden_layers + 1) * budget["samples"] / (3 * settings["batch_size"])
    budget_steps = after + (steps - after) * (1 - flops["saved_share"]) + measurement
    return {
        **flops,
        "measurement_in_steps": measurement,
        "budget_run_in_uniform_steps": budget_steps,
        "equal_flops_steps": round(budget_steps),
        "saved_share_of_run": 1 - budget_steps / steps,
    }


def run_names(plan: dict) -> list[str]:
    return [f"{arm}-seed{seed}" for seed in plan["seeds"] for arm in ARMS]


def run_config(plan: dict, name: str) -> PretrainConfig:
    arm, seed = name.rsplit("-seed", 1)
    settings = {**plan["pretrain"], "output_dir": str(Path(plan["runs_dir"]) / name), "seed": int(seed)}
    if arm == "budget":
        settings["layer_budget"] = plan["layer_budget"]
    if arm == "equal-flops":
        settings["max_steps"] = flops_plan(plan)["equal_flops_steps"]
    return PretrainConfig(**settings)


def train(plan: dict, name: str) -> None:
    config = run_config(plan, name)
    if TrainingMetrics.read(config.output_dir) is None:
        pretrain(config, leave_one_out_importance)


def finished_seeds(plan: dict) -> list[int]:
    """The seeds whose runs have all finished (a report while others still train says which it covers)."""
    done = lambda name: TrainingMetrics.read(Path(plan["runs_dir"]) / name) is not None  # noqa: E731
    return [seed for seed in plan["seeds"] if all(done(f"{arm}-seed{seed}") for arm in ARMS)]


def report(plan: dict) -> None:
    plan = {**plan, "seeds": finished_seeds(plan)}
    if not plan["seeds"]:
        raise SystemExit("no seed has all its runs finished yet")
    results_dir = Path(plan["results_dir"])
    results_dir.mkdir(parents=True, exist_ok=True)
    runs, curves = {}, {}
    for name in run_names(plan):
        folder = Path(plan["runs_dir"]) / name
        metrics = TrainingMetrics.read(folder)
        final, history = metrics.final, metrics.log_history
        runs[name] = {
            "eval_loss": final["eval_loss"],
            "train_loss": final["train_loss"],
            "train_runtime_s": final["train_runtime"],
            "steps": run_config(plan, name).max_steps,
        }
        if (folder / RECORD).is_file():
            runs[name]["layer_budget"] = json.loads((folder / RECORD).read_text())
        steps = [entry["step"] for entry in history if "eval_loss" in entry]
        curves[name] = (steps, [entry["eval_loss"] for entry in history if "eval_loss" in entry])
    arms = {}
    for arm in ARMS:
        losses = [runs[f"{arm}-seed{seed}"]["eval_loss"] for seed in plan["seeds"]]
        runtimes = [runs[f"{arm}-seed{seed}"]["train_runtime_s"] for seed in plan["seeds"]]
        mean, half = confidence_interval(losses)
        arms[arm] = {"eval_loss_mean": mean, "eval_loss_ci95_half": half, "eval_losses": losses, "runtimes_s": runtimes}
    budgets = [runs[f"budget-seed{seed}"]["layer_budget"] for seed in plan["seeds"]]
    # a run resumed after its freeze timed no step before it in that process: None
    before = [(b["step_seconds"]["before"] or {}).get("median") for b in budgets]
    after = [(b["step_seconds"]["after"] or {}).get("median") for b in budgets]
    measured = {
        "step_seconds_before": before,
        "step_seconds_after": after,
        "step_time_saved_share": [1 - a / b if a and b else None for a, b in zip(after, before)],
        "frozen_layers": [b["frozen"] for b in budgets],
        "importance_percent": [b["importance"] for b in budgets],
    }
    summary = {"seeds": plan["seeds"], "flops": flops_plan(plan), "measured": measured, "arms": arms, "runs": runs}
    (results_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    first = plan["seeds"][0]
    half = lambda value: "n/a" if value is None else f"{value:.3f}"  # noqa: E731
    rows = [
        f"| {arm} | {runs[f'{arm}-seed{first}']['steps']} | {a['eval_loss_mean']:.3f} +- "
        f"{half(a['eval_loss_ci95_half'])} | {', '.join(f'{x:.3f}' for x in a['eval_losses'])} | "
        f"{statistics.fmean(a['runtimes_s']):.0f} |"
        for arm, a in arms.items()
    ]
    table = [
        "| arm | steps | validation loss (mean +- 95% t half-width) | per seed | training seconds (mean) |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]
    flops, seeds = summary["flops"], ", ".join(map(str, plan["seeds"]))
    notes = [
        "",
        f"Seeds: {seeds} (with 2 seeds the t interval has 1 degree of freedom: wide; with 1, none).",
        f"Analytic FLOPs saved: {100 * flops['saved_share']:.1f}% of a step after the freeze, "
        f"{100 * flops['saved_share_of_run']:.1f}% of the run (warm-up and measurement included).",
        "Measured seconds per step (median) before / after the freeze, in the runs: "
        + "; ".join(f"{half(b)} / {half(a)}" for b, a in zip(before, after))
        + " (n/a: a run resumed after its freeze; on a CPU shared with other processes these wall times are "
        "confounded: `scripts/bench_layer_budget.py` measures the step alone).",
        "Produced by: OMP_NUM_THREADS=1 python scripts/layer_budget.py configs/experiments/layer_budget.yaml",
    ]
    (results_dir / "results.md").write_text("\n".join(table + notes) + "\n", encoding="utf-8")
    plots.plot_curves(results_dir / "loss_curves.png", curves, "step", "validation MLM loss", "Layer budget")
    print("\n".join(table))
    print(json.dumps({"flops": summary["flops"], "measured": measured}, indent=2))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", help="the experiment's YAML file")
    parser.add_argument("--runs", nargs="+", help="train only these runs (e.g. budget-seed42), no report")
    parser.add_argument("--flops", action="store_true", help="train nothing: print the FLOP plan")
    parser.add_argument("--report", action="store_true", help="train nothing: report the seeds finished so far")
    args = parser.parse_args()
    plan = yaml.safe_load(Path(args.plan).read_text(encoding="utf-8"))
    unknown = sorted(set(args.runs or ()) - set(run_names(plan)))
    if unknown:
        parser.error(f"unknown runs {unknown}: the plan's are {run_names(plan)}")
    if args.flops:
        print(json.dumps(flops_plan(plan), indent=2))
        return
    if args.report:
        report(plan)
        return
    for name in args.runs or run_names(plan):
        train(plan, name)
    if not args.runs:
        report(plan)


if __name__ == "__main__":
    main()
