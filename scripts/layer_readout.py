"""ELC-BERT's own readout against leave-one-out importance and recovery speed (issue 69, part 6).

    python scripts/layer_readout.py configs/experiments/layer_readout.yaml [--report] [--seeds S ...]

For each seed of the plan: `elc-bert pretrain PRETRAIN seed=S output_dir=RUNS/elc-bert-8l-seedS` with the plan's
overrides (skipped once the run's model exists; a stopped run resumes itself), then `elc-bert analyze` with the plan's
flags into RESULTS/elc-bert-8l-seedS (skipped once report.json exists; recovery resumes through recovery.json), on
`max_sentences` held-out sentences taken in equal shares from the files of `data` (written to RESULTS/sample.txt).
With --report nothing is trained or analysed: the tables of the seeds finished so far.

The readout. ELC-BERT's alpha matrix (`layer_weights()`, L x (L+1)) holds in row n the softmax weights block n puts on
y_0..y_n (y_0 the embeddings, y_{j+1} the output of block j). Layer j's use is the mean weight the later blocks put on
its output, use_j = mean over n = j+1..L-1 of alpha[n, j+1], defined for j = 0..L-2: the last block's output is the
model's output, which no alpha weighs in the `base` variant (so the last layer is left out of every correlation).
Row n spreads its weight over n + 1 states, so even a uniform alpha gives early layers a larger use; the second
readout, use-vs-uniform_j = mean over n > j of (n + 1) alpha[n, j+1], is the same weight relative to a uniform row
(1 = uniform).
It is set beside, per layer: the leave-one-out loss increase (masked-token loss with layer j skipped minus the
unmodified loss), the recovery area and the steps to recover (a layer that did not recover ranks last), by
Spearman's rho (a layer used more should count more: positive rho), per model and pooled over seeds (the mean of the
per-seed rhos). Intervals: percentile bootstrap over layers (`scipy.stats.bootstrap`), resampled within each seed for
the pooled rho; a resample whose layers all tie on one side counts as rho 0.
Writes RESULTS/results.md and results.json.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from elc_bert.analysis import load_sentences
from elc_bert.analysis.report import REPORT_JSON
from elc_bert.cli import main as cli_main

READOUTS = {"use": "use", "use_vs_uniform": "use vs uniform"}
TARGETS = {
    "loo_increase": "leave-one-out loss increase",
    "recovery_area": "recovery area",
    "steps_to_recover": "steps to recover",
}


def run_name(seed: int) -> str:
    return f"elc-bert-8l-seed{seed}"


def balanced_sample(data: Path, max_sentences: int) -> list[str]:
    """`max_sentences` sentences, an equal share from each file of `data` (a folder) or all from one file."""
    files = sorted(p for p in data.iterdir() if p.is_file()) if data.is_dir() else [data]
    share = max(1, max_sentences // len(files))
    return [sentence for path in files for sentence in load_sentences(path, share)]


def readout(alpha: list[list[float]], vs_uniform: bool = False) -> list[float]:
    """use_j = mean over n > j of alpha[n, j+1], for the blocks j = 0..L-2, or with each row scaled by its n + 1
    states (module docstring)."""
    alpha = np.asarray(alpha)
    if vs_uniform:
        alpha = alpha * np.arange(1, alpha.shape[0] + 1)[:, None]
    return [float(alpha[j + 1 :, j + 1].mean()) for j in range(alpha.shape[0] - 1)]


def layer_table(report: dict) -> dict[str, list[float]]:
    """Per layer 0..L-2: the readout and the three targets, from one report.json."""
    profiles = report["depth_profiles"]
    if "alpha" not in profiles:
        raise SystemExit(f"{report['model']}: no alpha matrix in its report (not an ELC model)")
    loo = report["leave_one_out"]
    recovery = report["recovery"]
    if recovery is None:
        raise SystemExit(f"{report['model']}: analysed without --recovery")
    steps = recovery["settings"]["steps"]
    recovered = [row["steps_to_recover"] for row in recovery["layers"]]
    use = readout(profiles["alpha"])
    kept = range(len(use))
    return {
        "use": use,
        "use_vs_uniform": readout(profiles["alpha"], vs_uniform=True),
        "loo_increase": [loo["layers"][j]["metric"] - loo["baseline"] for j in kept],
        "recovery_area": [recovery["layers"][j]["area"] for j in kept],
        # never recovered within K steps: ranks after every layer that did
        "steps_to_recover": [steps + 1 if recovered[j] is None else recovered[j] for j in kept],
    }


def spearman(x, y) -> float:
    if len(set(x)) < 2 or len(set(y)) < 2:
        return 0.0  # no ranking on one side: no association (module docstring)
    return float(stats.spearmanr(x, y).statistic)


def pooled_rho(tables: list[dict], use: str, target: str, bootstrap: dict) -> dict:
    """The mean over seeds of Spearman(readout `use`, target), with a bootstrap interval over layers resampled
    within each seed (scipy's independent resampling of several samples), and each seed's rho with its own interval."""

    def mean_rho(*index_sets):
        return float(np.mean([
            spearman([t[use][i] for i in idx], [t[target][i] for i in idx])
            for t, idx in zip(tables, index_sets)
        ]))  # fmt: skip

    def interval(samples) -> list[float]:
        if all(len(set(table[target])) < 2 for table in tables):
            return [float("nan"), float("nan")]
        return percentile_interval(samples, mean_rho, bootstrap)

    indices = [np.arange(len(t["use"])) for t in tables]
    per_seed = []
    for table, idx in zip(tables, indices):
        ties = len(set(table[target])) < 2 or len(set(table[use])) < 2
        rho = None if ties else spearman(table[use], table[target])
        per_seed.append({"rho": rho, "interval": None if ties else interval_one(table, use, target, idx, bootstrap)})
    return {"rho": mean_rho(*indices), "interval": interval(indices), "per_seed": per_seed}


def interval_one(table: dict, use: str, target: str, idx, bootstrap: dict) -> list[float]:
    def statistic(i):
        return spearman([table[use][k] for k in i], [table[target][k] for k in i])

    return percentile_interval((idx,), statistic, bootstrap)


def percentile_interval(samples, statistic, bootstrap: dict) -> list[float]:
    """The percentile bootstrap interval of `statistic` over `samples`, with the plan's resamples, confidence and
    seed."""
    result = stats.bootstrap(
        samples,
        statistic,
        n_resamples=bootstrap["resamples"],
        confidence_level=bootstrap["confidence"],
        method="percentile",
        vectorized=False,
        random_state=np.random.default_rng(bootstrap["seed"]),
    )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def fmt_rho(rho, interval) -> str:
    if rho is None:
        return "n/a (all tie)"
    return f"{rho:+.2f} [{interval[0]:+.2f}, {interval[1]:+.2f}]"


def write_results(plan: dict, reports: dict[int, dict], results_dir: Path, plan_path: Path) -> None:
    tables = {seed: layer_table(report) for seed, report in reports.items()}
    correlations = {
        f"{use} vs {target}": pooled_rho(list(tables.values()), use, target, plan["bootstrap"])
        for use in READOUTS
        for target in TARGETS
    }
    first = next(iter(reports.values()))
    settings = first["recovery"]["settings"]
    seeds = list(tables)
    confidence = int(100 * plan["bootstrap"]["confidence"])
    lines = [
        f"ELC-BERT's readout (use_j = mean over later blocks n > j of alpha[n, j+1]) against leave-one-out and "
        f"recovery speed: tiny ELC-BERT (`{plan['pretrain']}`, base variant) with 8 layers, "
        f"{' '.join(o for o in plan['pretrain_overrides'] if o.startswith(('max_steps', 'batch_size', 'seq_length')))}"
        f", seeds {', '.join(map(str, seeds))}; {first['sentences']} held-out sentences of {plan['data']} "
        f"(equal shares per file), masked-token loss with fixed masks. Recovery: each layer re-initialised, then "
        f"{settings['steps']} full-batch {settings['optimizer']} steps at lr {settings['lr']:g} on that layer alone; "
        f"recovered = within {settings['tolerance_percent']:g}% of the unmodified loss. Layers 0-6 (the last, read "
        f"by the head alone, has no readout). Spearman's rho with a {confidence}% percentile bootstrap interval over "
        f"layers ({plan['bootstrap']['resamples']} resamples; pooled: the mean of the per-seed rhos, layers resampled "
        f"within each seed). Command: `python scripts/layer_readout.py {plan_path}`.",
        "",
        "| readout vs target | " + " | ".join(f"seed {s}" for s in seeds) + " | pooled (mean rho) |",
        "|---" * (len(seeds) + 2) + "|",
    ]
    for (use, use_name), (target, name) in ((u, t) for u in READOUTS.items() for t in TARGETS.items()):
        c = correlations[f"{use} vs {target}"]
        cells = [fmt_rho(row["rho"], row["interval"]) for row in c["per_seed"]]
        ties = all(row["rho"] is None for row in c["per_seed"])
        pooled = "n/a (all tie)" if ties else fmt_rho(c["rho"], c["interval"])
        lines.append(f"| {use_name} vs {name} | " + " | ".join(cells) + f" | {pooled} |")
    lines += ["", "Per layer (the readouts; leave-one-out increase; recovery area; steps to recover, K+1: never):", ""]
    width = len(next(iter(tables.values()))["use"])
    lines.append("| seed | quantity | " + " | ".join(f"layer {j}" for j in range(width)) + " |")
    lines.append("|---" * (width + 2) + "|")
    for seed, table in tables.items():
        lines.append(f"| {seed} | use | " + " | ".join(f"{v:.3f}" for v in table["use"]) + " |")
        lines.append(f"| {seed} | use vs uniform | " + " | ".join(f"{v:.2f}" for v in table["use_vs_uniform"]) + " |")
        lines.append(f"| {seed} | loo increase | " + " | ".join(f"{v:+.3f}" for v in table["loo_increase"]) + " |")
        lines.append(f"| {seed} | recovery area | " + " | ".join(f"{v:.2f}" for v in table["recovery_area"]) + " |")
        lines.append(f"| {seed} | steps | " + " | ".join(str(v) for v in table["steps_to_recover"]) + " |")
    baselines = ", ".join(f"seed {s}: {r['leave_one_out']['baseline']:.3f}" for s, r in reports.items())
    lines += ["", f"Unmodified masked-token loss: {baselines}."]
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "results.md").write_text("\n".join(lines) + "\n")
    document = {"plan": str(plan_path), "tables": tables, "correlations": correlations}
    (results_dir / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--report", action="store_true", help="train and analyse nothing: the finished seeds' tables")
    parser.add_argument("--seeds", type=int, nargs="+", help="these of the plan's seeds only (default: all)")
    args = parser.parse_args()
    plan = yaml.safe_load(args.plan.read_text())
    results_dir, runs_dir = Path(plan["results_dir"]), Path(plan["runs_dir"])
    sample = results_dir / "sample.txt"
    if not args.report and not sample.exists():
        results_dir.mkdir(parents=True, exist_ok=True)
        sample.write_text("\n".join(balanced_sample(Path(plan["data"]), plan["max_sentences"])) + "\n")
    reports = {}
    unknown = set(args.seeds or []) - set(plan["seeds"])
    if unknown:
        parser.error(f"--seeds {sorted(unknown)}: not in the plan's seeds {plan['seeds']}")
    for seed in args.seeds or plan["seeds"]:
        run, out = runs_dir / run_name(seed), results_dir / run_name(seed)
        if not (out / REPORT_JSON).exists():
            if args.report:
                print(f"seed {seed}: not analysed yet")
                continue
            if not (run / "model.safetensors").exists():
                print(f"\n== pretrain seed {seed} ==", flush=True)
                overrides = [*plan["pretrain_overrides"], f"seed={seed}", f"output_dir={run}"]
                cli_main(["pretrain", plan["pretrain"], *overrides])
            print(f"\n== analyze seed {seed} ==", flush=True)
            cli_main(["analyze", str(run), "--data", str(sample), "--out", str(out),
                      "--max-sentences", str(plan["max_sentences"]), *plan["analyze_flags"]])  # fmt: skip
        reports[seed] = json.loads((out / REPORT_JSON).read_text())
    if reports:
        write_results(plan, reports, results_dir, args.plan)


if __name__ == "__main__":
    main()
