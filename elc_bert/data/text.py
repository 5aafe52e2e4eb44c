"""Plain-text corpora for pretraining: BabyLM-style folders and single text files (plain or .gz)."""

import gzip
import logging
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..models.errors import InputError, InputNotFoundError

logger = logging.getLogger(__name__)


def read_text(path: str | Path) -> str:
    """The text of a UTF-8 file (gzip when the name ends in .gz), without a byte-order mark at its start. Bytes that
    are not UTF-8, and gzip data that is truncated or corrupt, raise ValueError naming the file and the line; a
    missing file, FileNotFoundError."""
    path = Path(path)
    compressed = path.name.endswith(".gz")
    data = bytearray()
    with (gzip.open if compressed else open)(path, "rb") as handle:
        try:  # in blocks, so that an error can say how far the file was read
            while block := handle.read(1 << 16):
                data += block
        except (EOFError, OSError, zlib.error) as error:
            # Truncated: the lines before were read correctly. A bad header or checksum: the damage can be anywhere.
            what = "truncated gzip data" if isinstance(error, EOFError) else "corrupt gzip data"
            what = what if compressed else "read error"
            line = data.count(b"\n") + 1  # the first line not read (to within a block)
            raise InputError(f"{path}, line {line}: cannot be read ({what}: {error})") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        hint = ": it is gzip data, name it .gz" if data.startswith(b"\x1f\x8b") and not compressed else ""
        raise InputError(
            f"{path}, line {line}: not UTF-8 text (byte {data[error.start]:#04x} at column "
            f"{error.start - line_start + 1}){hint}"
        ) from None


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its line end) for each line of `read_text(path)`, read at once; only a line feed
    (or carriage return + line feed) ends a line."""
    lines = read_text(path).split("\n")
    if lines[-1] == "":  # the end of the last line, or an empty file
        lines.pop()
    return ((number, line.removesuffix("\r")) for number, line in enumerate(lines, 1))


def read_lines(path: str | Path) -> list[str]:
    """The lines of a text file (gzip when the name ends in .gz), without line ends, as `str.splitlines` splits
    them; errors as in `read_text`."""
    return read_text(path).splitlines()


def files_under(folder: str | Path) -> list[Path]:
    """Every file under `folder`, searched recursively, sorted. Linked folders are searched too (`Path.rglob` before
    Python 3.13 lists a link to a folder but never looks inside); a folder met a second time (a link back up the
    tree, or to a folder searched already) is skipped with a warning, so that no file comes twice and a link cycle
    ends. A broken link is refused (it may have been a file or a folder of them: nothing here can tell), and so is a
    folder that cannot be listed."""
    folder = Path(folder)

    def unlisted(error: OSError):
        raise InputError(f"{error.filename}: a folder under {folder} that cannot be listed ({error.strerror})")

    searched = {os.path.realpath(folder): folder}
    found = []
    for root, folders, files in os.walk(folder, onerror=unlisted, followlinks=True):
        for name in sorted(folders):
            path = Path(root, name)
            first = searched.setdefault(os.path.realpath(path), path)
            if first != path:
                logger.warning("%s: skipped, a link to the folder %s, searched already", path, first)
                folders.remove(name)
        folders.sort()
        for name in files:
            path = Path(root, name)
            if path.is_symlink() and not path.exists():
                raise InputNotFoundError(
                    f"{path}: a broken symbolic link (to {path.readlink()}) in the folder {folder}: mend or remove it"
                )
            if path.is_file():
                found.append(path)
    return sorted(found)


def corpus_files(source: str | Path, split: str = "train") -> list[Path]:
    """The files of one split: a single file as given, or the `*.<split>` / `*.<split>.gz` files under a folder
    (any subset of the BabyLM sources, searched recursively, linked folders too: `files_under`)."""
    source = Path(source)
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise InputNotFoundError(f"{source}: no such file or folder")
    files = [path for path in files_under(source) if path.name.removesuffix(".gz").endswith(f".{split}")]
    if not files:
        raise InputNotFoundError(f"{source}: no '*.{split}' or '*.{split}.gz' files (the {split} split is missing)")
    return files


def file_documents(path: str | Path) -> Iterator[list[str]]:
    """The documents of one file (`documents_of_lines` of its lines); a file without text yields none."""
    return documents_of_lines(read_lines(path))


def documents_of_lines(lines: Iterable[str]) -> Iterator[list[str]]:
    """Lines as documents, lists of non-empty stripped lines: a blank line ends a document, and so does the end."""
    current = []
    for line in lines:
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            yield current
            current = []
    if current:
        yield current


def read_documents(paths: list[Path]) -> list[list[str]]:
    """The documents of the files in turn (`file_documents`); no text in any of them is an error."""
    documents = [document for path in paths for document in file_documents(path)]
    if not documents:
        raise InputError(f"no text in {', '.join(map(str, paths))}")
    return documents
