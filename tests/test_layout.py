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
