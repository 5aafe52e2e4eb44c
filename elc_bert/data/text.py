"""Plain-text corpora for pretraining: BabyLM-style folders and single text files (plain or .gz)."""

import gzip
from pathlib import Path


def read_lines(path: Path) -> list[str]:
    """The lines of a text file (gzip when the name ends in .gz), without line ends."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def corpus_files(source: str | Path, split: str = "train") -> list[Path]:
    """The files of one split: a single file as given, or the `*.<split>` / `*.<split>.gz` files under a folder
    (any subset of the BabyLM sources, searched recursively)."""
    source = Path(source)
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such file or folder")
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.name.removesuffix(".gz").endswith(f".{split}"))
    if not files:
        raise FileNotFoundError(f"{source}: no '*.{split}' or '*.{split}.gz' files (the {split} split is missing)")
    return files


def read_documents(paths: list[Path]) -> list[list[str]]:
    """Documents as lists of non-empty lines: a blank line ends a document, and so does the end of a file."""
    documents = []
    for path in paths:
        current = []
        for line in read_lines(path):
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                documents.append(current)
                current = []
        if current:
            documents.append(current)
    if not documents:
        raise ValueError(f"no text in {', '.join(map(str, paths))}")
    return documents
