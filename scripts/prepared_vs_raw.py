"""The BabyLM corpus raw against prepared as the reference prepares it: the same model, steps and seeds trained on each
(`prepare_corpus: false` / `true`), then BLiMP fast for every run, a table and the loss curves.

    OMP_NUM_THREADS=1 python scripts/prepared_vs_raw.py configs/experiments/prepared_vs_raw.yaml [--runs raw-seed42]
    OMP_NUM_THREADS=1 python scripts/prepared_vs_raw.py configs/experiments/prepared_vs_raw.yaml --words-seen

With --runs only the named runs (raw-seed42, prepared-seed42, ... for the plan's seeds) are trained, so that several
processes can train them side by side; the report needs all. A run that stopped resumes from its last checkpoint; a
finished one is not trained again. Writes `results.md`, `results.json` and `loss_curves.png` into the config's
results_dir.

With --words-seen nothing is trained: each run's training samples are built as the pretrain job builds them and the
words they show over the run's steps are printed (a run without its folder trains its tokenizer in a scratch folder:
a minute or two each).
"""

import argparse
import json
import tempfile
from pathlib import Path

import yaml

from elc_bert import plots
from elc_bert.evaluation.blimp import evaluate_blimp
from elc_bert.job_configs import PretrainConfig
from elc_bert.job_configs.training_metrics import TrainingMetrics
from elc_bert.pretrained import load_model
from elc_bert.runs import TOKENIZER
from elc_bert.training.pretrain import pretrain, step_words

CORPORA = {"raw": False, "prepared": True}


def run_names(plan: dict) -> dict[str, tuple[bool, int]]:
    """Each run's name and its (prepare_corpus, seed)."""
    return {f"{corpus}-seed{seed}": (prepare, seed) for seed in plan["seeds"] for corpus, prepare in CORPORA.items()}


def run_config(plan: dict, name: str) -> PretrainConfig:
    prepare, seed = run_names(plan)[name]
    output_dir = str(Path(plan["runs_dir"]) / name)
    return PretrainConfig(**{**plan["pretrain"], "output_dir": output_dir, "prepare_corpus": prepare, "seed": seed})


def train(plan: dict, name: str) -> Path:
    config = run_config(plan, name)
    if TrainingMetrics.read(config.output_dir) is None:
        pretrain(config)
    return Path(config.output_dir)


def words_seen(config: PretrainConfig) -> int:
    """The words (as released, BabyLM's count) that the run's training samples show over its steps (`step_words`).
    The tokenizer is the run's when its folder has one, else one trained the same way in a scratch folder (the run
    folder is left as it is: a later training would take a tokenizer found there as its own)."""
    output_dir = Path(config.output_dir)
    with tempfile.TemporaryDirectory() as scratch:
        return sum(step_words(config, output_dir if (output_dir / TOKENIZER).is_dir() else Path(scratch)))


def blimp_fast(plan: dict, run: Path) -> dict:
    report = run / "blimp_fast.json"
    if not report.is_file():
        model, tokenizer, _ = load_model(str(run), lm_head=True)
        data = Path(plan["pretrain"]["data_dir"]) / plan["blimp_fast"]
        evaluate_blimp(model, tokenizer, data, run, name="blimp_fast")
    return json.loads(report.read_text())


def report(plan: dict) -> None:
    results_dir = Path(plan["results_dir"])
    results_dir.mkdir(parents=True, exist_ok=True)
    rows, curves, summary = [], {}, {}
    for name in run_names(plan):
        run = Path(plan["runs_dir"]) / name
        metrics = TrainingMetrics.read(run)
        final, history = metrics.final, metrics.log_history
        blimp = blimp_fast(plan, run)
        low, high = blimp["overall_pairs_wilson95"]
        summary[name] = {
            "train_loss": final["train_loss"],
            "eval_loss": final.get("eval_loss"),
            "blimp_fast": blimp["overall"],
            "blimp_fast_pairs_wilson95": blimp["overall_pairs_wilson95"],
            "pairs": blimp["total"],
            "corpus_token_share": final["corpus_token_share"],
            "repeated_token_share": final["repeated_token_share"],
            "real_token_share": final["real_token_share"],
            "words_seen": words_seen(run_config(plan, name)),
        }
        for split, key in (("train", "loss"), ("validation", "eval_loss")):
            steps = [entry["step"] for entry in history if key in entry]
            curves[f"{name}, {split}"] = (steps, [entry[key] for entry in history if key in entry])
        rows.append(
            f"| {name} | {final['train_loss']:.3f} | {final.get('eval_loss', float('nan')):.3f} | "
            f"{100 * blimp['overall']:.1f} ({100 * low:.1f}-{100 * high:.1f}) | "
            f"{100 * final['corpus_token_share']:.2f}% | {100 * final['repeated_token_share']:.2f}% | "
            f"{100 * final['real_token_share']:.1f}% | {summary[name]['words_seen']:,} |"
        )
    table = [
        "| run | training loss | validation loss | BLiMP fast (%, pooled 95% interval) | tokens reaching a sample | "
        "repeated | real-token share | words seen |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    (results_dir / "results.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    (results_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plots.plot_curves(results_dir / "loss_curves.png", curves, "step", "MLM loss", "Raw lines against prepared text")
    print("\n".join(table))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", help="the experiment's YAML file")
    parser.add_argument("--runs", nargs="+", help="train only these runs (e.g. raw-seed42), no report")
    parser.add_argument(
        "--words-seen", action="store_true", help="train nothing: print the words each run's samples show"
    )
    args = parser.parse_args()
    plan = yaml.safe_load(Path(args.plan).read_text(encoding="utf-8"))
    unknown = sorted(set(args.runs or ()) - set(run_names(plan)))
    if unknown:
        parser.error(f"unknown runs {unknown}: the plan's are {sorted(run_names(plan))}")
    if args.words_seen:
        for name in args.runs or run_names(plan):
            print(f"{name}: {words_seen(run_config(plan, name)):,} words seen")
        return
    for name in args.runs or run_names(plan):
        train(plan, name)
    if not args.runs:
        report(plan)


if __name__ == "__main__":
    main()
