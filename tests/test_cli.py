"""The `elc-bert` command's one error handler: a bad input is one line naming it and exit 2, any other failure one
line and exit 1, `--debug` (or ELC_BERT_DEBUG=1) the traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from elc_bert import InputError
from elc_bert.cli import main
from elc_bert.models.errors import InputNotFoundError


def _config(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def test_a_bad_config_is_one_line_and_exit_2(tmp_path, capsys):
    config = _config(tmp_path, f"output_dir: {tmp_path / 'run'}\ntrain_files: [a]\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", config, "max_step=7"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("elc-bert pretrain: error:") and "max_step" in err and "--debug" in err


def test_a_missing_input_folder_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path / "no-such-run"), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "no-such-run" in capsys.readouterr().err


def test_a_runtime_failure_exits_1(tmp_path, capsys, monkeypatch):
    import elc_bert.evaluation.scorecard as scorecard

    def broken(run_dir):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(scorecard, "scorecard", broken)
    with pytest.raises(SystemExit) as exit_info:
        main(["scorecard", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "failed (RuntimeError): the disk is full" in capsys.readouterr().err


@pytest.mark.parametrize(
    "error, code, shown",
    [
        (ValueError("too many values to unpack"), 1, "failed (ValueError): too many values to unpack"),
        (KeyError("hidden_size"), 1, "failed (KeyError)"),
        (FileNotFoundError("/tmp/cache/x.arrow"), 1, "failed (FileNotFoundError)"),
        (InputError("scores.json, line 3: no accuracy"), 2, "error: scores.json, line 3: no accuracy"),
        (InputNotFoundError("no such run"), 2, "error: no such run"),
    ],
)
def test_only_input_errors_exit_2(tmp_path, capsys, monkeypatch, error, code, shown):
    """Exit 2 says "your input is wrong": only the package's `InputError` (raised by its own checks) gets it; a
    ValueError or a missing file raised inside a library is a failure (exit 1) with its type shown."""
    import elc_bert.evaluation.scorecard as scorecard

    def broken(run_dir):
        raise error

    monkeypatch.setattr(scorecard, "scorecard", broken)
    with pytest.raises(SystemExit) as exit_info:
        main(["scorecard", str(tmp_path)])
    assert exit_info.value.code == code
    assert shown in capsys.readouterr().err


def test_a_malformed_yaml_config_is_an_input_error_naming_file_and_line(tmp_path, capsys):
    config = _config(tmp_path, "output_dir: run\ntrain_files: [a,\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", config])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and "job.yaml" in err and "line 3" in err


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback(tmp_path, monkeypatch, how):
    config = _config(tmp_path, f"output_dir: {tmp_path / 'run'}\ntrain_files: [a]\n")
    arguments = ["pretrain", config, "max_step=7"]
    if how == "flag":
        arguments.insert(0, "--debug")
    else:
        monkeypatch.setenv("ELC_BERT_DEBUG", "1")
    with pytest.raises(ValueError, match="max_step"):
        main(arguments)


def test_named_configs_are_found_by_name(tmp_path, monkeypatch):
    """`elc-bert finetune-ner conll03_fewshot_dwatt`: a config name (no path, no .yaml) is looked up among the
    package's named configs of that job, wherever the command runs; a path stays a path."""
    from elc_bert.job_configs import named_config

    monkeypatch.chdir(tmp_path)
    found = named_config("conll03_fewshot_dwatt", "ner")
    assert found.name == "conll03_fewshot_dwatt.yaml" and found.parent.name == "ner" and found.is_file()
    assert named_config("small-cpu", "pretrain").is_file()
    assert named_config("my.yaml", "ner") == Path("my.yaml")  # a file to be, named as such
    with pytest.raises(FileNotFoundError, match=r"no_such_config.*conll03_fewshot_dwatt"):
        named_config("no_such_config", "ner")
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune-ner", "no_such_config"])
    assert exit_info.value.code == 2


def test_a_misspelt_model_key_is_refused_before_training(tmp_path, capsys):
    """`model.layer_combinaton=residual` once trained ELC-BERT without a word."""
    config = _config(tmp_path, f"output_dir: {tmp_path / 'run'}\ntrain_files: [a]\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", config, "model.layer_combinaton=residual"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "model.layer_combinaton" in err and "did you mean model.layer_combination" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "job, module, class_name",
    [
        ("pretrain", "pretrain", "PretrainConfig"),
        ("finetune-ner", "finetune_ner", "FinetuneNerConfig"),
        ("mlm", "mlm", "MlmConfig"),
        ("finetune-glue", "finetune_glue", "FinetuneGlueConfig"),
    ],
)
def test_job_help_lists_every_config_key(capsys, job, module, class_name):
    import dataclasses
    import importlib

    config_class = getattr(importlib.import_module(f"elc_bert.training.{module}"), class_name)
    with pytest.raises(SystemExit) as exit_info:
        main([job, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for field in dataclasses.fields(config_class):
        assert f"\n  {field.name}: " in out, field.name
        assert field.metadata["help"].split()[0] in out, field.name  # its meaning, from the dataclass
    assert "learning_rate: float > 0, default" in out and "the peak learning rate" in out
    assert "training: dict, default {}" in out and "TrainingArguments" in out


def test_pretrain_help_shows_types_defaults_and_meaning(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "-h"])
    out = capsys.readouterr().out
    assert "  output_dir: str, required\n" in out
    assert "  max_steps: int >= 1, default 1000\n      optimizer steps" in out
    assert "  optimizer: {lamb, adamw}, default lamb\n" in out
    assert "  model: dict, default {}\n      ElcBertConfig overrides" in out


@pytest.mark.parametrize(
    "arguments, flag",
    [
        (["eval-blimp", "no-such-model", "--data", "d", "--batch-tokens", "0"], "--batch-tokens"),
        (["eval-blimp", "no-such-model", "--data", "d", "--max-pairs-per-set", "-3"], "--max-pairs-per-set"),
        (["analyze", "no-such-model", "--data", "d", "--out", "o", "--max-sentences", "0"], "--max-sentences"),
        (["analyze", "no-such-model", "--data", "d", "--out", "o", "--pppl-sentences", "-1"], "--pppl-sentences"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_counts_below_one_are_refused_by_flag(capsys, monkeypatch, arguments, flag):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be >= 1" in capsys.readouterr().err


def test_only_the_cli_prints():
    """The library logs through `logging` (a caller decides what is shown); only cli.py prints, what the user asked
    for: results tables, the overall line, the folder written."""
    import ast

    package = Path(__file__).resolve().parents[1] / "elc_bert"
    printing = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                printing.append(f"{path.relative_to(package)}:{node.lineno}")
    assert printing == []


def test_the_package_logs_show_on_stderr_while_a_command_runs(tmp_path, capsys, monkeypatch):
    """What the library logs at INFO and above (a resumed evaluation, a skipped task) reaches the user of the command,
    on stderr, apart from the results on stdout; the handler goes when the command ends."""
    import logging

    import elc_bert.evaluation.scorecard as scorecard

    real = scorecard.scorecard

    def logging_scorecard(run_dir):
        logging.getLogger("elc_bert.evaluation.scorecard").info("reading %s", run_dir)
        return real(run_dir)

    monkeypatch.setattr(scorecard, "scorecard", logging_scorecard)
    handlers = list(logging.getLogger("elc_bert").handlers)
    main(["scorecard", str(tmp_path)])
    captured = capsys.readouterr()
    assert f"reading {tmp_path}\n" in captured.err and "reading" not in captured.out
    assert "| n/a | n/a | n/a | n/a | n/a |" in captured.out
    assert logging.getLogger("elc_bert").handlers == handlers


WIKIANN_SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikiann"


@pytest.mark.parametrize(
    "job, config, data_dir",
    [
        ("mlm", "wikitext2_dwatt", None),
        ("finetune-ner", "wikiann_en_n100_dwatt", WIKIANN_SAMPLE),
        ("finetune-glue", "tiny", "glue"),
    ],
)
def test_a_mistyped_model_folder_is_named_before_anything_is_written(tmp_path, capsys, job, config, data_dir):
    """`model=` naming a local folder that does not exist is an input error naming it (exit 2), found before the
    job writes its run folder (a half-made folder would then count as that job's run), never sent to the Hub."""
    if data_dir == "glue":
        data_dir = tmp_path / "glue-data"
        data_dir.mkdir()
    out = tmp_path / "out"
    overrides = [f"model={tmp_path / 'no' / 'such' / 'model'}", f"output_dir={out}", f"data_dir={data_dir or tmp_path}"]
    with pytest.raises(SystemExit) as exit_info:
        main([job, config, *overrides])
    assert exit_info.value.code == 2
    assert f"model {tmp_path / 'no' / 'such' / 'model'}: no such folder" in capsys.readouterr().err
    assert not out.exists()


def test_version_is_written_once_and_printed(capsys):
    """`elc-bert --version` prints the version the installed distribution carries, which pyproject reads from
    `elc_bert.__version__` (the one place it is written)."""
    from importlib.metadata import version

    import elc_bert
    from elc_bert.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"elc-bert {elc_bert.__version__}" == f"elc-bert {version('elc_bert')}"


def test_a_checkout_run_without_installing_still_knows_its_version(monkeypatch):
    """Without distribution metadata (`PYTHONPATH=.` in a clone), the parser reads the version from
    elc_bert/__init__.py as text instead of failing every command."""
    import importlib.metadata

    import elc_bert
    import elc_bert_cli

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(elc_bert_cli, "version", missing)
    assert elc_bert_cli.package_version() == elc_bert.__version__
    assert elc_bert_cli.build_parser().parse_args(["scorecard", "run"]).command == "scorecard"


def test_stdout_holds_the_result_alone_while_libraries_print_to_stderr(tmp_path, capsys, monkeypatch):
    """What a library prints during a job (the Trainer writes its log dicts through tqdm to stdout) goes to stderr,
    so that `elc-bert pretrain ... > result.json` holds the result alone."""
    import json

    import elc_bert.training.pretrain as pretrain_module

    def training(config):
        print({"loss": 6.25, "grad_norm": 1.5, "learning_rate": 0.01, "epoch": 0.5})  # as the Trainer's bar writes it
        return {"eval_loss": 5.5}

    monkeypatch.setattr(pretrain_module, "pretrain", training)
    main(["pretrain", "tiny", f"output_dir={tmp_path / 'run'}", "data_dir=data/samples"])
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"eval_loss": 5.5}
    assert "'loss': 6.25" in captured.err and "outputs in" in captured.err


def test_help_and_version_answer_without_importing_the_package():
    """`elc-bert --help`, `--version` and a usage error are the parser's alone (`elc_bert_cli`, which the console
    script `elc_bert_main` runs first): neither the package nor torch nor transformers is imported (importing them
    takes seconds)."""
    script = (
        "import sys, elc_bert_main\n"
        "for argv in (['--help'], ['--version'], ['pretrain'], ['no-such-command']):\n"
        "    try:\n"
        "        elc_bert_main.main(argv)\n"
        "    except SystemExit as done:\n"
        "        print('EXIT', done.code)\n"
        "print('IMPORTED', sorted(m for m in ('elc_bert', 'torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert [line for line in done.stdout.splitlines() if line.startswith("EXIT")] == [
        "EXIT 0",
        "EXIT 0",
        "EXIT 2",
        "EXIT 2",
    ]
    assert "IMPORTED []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "usage: elc-bert" in done.stdout and "required: config" in done.stderr


def test_analyze_strategies_are_checked_by_the_parser_and_listed_in_help():
    """`elc-bert analyze --strategies skipp` was refused only after the model and data had loaded (18 s); the parser
    now refuses it at once, without importing the package, and `analyze --help` lists the choices."""
    script = (
        "import sys, elc_bert_main\n"
        "try:\n"
        "    elc_bert_main.main(['analyze', 'm', '--data', 'd', '--out', 'o', '--strategies', 'skip', 'skipp'])\n"
        "except SystemExit as done:\n"
        "    print('EXIT', done.code)\n"
        "print('IMPORTED', sorted(m for m in ('elc_bert', 'torch', 'transformers') if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "EXIT 2" in done.stdout and "IMPORTED []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "argument --strategies: invalid choice: 'skipp'" in done.stderr
    import elc_bert_cli

    help_text = elc_bert_cli.build_parser()._subparsers._group_actions[0].choices["analyze"].format_help()
    assert all(strategy in help_text for strategy in elc_bert_cli.PAINTERS_STRATEGIES)
    assert elc_bert_cli.build_parser().parse_args(["analyze", "m", "--data", "d", "--out", "o"]).strategies is None


def test_the_parser_knows_the_painters_strategies_of_the_analysis():
    """One source of truth: the parser's list (it imports nothing of the package) is the analysis's."""
    import elc_bert_cli
    from elc_bert.analysis.interventions import STRATEGIES

    assert elc_bert_cli.PAINTERS_STRATEGIES == STRATEGIES


def test_collate_tracks_and_backends_are_checked_by_the_parser():
    """`elc-bert collate --track strict-smal` (or a misspelt --backend) is refused by the parser at once, naming the
    flag and the choices, without importing the package; its choices are the collation's own."""
    script = (
        "import sys, elc_bert_main\n"
        "base = ['collate', 'm', '--results', 'r', '--data', 'd']\n"
        "for extra in (['--track', 'strict-smal'], ['--track', 'strict', '--backend', 'mlmm']):\n"
        "    try:\n"
        "        elc_bert_main.main(base + extra)\n"
        "    except SystemExit as done:\n"
        "        print('EXIT', done.code)\n"
        "print('IMPORTED', sorted(m for m in ('elc_bert', 'torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.count("EXIT 2") == 2 and "IMPORTED []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        "argument --track: invalid choice: 'strict-smal' (choose from " in done.stderr and "interaction" in done.stderr
    )
    assert "argument --backend: invalid choice: 'mlmm'" in done.stderr

    import elc_bert_cli
    from elc_bert.evaluation.collate import BACKENDS
    from elc_bert.runs.layout import TRACKS

    assert (elc_bert_cli.COLLATE_TRACKS, elc_bert_cli.COLLATE_BACKENDS) == (TRACKS, BACKENDS)


def test_the_console_script_parses_then_runs_the_command(tmp_path, capsys):
    """`elc_bert_main.main`, the `elc-bert` console script, runs a parsed command in the package (`elc_bert.cli`)."""
    import elc_bert_main

    elc_bert_main.main(["scorecard", str(tmp_path)])
    assert "| n/a | n/a | n/a | n/a | n/a |" in capsys.readouterr().out


def test_the_citation_and_the_changelog_carry_the_version():
    """CITATION.cff's version is the package's, and the changelog has a section for it."""
    import yaml
    from helpers import REPO

    import elc_bert

    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["version"] == elc_bert.__version__ and citation["cff-version"] == "1.2.0"
    assert {"title", "authors", "message", "license"} <= set(citation)
    assert f"## [{elc_bert.__version__}]" in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_collate_refuses_an_incomplete_tree_in_one_line_and_prints_the_file_written(tmp_path, capsys, monkeypatch):
    """`elc-bert collate`: a results tree missing revisions exits 2 naming them, writing nothing; a complete one
    prints the submission file's path alone on stdout."""
    import elc_bert.evaluation.collate as collate_module

    (tmp_path / "results" / "tiny" / "main" / "zero_shot" / "mlm").mkdir(parents=True)
    (tmp_path / "evaluation_data" / "fast_eval").mkdir(parents=True)
    arguments = ["collate", "tiny", "--results", str(tmp_path / "results"), "--track", "strict-small"]
    arguments += ["--data", str(tmp_path / "evaluation_data"), "--up-to", "chck_2M"]
    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("elc-bert collate: error: cannot collate")
    # main's 16 files (8 zero-shot, AoA, 7 fine-tuning) and the 2 revisions; the first dozen shown
    assert "18 problem(s)" in err and "blimp_filtered/predictions.json: missing (blimp, revision main)" in err
    assert "and 6 more" in err
    assert list((tmp_path / "results" / "tiny").iterdir()) == [tmp_path / "results" / "tiny" / "main"]

    calls = []

    def fake_collate(results_dir, model, track, out_file=None, **options):
        calls.append((results_dir, model, track, out_file, options))
        return Path(results_dir) / model / "all_full_preds_and_fast_scores_mlm.json"

    monkeypatch.setattr(collate_module, "collate", fake_collate)
    main([*arguments, "--backend", "mlm"])
    assert capsys.readouterr().out.strip() == str(
        tmp_path / "results" / "tiny" / "all_full_preds_and_fast_scores_mlm.json"
    )
    options = {"data": str(tmp_path / "evaluation_data"), "backend": "mlm", "revision": "main", "up_to": "chck_2M"}
    assert calls == [(str(tmp_path / "results"), "tiny", "strict-small", None, options)]
