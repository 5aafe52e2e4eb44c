"""The documentation cannot rot: `mkdocs build --strict` builds the site (a broken link, a missing page or an API
reference to a name that does not exist fails it), and every Python code block of the docs and the README runs,
page by page in one namespace, in a fresh folder that holds the repository's `data/` (tiny sizes, offline). A block
that needs what a test cannot have (the Hub, a GPU, a real corpus) follows a line `<!-- no-test: why -->` and is only
compiled."""

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, python_blocks

DOCS = REPO / "docs"


def pages() -> list[Path]:
    """The Markdown pages of the docs (not the experiments' result tables the docs link to) and the README."""
    found = [path for path in sorted(DOCS.rglob("*.md")) if "results" not in path.relative_to(DOCS).parts]
    return [REPO / "README.md", *found]


PAGES_WITH_CODE = [page for page in pages() if python_blocks(page)]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "data").symlink_to(REPO / "data")
    namespace = {"__name__": "__docs__"}
    for line, code, runs in python_blocks(page):
        compiled = compile(code, f"{page.relative_to(REPO)}:{line}", "exec")
        if runs:
            exec(compiled, namespace)


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "models" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    """The README says what the package is, how to set it up and where the docs are, in under 10 KB."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) < 10_000
    lines = text.splitlines()
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")  # the two commands come first
    for page in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / page).is_file(), page


# What ships or is read by a newcomer: the READMEs, the docs, the model-card templates, the package and its metadata.
SHIPPED_TEXT = ["README.md", "README_PYPI.md", "pyproject.toml", "CITATION.cff", "Makefile", "docs/**/*.md",
                "model_cards/*", "elc_bert/**/*.py", "configs/**/*.yaml", "scripts/*.py"]  # fmt: skip


def test_no_shipped_text_holds_a_url_that_cannot_resolve():
    """A `.invalid` host (RFC 2606) never resolves: an install line naming one fails with git's exit 128 (issue 68)."""
    found = []
    for pattern in SHIPPED_TEXT:
        for path in sorted(REPO.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(REPO)}: {url}" for url in re.findall(r"\w+://[^\s\"'`)>]*\.invalid\b", text)]
    assert found == []


# What the docs tell a reader to fetch or write themselves (BabyLM's official releases, their own text).
READERS_DATA = {"babylm_10M", "evaluation_data", "text.txt"}
DATA_OPTIONS = ("data", "inputs")  # the argparse destinations of `--data` and `prepare-corpus`'s inputs


def documented_commands(page: Path) -> list[tuple[int, str]]:
    """(line, command) of each `elc-bert ...` command of `page`: a line of a ```bash block (continuations joined,
    comments dropped) or an inline code span that passes arguments (holds `=` or ` --`)."""
    found, inside, pending = [], False, ""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            inside = not inside and line.strip() in ("```bash", "```sh")
            continue
        if not inside:
            found += [
                (number, span) for span in re.findall(r"`(elc-bert [^`]+)`", line) if "=" in span or " --" in span
            ]
            continue
        text = pending + line
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1] + " "
            continue
        pending, text = "", re.sub(r"(^|\s)#.*$", "", text).strip()
        if text.startswith("elc-bert "):
            found.append((number, text))
    return found


def is_placeholder(value: str) -> bool:
    """PATH, RUN, $G, <yours>, ...: a value the reader fills in."""
    return bool(re.search(r"\b[A-Z][A-Z_]+\b|\$|<|\.\.\.", value)) or value.startswith("USER/")


def test_every_documented_command_names_data_and_configs_that_exist(monkeypatch):
    """A command copied from the docs does not stop on a file it names (issue 68: `report_to=[tensorboard]` on
    `data_dir=data/samples` stopped on the BabyLM files of `tiny`). Each `elc-bert` job command loads its config as
    the CLI does, and every data path it reads (its `data_dir=` with the config's corpus files, `--data`,
    `prepare-corpus`'s inputs) exists from the repository's root: in the repository, in `../shared/data` where the docs
    say so (when that folder is here), or made by an earlier command of the page (`--out`, `output_dir=`)."""
    from elc_bert.job_configs import CONFIG_CLASSES, load_config, named_config
    from elc_bert.training.pretrain import _check_corpora
    from elc_bert_cli import JOBS, build_parser

    monkeypatch.chdir(REPO)
    shared = (REPO / "../shared/data").is_dir()
    parser, checked, missing = build_parser(), 0, []
    for page in pages():
        made: list[str] = []  # what earlier commands of the page write
        for line, command in documented_commands(page):
            where = f"{page.relative_to(REPO)}:{line}: {command}"
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    args = parser.parse_args([word for word in shlex.split(command)[1:] if word != "..."])
            except SystemExit:  # `elc-bert JOB --help`, `[--private]`: a usage line, not a command to run
                continue
            overrides = dict(item.partition("=")[::2] for item in getattr(args, "overrides", None) or [])
            made += [path for path in (getattr(args, "out", None), getattr(args, "out_dir", None)) if path]
            made += [overrides["output_dir"]] if "output_dir" in overrides else []
            paths = [overrides["data_dir"]] if "data_dir" in overrides else []
            for option in DATA_OPTIONS:
                value = getattr(args, option, None)
                paths += value if isinstance(value, list) else [value] if value else []
            paths = [path for path in paths if not is_placeholder(path) and Path(path).parts[0] not in READERS_DATA]
            paths = [path for path in paths if not any(path == out or path.startswith(f"{out}/") for out in made)]
            if not shared and any(path.startswith("../shared/") for path in paths):
                continue
            checked += 1
            missing += [f"{where}: {path} does not exist" for path in paths if not Path(path).exists()]
            data_dir = overrides.get("data_dir", "x")
            if args.command not in JOBS or is_placeholder(args.config) or not Path(data_dir).exists():
                continue
            if any(out.startswith(f"{data_dir}/") for out in made):  # reads a corpus an earlier command prepared
                continue
            try:
                config = load_config(
                    CONFIG_CLASSES[args.command], named_config(args.config, JOBS[args.command][0]), args.overrides
                )
                if args.command == "pretrain":
                    _check_corpora(config)
            except Exception as error:  # noqa: BLE001 - every failure is reported with its command
                missing.append(f"{where}: {error}")
    assert checked >= 10 and missing == [], "\n".join(missing)
