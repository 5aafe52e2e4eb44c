"""The package's imports point one way (docs/development.md, "Layout"): cli -> the job layers (training, evaluation,
analysis, hub) -> the shared layer (job_configs, models, data, runs, plots, scoring, ...); models import nothing else of
the package, and no job layer imports another. A name the package shares (a run's file names, the Auto classes, the
fusion kinds) has one owner."""

import ast
import inspect
import re
from pathlib import Path

import pytest
from helpers import REPO, TINY
from torch import nn

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError, LayerFusionConfig, runs
from elc_bert.models import configuration_layer_fusion, modeling_layer_fusion
from elc_bert.models.transformers_compat import PreTrainedModel

PACKAGE = Path(__file__).resolve().parents[1] / "elc_bert"
JOB_LAYERS = {"training", "evaluation", "analysis", "hub"}


def imported_parts(path: Path) -> set[str]:
    """The top-level parts of elc_bert (folder or module name) that the module at `path` imports."""
    here = path.relative_to(PACKAGE).parts[:-1]  # its package inside elc_bert
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
                names = [target] if node.module else [target + [alias.name] for alias in node.names]
            elif node.module and node.module.startswith("elc_bert"):
                names = [node.module.split(".")[1:]]
            else:
                continue
            parts.update(name[0] for name in names if name)
    return parts


def test_imports_point_one_way():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        parts = imported_parts(path) - {layer}
        if layer == "models" and parts:
            wrong.append(f"{path.relative_to(PACKAGE)} imports {sorted(parts)}")
        if layer in JOB_LAYERS and parts & JOB_LAYERS:
            wrong.append(f"{path.relative_to(PACKAGE)} imports the job layer(s) {sorted(parts & JOB_LAYERS)}")
        if layer not in JOB_LAYERS | {"cli", "__init__"} and parts & (JOB_LAYERS | {"cli"}):
            wrong.append(
                f"{path.relative_to(PACKAGE)} ({layer}) imports upward: {sorted(parts & (JOB_LAYERS | {'cli'}))}"
            )
    assert not wrong, "\n".join(wrong)


def test_saved_job_configs_are_read_through_their_config_classes():
    """A run's saved config has one reader, `job_configs.saved_config` (its job's typed config class): no module
    outside `job_configs` parses YAML itself, so that the card and export cannot read a key as a raw string."""
    found = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "job_configs"
        and re.search(r"^\s*(import yaml|from yaml )", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert not found, f"parse YAML outside job_configs: {found}"


def test_fusion_kinds_are_read_from_their_registry():
    """What a fusion kind is (its name, description, whether it has depth weights) is answered by
    `models.configuration_layer_fusion.FUSIONS`: outside the model that computes them, no code compares the kind
    with a string literal or keeps its own table of kinds."""
    pattern = re.compile(r"""fusion\s*(==|!=)\s*["']|["']dwatt["']\s*:""")
    owners = {"models/configuration_layer_fusion.py", "models/modeling_layer_fusion.py"}
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() not in owners
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_one_registration_per_fusion_kind_covers_the_model():
    """A fusion kind is one `Fusion` entry in `FUSIONS`, carrying all that the config and the model read: each entry
    names a fusion module of `modeling_layer_fusion.py` with the one fusion `forward`, every fusion module there is
    some kind's, the config accepts exactly the registry's kinds, and the model compares no kind names
    (`if config.fusion == "last"`): a new kind is one class and one entry."""
    fusions = configuration_layer_fusion.FUSIONS
    modules = {
        kind: getattr(modeling_layer_fusion, getattr(fusion, "module", ""), None) for kind, fusion in fusions.items()
    }
    wrong = [f"{kind}: no module" for kind, module in modules.items() if module is None]
    base = getattr(modeling_layer_fusion, "FusionModule", nn.Module)
    defined = [
        value
        for value in vars(modeling_layer_fusion).values()
        if isinstance(value, type)
        and issubclass(value, base)
        and not issubclass(value, PreTrainedModel)
        and value.__module__ == modeling_layer_fusion.__name__
        and value is not base
    ]
    wrong += [f"{module.__name__}: the module of no kind" for module in defined if module not in modules.values()]
    signature = inspect.signature(base.forward)
    wrong += [
        f"{kind}: {module.__name__}.forward{inspect.signature(module.forward)}, not forward{signature}"
        for kind, module in modules.items()
        if module is not None and inspect.signature(module.forward) != signature
    ]

    for kind in fusions:
        LayerFusionConfig(backbone_config=ElcBertConfig(**TINY), fusion=kind)
    with pytest.raises(InputError, match=re.escape(f"fusion must be one of {tuple(fusions)}")):
        LayerFusionConfig(backbone_config=ElcBertConfig(**TINY), fusion="no_such_kind")

    path = PACKAGE / "models" / "modeling_layer_fusion.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            operands += [item for op in operands if isinstance(op, (ast.Tuple, ast.List, ast.Set)) for item in op.elts]
            if any(isinstance(op, ast.Constant) and op.value in fusions for op in operands):
                wrong.append(f"{path.name}:{node.lineno} compares kind names: {ast.unparse(node)}")
    assert not wrong, "\n".join(wrong)


def test_no_module_outside_data_builds_pretraining_batches():
    """What goes into a model is made in `data/` (the jobs orchestrate): outside it, no module defines a dataset,
    sampler or collator (a class deriving from a `*Dataset` / `*Sampler` class, or named `*Collator`), reaches into
    `torch.utils.data`, or defines a function or class of one of `data.pretraining_batches`' names (a second home for
    batch-making)."""
    from elc_bert.data import pretraining_batches

    batch_names = {
        name
        for name, value in vars(pretraining_batches).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == pretraining_batches.__name__
    }
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE)
        if name.parts[0] == "data":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (
                node.name.endswith("Collator")
                or any(ast.unparse(base).endswith(("Dataset", "Sampler")) for base in node.bases)
            ):
                found.append(f"{name}:{node.lineno} defines {node.name}")
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in batch_names:
                found.append(f"{name}:{node.lineno} defines {node.name}, which data.pretraining_batches owns")
            if isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.utils.data":
                found.append(f"{name}:{node.lineno} uses torch.utils.data")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.utils.data"):
                found.append(f"{name}:{node.lineno} imports {node.module}")
    assert not found, "\n".join(found)


def test_run_file_names_and_auto_classes_have_one_owner():
    """A name the package shares is defined once and imported: no module types another's file name
    (trainer_state.json, eval/, report.md/.json) or imports another module's private name (`_AUTO_CLASSES`)."""
    import ast

    from elc_bert.analysis import report
    from elc_bert.hub.export import family_of
    from elc_bert.models import AUTO_CLASSES

    assert family_of(ElcBertForMaskedLM) == (ElcBertConfig, AUTO_CLASSES[ElcBertConfig])
    owners = {
        runs.TRAINER_STATE: "elc_bert/runs/layout.py",
        runs.EVAL: "elc_bert/runs/layout.py",
        report.REPORT_MD: "elc_bert/analysis/report.py",
        report.REPORT_JSON: "elc_bert/analysis/report.py",
    }
    typed, private = [], []
    for path in sorted([*(REPO / "elc_bert").rglob("*.py"), *(REPO / "scripts").glob("*.py")]):
        name = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # The pip extras (`extras.EXTRAS`, named in `needs("eval", ...)` / `require("eval", ...)`) are not run
        # folders, although one of them is called "eval" too.
        extras = {
            id(argument)
            for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("needs", "require")
            for argument in call.args
        }
        if name == "elc_bert/extras.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in extras:
                owner = owners.get(node.value) or owners.get(node.value.split("/")[0] if "/" in node.value else None)
                if owner is not None and owner != name:
                    typed.append(f"{name}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("elc_bert")):
                private += [
                    f"{name}:{node.lineno} {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert typed == [] and private == []


def test_test_files_share_code_only_through_helpers():
    """A test file imports no other test file (nor conftest): what several share lives in helpers.py."""
    tests = Path(__file__).resolve().parent
    found = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name} imports {name}" for name in names if name.startswith(("test_", "conftest"))]
    assert not found, "\n".join(found)


def test_minimal_pairs_have_one_engine():
    """A minimal pair is read, checked, scored, decided and its kept scores keyed in one place, `evaluation/babylm.py`
    (`read_task`, `check_items`, `score_items`, `chosen`, `result_key`); eval-blimp's report is a view over the engine's
    per-pair scores. So no other evaluation module calls the sentence scorers (or their check) itself, and blimp.py
    reads no JSON Lines of its own and goes through the engine's steps."""
    scorers = {"pseudo_log_likelihoods", "causal_log_likelihoods", "check_scorable"}
    engine = {"read_task", "check_items", "score_items", "chosen", "result_key"}
    wrong = []
    for path in sorted((PACKAGE / "evaluation").glob("*.py")):
        if path.name == "babylm.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        wrong += [f"{path.name} uses {name}" for name in sorted(used & scorers)]
        if path.name == "blimp.py":
            wrong += ["blimp.py uses read_jsonl"] if "read_jsonl" in used else []
            wrong += [f"blimp.py does not use the engine's {name}" for name in sorted(engine - used)]
    assert not wrong, "\n".join(wrong)


def test_the_cli_imports_point_one_way_and_a_job_is_declared_once():
    """The `elc-bert` command is a parser (`elc_bert_cli`, which imports nothing of the package, so that `--help`
    answers at once), the package's runners (`elc_bert.cli`, which imports the parser) and the console script
    (`elc_bert_main`, the one module that imports both): the parser imports nothing of the runners, not even inside a
    function, and the package nothing of the console script. Each question about a command has one table: the parser
    declares it; `elc_bert.cli.RUNNERS` runs it (no `if` chain on its name); a job is declared once, by its config
    class's `job` (`job_configs.CONFIG_CLASSES` derives from the classes, `runs.config_file` names the file by rule):
    no module keeps a table keyed by the jobs but the runners'."""
    from collections import Counter

    import elc_bert_cli
    from elc_bert import cli
    from elc_bert.job_configs import CONFIG_CLASSES

    def imported(path: Path) -> set[str]:
        """The absolute imports of the module at `path`, at any depth of its code: modules and `module.name`s."""
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        return names

    def is_runner(name: str) -> bool:  # the runners' module, or the console script that imports it
        return name.split(".")[:2] == ["elc_bert", "cli"] or name.split(".")[0] == "elc_bert_main"

    wrong = [
        f"elc_bert_cli.py imports {name}" for name in sorted(imported(REPO / "elc_bert_cli.py")) if is_runner(name)
    ]
    wrong += [
        f"{path.relative_to(REPO)} imports the console script"
        for path in sorted(PACKAGE.rglob("*.py"))
        if any(name.split(".")[0] == "elc_bert_main" for name in imported(path))
    ]
    assert not wrong, "\n".join(wrong)

    commands = set(elc_bert_cli.build_parser()._subparsers._group_actions[0].choices)
    assert set(getattr(cli, "RUNNERS", {})) == commands, "each command of the parser has a runner, and nothing else"
    assert set(elc_bert_cli.JOBS) == set(CONFIG_CLASSES)
    assert all(name == cls.job for name, cls in CONFIG_CLASSES.items())
    keys, compared = [], []  # (command, file) of each dict key that names a command; comparisons with one
    for name in [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))]:
        for node in ast.walk(ast.parse((PACKAGE / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                keys += [
                    (key.value, name) for key in node.keys if isinstance(key, ast.Constant) and key.value in commands
                ]
            if isinstance(node, ast.Compare) and name in ("cli.py", "runs/layout.py", "job_configs/__init__.py"):
                operands = [node.left, *node.comparators]
                if any(isinstance(operand, ast.Constant) and operand.value in commands for operand in operands):
                    compared.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert not compared, "an if chain on the command: " + "; ".join(compared)
    assert Counter(command for command, name in keys if name == "cli.py") == Counter(commands)  # RUNNERS alone
    assert [key for key in keys if key[1] != "cli.py"] == []  # no other table of the jobs


def test_finetune_ner_results_are_read_through_their_dataclasses():
    """finetune-ner's results.json has one owner, `job_configs.ner_results` (the dataclasses the job writes): no other
    module of the package or of scripts/ reads or writes one of its keys as a string (`entry["ci95"]`,
    `summary.get("truncated_sentences")`, `"test_mean" in entry`, a key in a table of keys) or names an N's entry
    (`summary[f"n{shots}"]`): the job, the results table, the card and the scripts read fields."""
    from elc_bert.job_configs import ner_results

    entry = ner_results.ShotResults([0.5, 0.6], 0.55, 0.1, 2, [0.4, 0.5], 0.45, 0.1, "n8/trial1/model")
    record = ner_results.NerResults({}, {8: entry}, {"dev": 1}, 16, {"train": 10}).to_json()
    keys = {key for key in record if not key.startswith("n8")} | set(record["n8"])
    # Words that other files' keys share (a GLUE summary's "model" and "mean", a corpus batch's "sentences"): the
    # reads of ours among them are found by their neighbours (`ci95` beside `mean`) and the N's key.
    keys -= {"config", "model", "mean", "sentences"}
    assert {"best_dev_f1", "ci95", "test_mean", "truncated_sentences"} <= keys
    owner = PACKAGE / "job_configs" / "ner_results.py"
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "scripts").glob("*.py")]):
        if path == owner:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        code = {id(node) for node in _code_strings(tree)}
        for node in ast.walk(tree):
            key = node.slice if isinstance(node, ast.Subscript) else None
            if isinstance(key, ast.JoinedStr):  # f"n{shots}"
                key = key.values[0]
                n_entry = isinstance(key, ast.Constant) and key.value == "n"
            else:  # "n8"
                n_entry = isinstance(key, ast.Constant) and re.fullmatch(r"n\d+", str(key.value))
            named = id(node) in code and node.value in keys
            if named or n_entry:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_whether_a_name_is_a_hub_id_has_one_rule():
    """ "Is this a Hub id (owner/name)" is answered by `models.loading.is_hub_id` alone: no other module counts the
    slashes of a name (`name.count("/") == 1`, `"/" in repo_id`) to decide it."""
    pattern = re.compile(r"""\.count\(["']/["']\)|["']/["'] (not )?in """)
    owner = PACKAGE / "models" / "loading.py"
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != owner
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of `tree` that are code, not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_babylm_tasks_are_one_registration_each():
    """A BabyLM task is one `Task` in `evaluation.babylm.TASKS`: how it is read, checked, scored and summed up, its
    predictions, summary columns and part of a submission are its methods and fields. So no module of the package
    compares a task's name, submission key or kind of metric with a string literal (`task == "comps"`,
    `part.key in ("wug_adj", "wug_past")`, `metric == "reading"`) or keys a table by the kind of metric, and outside
    the registration no code names a task's data folder (collate's own table of parts was one)."""
    from elc_bert.evaluation.babylm import TASKS

    tasks = list(TASKS.values())
    words = {task.name for task in tasks} | {task.key for task in tasks} | {task.metric for task in tasks}
    folders = {folder for task in tasks for folder in task.folders} - words
    folders |= {task.collated(fast).as_posix() for task in tasks for fast in (False, True)} - words
    # The kinds that are no task's name ("accuracy" also keys GLUE's tables of metrics)
    kinds = {task.metric for task in tasks} - {task.name for task in tasks} - {"accuracy"}
    assert {"reading", "spearman", "blimp_supplement"} <= words and "blimp_fast" in folders and "spearman" in kinds
    registry = PACKAGE / "evaluation" / "babylm.py"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(PACKAGE)
        registration = set()
        for node in ast.walk(tree):
            if path == registry and isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "TASKS":
                registration = {id(inner) for inner in ast.walk(node)}
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                collections = [op for op in operands if isinstance(op, (ast.Tuple, ast.List, ast.Set))]
                operands += [item for op in collections for item in op.elts]
                if any(isinstance(op, ast.Constant) and op.value in words for op in operands):
                    found.append(f"{where}:{node.lineno} compares task names: {ast.unparse(node)}")
            if isinstance(node, ast.Dict) and any(
                isinstance(key, ast.Constant) and key.value in kinds for key in node.keys
            ):
                found.append(f"{where}:{node.lineno} keys a table by the kind of metric: {ast.unparse(node)[:80]}")
        found += [
            f"{where}:{node.lineno} names the data folder {node.value!r}"
            for node in _code_strings(tree)
            if node.value in folders and id(node) not in registration
        ]
    assert not found, "\n".join(found)


def test_babylm_rules_are_stated_once():
    """The BabyLM 2025 rules (the text tracks, the words seen of the checkpoint revisions each is scored on, and the
    revisions' names) are stated in `runs/layout.py` alone: no other module of the package builds a revision name
    (an f-string starting with `REVISION_PREFIX`) or lists tracks (a tuple, list, set or dict of two or more, and of
    nothing else), and collate's revisions are the rules' (`track_revisions`, `revision_name`)."""
    from elc_bert.runs import layout

    assert layout.TRACKS == ("strict-small", "strict", "interaction")
    for track in layout.TRACKS:
        assert layout.track_revisions(track) == [layout.revision_name(w) for w in layout.TRACK_WORDS[track]]
    owner = PACKAGE / "runs" / "layout.py"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == owner:
            continue
        where = path.relative_to(PACKAGE)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith(layout.REVISION_PREFIX):
                found.append(f"{where}:{node.lineno} builds a revision name: {ast.unparse(node)}")
            items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
            items = node.keys if isinstance(node, ast.Dict) else items
            names = [item.value for item in items if isinstance(item, ast.Constant)]
            if len(names) >= 2 and set(names) <= set(layout.TRACKS):  # (model sizes named after tracks hold others)
                found.append(f"{where}:{node.lineno} lists tracks: {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


def test_what_a_training_run_measured_is_read_through_its_dataclass():
    """metrics.json (pretrain, mlm) has one owner, `job_configs.training_metrics.TrainingMetrics`, which the jobs write
    and the card, eval-babylm and the scripts read: no other module of the package or of scripts/ opens the file
    (`METRICS`, but for `runs`, which names it, and export, which copies it) or reads its log by key; and a
    finetune-ner trial's result.json is read as `ner_results.TrialResult`, not by its keys (`"mean_depth_weights" in
    result`)."""
    owners = {"elc_bert/job_configs/training_metrics.py", "elc_bert/job_configs/ner_results.py"}
    names_the_file = {"elc_bert/runs/layout.py", "elc_bert/runs/__init__.py", "elc_bert/hub/export.py"}
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "scripts").glob("*.py")]):
        where = path.relative_to(REPO).as_posix()
        if where in owners:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typed = {"log_history"} | ({runs.METRICS} if where != "elc_bert/runs/layout.py" else set())
        found += [f"{where}:{node.lineno} reads {node.value!r}" for node in _code_strings(tree) if node.value in typed]
        for node in ast.walk(tree):
            named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if named == "METRICS" and where not in names_the_file:
                found.append(f"{where}:{node.lineno} opens metrics.json: {ast.unparse(node)}")
            keys = [node.slice] if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) else []
            keys += [node.left] if isinstance(node, ast.Compare) else []
            if any(isinstance(key, ast.Constant) and key.value == "mean_depth_weights" for key in keys):
                found.append(f"{where}:{node.lineno} reads a trial result by key: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_a_trial_or_task_result_is_read_and_written_by_its_dataclass():
    """result.json, a finetune-ner trial's or a finetune-glue entry's, is written and read by its dataclass
    (`ner_results.TrialResult`, `glue_results.GlueResult`): no other function that names the file (`runs.RESULT`)
    parses or writes JSON or reads a result's key (`result["metric"]`)."""
    owners = {"job_configs/ner_results.py", "job_configs/glue_results.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in owners or where.startswith("runs/"):
            continue
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            nodes = list(ast.walk(function))
            if not any(getattr(node, "id", getattr(node, "attr", None)) == "RESULT" for node in nodes):
                continue
            for node in nodes:
                parses = isinstance(node, ast.Attribute) and node.attr in (
                    "loads",
                    "dumps",
                    "load",
                    "dump",
                    "_read_json",
                )
                parses |= isinstance(node, ast.Name) and node.id == "_read_json"
                by_key = isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                by_key = by_key and isinstance(node.slice, ast.Constant)
                if parses or (by_key and isinstance(node.slice.value, str)):
                    found.append(
                        f"{where}:{node.lineno} ({function.name}) handles result.json itself: {ast.unparse(node)}"
                    )
    assert not found, "\n".join(found)


def test_a_json_file_is_read_by_one_reader_that_names_it():
    """A JSON file on disk (a run's record, a library's config, a user's result) is read by `data.jsonl.read_json`,
    which names the file and what it should have been when it does not read: no other module parses a file's JSON
    (`json.loads(path.read_text())`, `json.load(handle)`), but collate, which notes every problem of a results tree
    in one list, and the reference checkpoints' config check (models/ loads before data/)."""
    allowed = {"data/jsonl.py", "evaluation/collate.py", "models/reference_checkpoints.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            parsed = node.args[0] if node.func.attr == "loads" and node.args else None
            reads_file = isinstance(parsed, ast.Call) and getattr(parsed.func, "attr", None) == "read_text"
            if node.func.attr == "load" and getattr(node.func.value, "id", None) == "json" or reads_file:
                found.append(f"{where}:{node.lineno} parses a file's JSON itself: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_files_and_folders_are_written_whole_by_one_helper():
    """Writing a file or a folder whole or not at all (into a scratch one, then renamed into place) is `runs.saved`'s
    (`replace_file`, `replacing_folder`, `replacing_files`): no other module of the package renames or moves anything
    (`Path.rename`, `Path.replace`, `os.rename`, `os.replace`, `shutil.move`), but eval-blimp, which sets another
    model's partial scores aside (`.stale`) rather than writing anything into place."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "runs/saved.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            function = node.func if isinstance(node, ast.Call) else None
            if not isinstance(function, ast.Attribute):
                continue
            module = function.value.id if isinstance(function.value, ast.Name) else None
            moves = module in ("os", "shutil") and function.attr in ("rename", "renames", "replace", "move")
            # Path's take one argument; str.replace takes two, dataclasses.replace its changes as keywords
            path_move = function.attr in ("rename", "replace") and len(node.args) == 1 and not node.keywords
            if moves or (path_move and module != "dataclasses"):
                found.setdefault(where, []).append(ast.unparse(node))
    assert not found, found


def test_eval_blimp_loads_and_places_its_model_through_eval_babylms_driver():
    """The device a scored model goes on (the GPU where there is one) is chosen in one place, eval-babylm's driver
    `babylm.load_scorer`, which eval-blimp's runner loads through: no other function of the package asks
    `torch.cuda.is_available()`."""
    from elc_bert import cli

    owner, found = ("evaluation/babylm.py", "load_scorer"), []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef) or (where, function.name) == owner:
                continue
            asks = [
                node for node in ast.walk(function) if isinstance(node, ast.Attribute) and node.attr == "is_available"
            ]
            found += [f"{where}:{node.lineno} ({function.name}) chooses a device" for node in asks]
    assert not found, "\n".join(found)
    runner = inspect.getsource(cli.run_eval_blimp)
    assert "load_scorer(" in runner and "load_model(" not in runner


def test_eval_blimp_keeps_scores_and_places_results_by_eval_babylms_rules():
    """Scores kept for reuse are read and written in one place, eval-babylm's `babylm.kept_result` / `keep_result`
    (eval-babylm's per task, eval-blimp's per set): no other function reads a result's `key`. And a model's results
    folder is `runs.layout.pipeline_model_dir`'s, checked and recorded by its `check_pipeline_model_dir` /
    `record_pipeline_model`, for eval-blimp as for eval-babylm and finetune-glue: no other module names a model's
    folder (a Hub name's / made __)."""
    from elc_bert import cli

    owners = {
        ("evaluation/babylm.py", "kept_result"),
        ("hub/local_hub.py", "do_POST"),  # the Hub's commit lines
        ("training/finetune_glue.py", "resolve_output_dir"),  # a run folder for a Hub model, not a results tree
    }
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef) or (where, function.name) in owners:
                continue
            for node in ast.walk(function):
                reads = node.slice if isinstance(node, ast.Subscript) else None
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
                    reads = node.args[0]
                if isinstance(reads, ast.Constant) and reads.value == "key":
                    found.append(f"{where}:{node.lineno} ({function.name}) reads a kept key: {ast.unparse(node)}")
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "replace" and len(node.args) == 2:
                    if [getattr(arg, "value", None) for arg in node.args] == ["/", "__"]:
                        found.append(f"{where}:{node.lineno} ({function.name}) names a model's folder")
    assert not found, "\n".join(found)
    runner = inspect.getsource(cli.run_eval_blimp)
    assert "check_pipeline_model_dir(" in runner and "record_pipeline_model(" in runner


def test_the_card_asks_the_job_rather_than_switching_on_it():
    """What a run read and measured, what its card says of its training and limits, and the model it started from
    are answered by its config class (`corpora`, `measures`, `training_text`, `limitations`, `start_model`,
    `results_class`, read through `job_configs.Run`): no module of hub/ asks which job a run was (an `isinstance` of a
    job config class) or names a job by a string literal (`job == "finetune-ner"`, `for job in ("mlm", ...)`)."""
    from elc_bert.job_configs import CONFIG_CLASSES

    classes = {cls.__name__ for cls in CONFIG_CLASSES.values()}
    found = []
    for path in sorted((PACKAGE / "hub").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(PACKAGE)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                named = {getattr(part, "id", getattr(part, "attr", None)) for part in ast.walk(node.args[1])}
                if named & classes:
                    found.append(f"{where}:{node.lineno} asks the job: {ast.unparse(node)}")
        found += [
            f"{where}:{node.lineno} names the job {node.value!r}"
            for node in _code_strings(tree)
            if node.value in CONFIG_CLASSES
        ]
    assert {"pretrain", "mlm", "finetune-ner"} <= set(CONFIG_CLASSES) and not found, "\n".join(found)
