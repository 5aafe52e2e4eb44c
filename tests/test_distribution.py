"""What `pip install elc_bert` gets: the wheel ships the package's data files, and installed with its base
requirements alone (no extras) it loads, runs and saves the models, while a job that needs an extra says which.

The base environment is a fresh virtualenv holding the wheel and exactly the distributions its base requirements
pull in (taken from this environment, so the test needs no network): datasets, matplotlib, scikit-learn, scipy and
seqeval are absent there.
"""

import email.message
import email.parser
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO, python_blocks
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

EXTRA_MODULES = ("datasets", "matplotlib", "sklearn", "scipy", "seqeval", "peft")


# What a build of the repository does not read: these top-level folders, and caches anywhere.
NOT_SOURCES = {".git", ".venv", "build", "runs", "outputs", "results", "site"}
CACHES = shutil.ignore_patterns("*.egg-info", "__pycache__", ".*_cache")


def not_sources(folder: str, names: list[str]) -> set[str]:
    return set(CACHES(folder, names)) | (NOT_SOURCES & set(names) if Path(folder) == REPO else set())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the repository's sources: nothing is written into the repository (no build/
    folder whose files of removed modules would end up in the wheel, no race with a test reading the tree)."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=not_sources)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (found,) = out.glob("elc_bert-*.whl")
    return found


def wheel_metadata(wheel: Path) -> email.message.Message:
    """The wheel's METADATA (core metadata headers, then the long description)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(metadata).decode())


def base_distributions(wheel: Path) -> set[str]:
    """The distributions the wheel's base requirements (no extras) pull in, recursively, as installed here."""
    pending = list(wheel_metadata(wheel).get_all("Requires-Dist") or [])
    found = set()
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        pending += importlib.metadata.distribution(name).requires or []
    return found


@pytest.fixture(scope="module")
def base_env(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel and its base requirements only; returns its python."""
    root = tmp_path_factory.mktemp("base-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for name in base_distributions(wheel):
        distribution = importlib.metadata.distribution(name)
        entries = {Path(str(file)).parts[0] for file in distribution.files or [] if ".." not in Path(str(file)).parts}
        for entry in entries:
            source = Path(distribution.locate_file(entry))
            if source.exists() and not (site / entry).exists():
                (site / entry).symlink_to(source)
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    return python


def test_the_wheel_ships_the_model_card_templates_and_named_configs(wheel):
    """`pip install elc_bert` users export too, and run the shipped configs by name."""
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.name for p in (REPO / "model_cards").glob("*.md"))
    assert "model_card.md" in templates
    assert all(f"elc_bert/hub/model_cards/{name}" in names for name in templates)
    configs = sorted(p.relative_to(REPO / "configs").as_posix() for p in (REPO / "configs").glob("*/*.yaml"))
    assert "ner/conll03_fewshot_dwatt.yaml" in configs
    assert all(f"elc_bert/configs/{name}" in names for name in configs)
    command = {"elc_bert_cli.py", "elc_bert_main.py"}  # the `elc-bert` command's parser and console script
    assert "elc_bert/py.typed" in names and command <= names
    modules = {name for name in names if name.endswith(".py")}
    sources = {path.relative_to(REPO).as_posix() for path in (REPO / "elc_bert").rglob("*.py")}
    assert modules - command == sources  # every module, and none that no longer exists


def repository_url() -> str | None:
    """pyproject.toml's `[project.urls]` Repository: the one place the repository's URL is written (None while the
    repository has no public URL)."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^Repository = "([^"]+)"', pyproject, re.MULTILINE)
    return found and found.group(1)


def test_the_wheel_describes_the_package_and_names_its_repository(wheel):
    """The wheel's description opens with what the package is (not with a clone's `make demo`), and its metadata
    names the repository, the URL that README's install lines and the model cards' (`install_instructions`) use."""
    metadata = wheel_metadata(wheel)
    url = repository_url()
    if url is None:
        assert not metadata.get_all("Project-URL")
    else:
        assert f"Repository, {url}" in metadata.get_all("Project-URL")
    description = metadata.get_payload()
    title, first = [line for line in description.splitlines() if line.strip()][:2]
    assert title == "# elc_bert" and "Hugging Face Transformers models" in first, description[:300]
    assert "make demo" not in description
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for text in (readme, description):
        installs = re.findall(r'pip install "elc_bert(?:\[all\])? @ git\+(\S+)"', text)
        assert set(installs) == ({url} if url else set()), installs
        assert "pip install ." in text  # what works without a repository URL: a clone
    for path in [REPO / "README.md", *(REPO / "model_cards").glob("*.md"), *(REPO / "elc_bert").rglob("*.py")]:
        assert "repository's URL>" not in path.read_text(encoding="utf-8"), path


@pytest.mark.slow
def test_the_readme_quick_tour_and_the_description_run_from_the_installed_wheel(base_env, wheel, tmp_path):
    """The README's quick tour and the wheel description's code run where only the wheel is (no data/ folder of a
    clone), with its base requirements alone."""
    (tmp_path / "description.md").write_text(wheel_metadata(wheel).get_payload(), encoding="utf-8")
    for page in (REPO / "README.md", tmp_path / "description.md"):
        code = "\n".join(block for _, block, runs in python_blocks(page) if runs)
        assert code, page
        work = tmp_path / page.stem
        work.mkdir()
        done = subprocess.run([str(base_env), "-c", code], capture_output=True, text=True, timeout=600, cwd=work)
        assert done.returncode == 0, (page, done.stderr[-3000:])


MODEL_ONLY = """
import importlib.util, sys, tempfile
import torch
import elc_bert
from transformers import AutoModel, AutoModelForMaskedLM
from elc_bert import ElcBertConfig, ElcBertForMaskedLM, LayerFusionForTokenClassification

assert [m for m in {extras!r} if importlib.util.find_spec(m) is not None] == [], "an extra is installed"
torch.manual_seed(0)
model = ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny", vocab_size=64)).eval()
ids = torch.randint(5, 64, (2, 9))
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    loaded = AutoModelForMaskedLM.from_pretrained(folder).eval()
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert type(AutoModel.from_pretrained(folder)).__name__ == "ElcBertModel"
    fusion = LayerFusionForTokenClassification.from_backbone(folder, fusion="dwatt", num_labels=3)
    assert fusion(ids).logits.shape == (2, 9, 3)
# An LTG-BERT (no alpha heatmap to draw) exports with its card; the job configs import, for a job's --help.
from elc_bert.data.tokenizer import save_tokenizer, train_tokenizer
from elc_bert.hub.export import export
import elc_bert.job_configs

tokenizer = train_tokenizer(["the cat sat on the mat .", "a dog ran ."] * 20, vocab_size=64, min_frequency=1)
ltg = ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny", vocab_size=len(tokenizer), layer_combination="residual"))
with tempfile.TemporaryDirectory() as folder:
    ltg.save_pretrained(folder + "/model")
    save_tokenizer(tokenizer, folder + "/model")
    assert (export(folder + "/model", folder + "/hub") / "README.md").is_file()
try:
    from elc_bert.training.pretrain import pretrain
except ModuleNotFoundError as error:
    assert isinstance(error, elc_bert.InputError) and 'elc_bert[data]' in str(error), error
else:
    raise AssertionError("the pretraining job imported without datasets")
print("ok")
"""


@pytest.mark.slow
def test_the_base_install_loads_runs_and_saves_models_and_a_job_names_its_extra(base_env, tmp_path):
    """In the base environment: models build, run, save and load; an LTG-BERT exports with its card; a job's --help
    lists its config keys; a job itself names the extra it needs."""
    done = subprocess.run(
        [str(base_env), "-c", MODEL_ONLY.format(extras=EXTRA_MODULES)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    help_text = subprocess.run(
        [str(base_env.parent / "elc-bert"), "pretrain", "-h"], capture_output=True, text=True, timeout=600
    )
    assert help_text.returncode == 0 and "train_files" in help_text.stdout, help_text.stderr[-3000:]
    # The command line says which extra a job needs, as an input error (exit 2), before any work.
    job = subprocess.run(
        [str(base_env.parent / "elc-bert"), "pretrain", "tiny", "data_dir=."],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert job.returncode == 2, job.stderr[-3000:]
    assert 'pip install "elc_bert[data]"' in job.stderr and "datasets" in job.stderr
    assert list(tmp_path.iterdir()) == []
