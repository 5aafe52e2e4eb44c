"""JSON files and JSON Lines files (gzip when the name ends in .gz), read with the file (and line) named in every
error: the one reader of the JSON a run, a library or a user left on disk."""

import json
from collections.abc import Iterator
from pathlib import Path

from ..models.errors import InputError, InputNotFoundError
from .text import numbered_lines


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yields (line number, object) for each non-blank line. A line that is not a JSON object, or a file that cannot
    be read (not UTF-8, truncated or corrupt gzip data), raises ValueError naming the file and the line where it can;
    a missing file, FileNotFoundError. A byte-order mark at the start of the file is dropped."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"{path}: no such file")
    for line_number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}, line {line_number}: not valid JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}, line {line_number}: expected a JSON object, got {type(row).__name__}")
        yield line_number, row


def read_json(path: str | Path, what: str, *, fields: tuple[str, ...] = (), kind: type = dict, fix: str = ""):
    """The JSON value in the file `path`: of type `kind` (an object by default) holding `fields`. Where it is not
    (cut short, damaged, not UTF-8, edited by hand), InputError "PATH: not WHAT (why); FIX". A missing file is the
    caller's to look for first (FileNotFoundError)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
        why = None if isinstance(value, kind) else f"a JSON {type(value).__name__}, not {kind.__name__}"
        why = why or next((f"no {name!r}" for name in fields if name not in value), None)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        why = str(error)
    if why is not None:
        raise InputError(f"{path}: not {what} ({why})" + (f"; {fix}" if fix else ""))
    return value
