"""Layer analysis of the trained models (docs/experiments.md, "Layer analysis of the trained models").

    python scripts/layer_analysis.py configs/experiments/layer_analysis.yaml [--report]

Runs `elc-bert analyze` (all Painters strategies) for every model of the YAML file (a path or Hub name, or
{model, metric, pppl_sentences} as `analyze` takes them) into `results_dir`/<name>/ (a model
whose report.json exists is skipped; one not trained yet is reported and skipped), then writes
`results_dir`/results.md: the leave-one-out table of every model side by side. With --report nothing is analysed:
the table of the models analysed so far.
"""

import argparse
import json
from pathlib import Path

import yaml

from elc_bert.analysis import analyze, load_sentences
from elc_bert.analysis.report import REPORT_JSON
from elc_bert.pretrained import load_model, resolve_model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--report", action="store_true", help="analyse nothing: the table of the finished models")
    args = parser.parse_args()
    plan = yaml.safe_load(args.plan.read_text())
    results_dir = Path(plan["results_dir"])
    sentences = load_sentences(plan["data"], plan["max_sentences"])
    reports = {}
    for name, entry in plan["models"].items():
        entry = {"model": entry} if isinstance(entry, str) else entry
        out = results_dir / name
        if not (out / REPORT_JSON).exists():
            if args.report:
                print(f"{name}: not analysed yet")
                continue
            path = resolve_model(entry["model"])
            if not (Path(path) / "config.json").exists():
                print(f"skipping {name}: no model in {path} yet (train it first)")
                continue
            print(f"\n== {name} ==")
            model, tokenizer, _ = load_model(path)
            options = {key: entry[key] for key in ("metric", "pppl_sentences") if key in entry}
            analyze(model, tokenizer, sentences, out, **options)
        reports[name] = json.loads((out / REPORT_JSON).read_text())

    width = max(len(r["leave_one_out"]["layers"]) for r in reports.values())
    lines = [
        f"Leave-one-out ablation on {plan['max_sentences']} WikiText-2 test sentences: the metric with each layer "
        "skipped (change vs the unmodified model in brackets where it is a loss). Command: `python "
        "scripts/layer_analysis.py configs/experiments/layer_analysis.yaml`; full reports and plots in "
        f"`{results_dir}/<model>/`.",
        "",
        "| model | metric | unmodified | "
        + " | ".join(f"skip {i}" for i in range(max(len(r["leave_one_out"]["layers"]) for r in reports.values())))
        + " |",
    ]
    lines.append("|---" * (lines[-1].count("|") - 1) + "|")
    for name, report in reports.items():
        loo = report["leave_one_out"]
        cells = [
            f"{row['metric']:.3f}" + ("" if row["change_percent"] is None else f" ({row['change_percent']:+.0f}%)")
            for row in loo["layers"]
        ]
        cells += [""] * (width - len(cells))
        lines.append(f"| {name} | {loo['metric']} | {loo['baseline']:.3f} | " + " | ".join(cells) + " |")
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
