"""The documentation cannot rot: `mkdocs build --strict` builds the site (a broken link, a missing page or an API
reference to a name that does not exist fails it), and every Python code block of the docs and the README runs,
page by page in one namespace, in a fresh folder that holds the repository's `data/` (tiny sizes, offline). A block
that needs what a test cannot have (the Hub, a GPU, a real corpus) follows a line `<!-- no-test: why -->` and is only
compiled."""

import re
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
