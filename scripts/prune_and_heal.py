"""Prune and heal: how much of the loss that dropping layers costs a short continued pretraining wins back, against
the unpruned model trained for the same steps (issue 69; docs/guides/layer-analysis.md, "Prune and heal").

    python scripts/prune_and_heal.py runs/pretrain-tiny --drop 2 --steps 200 --out results/prune_and_heal/drop2 \
        [--config tiny] [key=value ...]

1. `elc-bert prune PARENT --drop ... --out OUT/pruned`;
2. heal: `elc-bert pretrain CONFIG init_from=OUT/pruned max_steps=STEPS output_dir=OUT/healed` (the config's data,
   optimizer and schedule; the key=value overrides after the flags go to both runs), and the same from the parent
   (`OUT/parent-continued`), so both get the same steps on the same batches;
3. the masked-token loss (`elc_bert.analysis.TaskMetric`: fixed masks on `--sentences` held-out sentences) of the
   parent and the pruned model before, and of both after, into OUT/results.json and results.md.

"Recovered" is the share of the pruning's cost that healing wins back at equal steps:
1 - (healed - parent continued) / (pruned - parent). Every stage whose output exists is skipped (pretrain resumes
itself), so a killed run is continued by running the same command again.
"""

import argparse
import contextlib
import io
import json
from pathlib import Path

from elc_bert.analysis import TaskMetric, load_sentences, text_batches
from elc_bert.analysis.pruning import prune_saved
from elc_bert.cli import main as cli_main
from elc_bert.pretrained import load_model

NULLED = ["preset=null", "vocab_size=null", "min_frequency=null", "tokenizer=null"]  # what init_from brings


def masked_loss(folder: Path, sentences: list[str], seed: int) -> float:
    model, tokenizer, _ = load_model(str(folder), "masked")
    return TaskMetric(model, tokenizer, text_batches(tokenizer, sentences), seed=seed)()


def continue_training(start: Path, out: Path, config: str, steps: int, overrides: list[str]) -> Path:
    if not (out / "model.safetensors").exists():
        argv = ["pretrain", config, f"init_from={start}", f"max_steps={steps}", f"output_dir={out}", *NULLED]
        with contextlib.redirect_stdout(io.StringIO()):
            cli_main([*argv, *overrides])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parent", help="a masked LM: a pretraining run or a model folder")
    parser.add_argument("--drop", nargs="+", type=int, required=True, help="the layers to drop")
    parser.add_argument("--steps", type=int, default=200, help="healing steps (and the parent's, for equal steps)")
    parser.add_argument("--config", default="tiny", help="the pretrain config the healing runs read (default tiny)")
    parser.add_argument("--data", required=True, help="held-out sentences for the loss (a text file or folder)")
    parser.add_argument("--sentences", type=int, default=256, help="how many held-out sentences (default 256)")
    parser.add_argument("--seed", type=int, default=0, help="the fixed masks' seed")
    parser.add_argument("--out", type=Path, required=True)
    args, overrides = parser.parse_known_args()
    sentences = load_sentences(args.data, args.sentences)
    pruned = args.out / "pruned"
    if not (pruned / "model.safetensors").exists():
        prune_saved(args.parent, pruned, drop=args.drop, overwrite=True)
    healed = continue_training(pruned, args.out / "healed", args.config, args.steps, overrides)
    continued = continue_training(Path(args.parent), args.out / "parent-continued", args.config, args.steps, overrides)
    losses = {
        name: masked_loss(folder, sentences, args.seed)
        for name, folder in (
            ("parent", Path(args.parent)),
            ("pruned", pruned),
            ("parent_continued", continued),
            ("healed", healed),
        )  # fmt: skip
    }
    cost = losses["pruned"] - losses["parent"]
    recovered = 1 - (losses["healed"] - losses["parent_continued"]) / cost if cost > 0 else None
    result = {"parent": str(args.parent), "drop": args.drop, "steps": args.steps, "sentences": len(sentences),
              "masked_token_loss": losses, "recovered": recovered}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    share = "n/a (pruning cost nothing)" if recovered is None else f"{100 * recovered:.1f}%"
    table = "\n".join([
        f"Prune {args.drop} of {args.parent}, heal {args.steps} steps (`{args.config}`); masked-token loss on "
        f"{len(sentences)} sentences of {args.data} (fixed masks, seed {args.seed}).",
        "",
        "| parent | pruned | parent +steps | healed | recovered |",
        "|---|---|---|---|---|",
        f"| {losses['parent']:.3f} | {losses['pruned']:.3f} | {losses['parent_continued']:.3f} | "
        f"{losses['healed']:.3f} | {share} |",
    ])  # fmt: skip
    (args.out / "results.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
