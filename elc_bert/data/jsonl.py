"""JSON Lines files (gzip when the name ends in .gz), read with the file and line named in every error."""

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
