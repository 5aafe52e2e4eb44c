"""The `elc-bert` command's runners: `elc-bert <command> ...`, once parsed (by `elc_bert_cli`, the parser, which
imports nothing of the package, so that `--help` and `--version` answer at once), is run by its entry of `RUNNERS`.

One handler for every command: a bad input (config, file, folder, argument) prints one line naming it and exits 2;
any other failure prints one line and exits 1; `--debug` (or ELC_BERT_DEBUG=1) shows the traceback instead. The
package logs through `logging`; while a command runs, its records (INFO and above) go to stderr, and what the user
asked for (results tables, the overall line, the folder written) is printed here, to stdout.
"""

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from elc_bert_cli import JOBS, build_parser

from . import runs
from .models.errors import InputError
from .runs import DISK_FULL_ERRNOS  # a full disk is the user's to free: exit 2 as well


def main(argv=None) -> None:
    """`elc-bert` in this process (`python -m elc_bert.cli`, the tests): parses `argv`, then `execute`. The console
    script is `elc_bert_main.main`, which parses before importing the package."""
    execute(build_parser().parse_args(argv))


def execute(args) -> None:
    """Runs the parsed command under the one error handler (exit 2 for a bad input, 1 for a failure, 130 for Ctrl-C)."""
    # The command's result (a table, JSON, a path) goes to stdout alone; what libraries print while it runs (the
    # Trainer's log dicts, written through tqdm) goes to stderr with the progress bars and the package's logs.
    results = sys.stdout
    try:
        with package_logs_on_stderr(), contextlib.redirect_stdout(sys.stderr):
            RUNNERS[args.command](args, results)
    except KeyboardInterrupt:
        print(f"elc-bert {args.command}: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if args.debug or os.environ.get("ELC_BERT_DEBUG") == "1":
            raise
        # What a user can fix in their input: exit 2, like argparse's usage errors; our checks raise `InputError` for
        # it. Anything else (a ValueError from inside torch or transformers included) is a runtime failure: exit 1.
        fixable = isinstance(error, InputError) or getattr(error, "errno", None) in DISK_FULL_ERRNOS
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


def say_where(command: str, folder) -> None:
    """Where a job's outputs went, on stderr: stdout holds the job's result (a table or JSON) alone."""
    print(f"elc-bert {command}: outputs in {folder}", file=sys.stderr)


def job_config(args):
    """The config of the job `args.command` runs, from its YAML file (or named config) and overrides."""
    from .job_configs import CONFIG_CLASSES, load_config, named_config

    folder, _ = JOBS[args.command]
    return load_config(CONFIG_CLASSES[args.command], named_config(args.config, folder), args.overrides)


# ------------------------------------------------------------------------------- the runners, one per command
# Each takes the parsed arguments and the stream its result is printed to (stdout); the job layers are imported inside
# each, so that a command loads what it runs only.


def run_pretrain(args, out) -> None:
    """`elc-bert pretrain CONFIG [key=value ...]`: the final metrics, as JSON."""
    from .training.pretrain import pretrain

    config = job_config(args)
    measure = {}
    if config.layer_budget:  # the analysis layer's measure, handed to the job (which imports no other job layer)
        from .analysis.layer_importance import leave_one_out_importance

        measure["layer_importance"] = leave_one_out_importance
    print(json.dumps(pretrain(config, **measure), indent=2), file=out)
    say_where(args.command, config.output_dir)


def run_finetune_ner(args, out) -> None:
    """`elc-bert finetune-ner CONFIG [key=value ...]`: the Markdown table of dev and test F1 per N."""
    from .training.finetune_ner import finetune_ner, results_table

    config = job_config(args)
    print(results_table(config, finetune_ner(config)), file=out)
    say_where(args.command, config.output_dir)


def run_mlm(args, out) -> None:
    """`elc-bert mlm CONFIG [key=value ...]`: the validation and test perplexity, as JSON."""
    from .training.mlm import mlm

    config = job_config(args)
    print(json.dumps(mlm(config), indent=2), file=out)
    say_where(args.command, config.output_dir)


def run_finetune_glue(args, out) -> None:
    """`elc-bert finetune-glue CONFIG [key=value ...]`: the Markdown table of the tasks' scores."""
    from .training.finetune_glue import finetune_glue, resolve_output_dir, results_table

    config = job_config(args)
    print(results_table(finetune_glue(config)), file=out)
    say_where(args.command, runs.glue_dir(resolve_output_dir(config)))


def run_prepare_corpus(args, out) -> None:
    """`elc-bert prepare-corpus INPUT ... --out DIR`: the Markdown table of what was done to each file."""
    from .data.preparation import prepare_corpus, prepared_table

    print(prepared_table(prepare_corpus(args.inputs, args.out)), file=out)
    say_where(args.command, args.out)


def run_scorecard(args, out) -> None:
    """`elc-bert scorecard RUN_DIR`: the run's row beside the paper's, as Markdown."""
    from .evaluation.scorecard import markdown, scorecard

    print(markdown(scorecard(args.run_dir)), file=out)


def run_eval_blimp(args, out) -> None:
    """`elc-bert eval-blimp MODEL --data DIR ...`: scores, writes NAME.json/.md/.png, prints the overall line. MODEL
    (a folder, Hub name or alias) loads as the causal LM its config names (or with --causal), else as a masked LM;
    weights that did not load are refused unless --allow-unloaded-weights (`pretrained.load_model`). The data is read
    first, so that a malformed file is reported before the model loads."""
    from .evaluation.babylm import load_scorer
    from .evaluation.blimp import OUTPUTS, check_report_name, evaluate_blimp, load_minimal_pairs, report_name
    from .runs.layout import check_pipeline_model_dir, record_pipeline_model

    name = report_name(args.data) if args.name is None else check_report_name(args.name, "--name")
    load_minimal_pairs(args.data)
    root = Path(args.out) if args.out else OUTPUTS  # the results root, as eval-babylm's: <model>/ below
    out_dir = check_pipeline_model_dir(root, args.model, "--out")
    loading = {"allow_unloaded_weights": args.allow_unloaded_weights}
    model, tokenizer, kind = load_scorer(args.model, "causal" if args.causal else None, args.device, **loading)
    record_pipeline_model(root, args.model)  # the inputs are good: the folder is this model's
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


def run_eval_babylm(args, out) -> None:
    """`elc-bert eval-babylm MODEL --data DIR ...`: the summary table, and where the results went."""
    from .evaluation.babylm import evaluate_babylm, resolve_data, summary_table

    task_dirs = {}
    for entry in args.task_dir:
        task, sep, folder = entry.partition("=")
        if not sep or not folder:
            raise InputError(f"--task-dir must be TASK=DIR, got {entry!r}")
        task_dirs[task] = folder
    out_dir = Path(args.out) if args.out else Path("outputs") / "eval-babylm"  # the results root: <model>/ below
    options = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    summary = evaluate_babylm(
        args.model,
        resolve_data(args.data),
        out_dir,
        args.tasks,
        pll=args.pll,
        temperature=args.temperature,
        all_checkpoints=args.all_checkpoints,
        revision=args.revision,
        all_revisions=args.all_revisions,
        task_dirs=task_dirs,
        device=args.device,
        **options,
    )
    print(summary_table(summary), file=out)
    say_where(args.command, runs.pipeline_model_dir(out_dir, args.model))


def run_collate(args, out) -> None:
    """`elc-bert collate MODEL --results DIR --track TRACK --data DIR`: the path of the submission file written."""
    from .evaluation.collate import collate

    options = dict(data=args.data, backend=args.backend, revision=args.revision, up_to=args.up_to)
    print(collate(args.results, args.model, args.track, args.out, **options), file=out)


def run_analyze(args, out) -> None:
    """`elc-bert analyze MODEL --data FILE --out DIR`: the report, as Markdown."""
    from .analysis.interventions import STRATEGIES
    from .analysis.report import REPORT_MD, analyze, load_sentences
    from .pretrained import load_model

    sentences = load_sentences(args.data, args.max_sentences)  # a bad data file is named before the model loads
    flags = dict(lr=args.recovery_lr, optimizer=args.recovery_optimizer, train=args.recovery_train)
    flags.update(reset=args.recovery_reset, tolerance_percent=args.recovery_tolerance, layers=args.recovery_layers)
    flags = {key: value for key, value in flags.items() if value is not None}  # the others keep their defaults
    if flags and args.recovery is None:
        names = ", ".join(f"--recovery-{key.split('_')[0]}" for key in flags)
        raise InputError(f"{names} given without --recovery K (the steps), which runs the recovery")
    recovery = None if args.recovery is None else {"steps": args.recovery, "seed": args.seed, **flags}
    model, tokenizer, _ = load_model(args.model, allow_unloaded_weights=args.allow_unloaded_weights)
    strategies = STRATEGIES if args.strategies is None else args.strategies
    analyze(
        model,
        tokenizer,
        sentences,
        args.out,
        strategies,
        seed=args.seed,
        metric=args.metric,
        pppl_sentences=args.pppl_sentences,
        manipulations=not args.no_manipulations,
        recovery=recovery,
    )
    print((Path(args.out) / REPORT_MD).read_text(), file=out)


def run_prune(args, out) -> None:
    """`elc-bert prune MODEL --drop L ... --out DIR`: the folder written."""
    from .analysis.pruning import prune_saved

    options = dict(drop=args.drop, keep=args.keep, overwrite=args.overwrite)
    print(prune_saved(args.model, args.out, allow_unloaded_weights=args.allow_unloaded_weights, **options), file=out)


def run_export(args, out) -> None:
    """`elc-bert export SOURCE OUT_DIR`: the folder written."""
    from .hub.export import export

    options = dict(run_dir=args.run_dir, tokenizer=args.tokenizer, repo_id=args.repo_id, license=args.license)
    options.update(sentence=args.sentence, sentence_like=args.sentence_like)
    print(export(args.source, args.out_dir, overwrite=args.overwrite, metrics=not args.no_metrics, **options), file=out)


def run_push(args, out) -> None:
    """`elc-bert push FOLDER --repo-id USER/NAME`: the URL of what was pushed (with --revisions, one per branch)."""
    from .hub.push import push, push_revisions

    if args.revisions:
        for revision, url in push_revisions(args.folder, args.repo_id, private=args.private).items():
            print(f"{revision}: {url or 'unchanged'}", file=out)
    else:
        print(push(args.folder, args.repo_id, private=args.private), file=out)


def run_local_hub(args, out) -> None:
    """`elc-bert local-hub`: serves until Ctrl-C, after printing the variables that point the Hub clients at it."""
    from .hub.local_hub import make_server

    server, _, endpoint = make_server(args.token, args.port)
    print(f"A local Hub at {endpoint}; in another shell, before elc-bert commands:", file=out)
    print(f"  export HF_ENDPOINT={endpoint} HF_TOKEN={args.token}", file=out)
    print("Ctrl-C stops it (and forgets what was pushed).", file=out, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def run_convert(args, out) -> None:
    """`elc-bert convert SOURCE OUT_DIR`: the folder written."""
    from .hub.convert import convert

    print(convert(args.source, args.out_dir, overwrite=args.overwrite), file=out)


# The runner of each command of the parser (`elc_bert_cli.build_parser`), by its name.
RUNNERS = {
    "pretrain": run_pretrain,
    "finetune-ner": run_finetune_ner,
    "mlm": run_mlm,
    "finetune-glue": run_finetune_glue,
    "prepare-corpus": run_prepare_corpus,
    "scorecard": run_scorecard,
    "eval-blimp": run_eval_blimp,
    "eval-babylm": run_eval_babylm,
    "collate": run_collate,
    "analyze": run_analyze,
    "prune": run_prune,
    "export": run_export,
    "push": run_push,
    "convert": run_convert,
    "local-hub": run_local_hub,
}


if __name__ == "__main__":
    main()
