"""JSON Lines files (gzip when the name ends in .gz), read with the file and line named in every error."""

import gzip
import json
from collections.abc import Iterator
from pathlib import Path


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yields (line number, object) for each non-blank line. A line that is not a JSON object, or a file that cannot
    be read, raises ValueError naming the file and line; a missing file, FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    opener = gzip.open if path.name.endswith(".gz") else open
    line_number = 0
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, 1):  # noqa: B007  (used in the error below)
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}, line {line_number}: not valid JSON ({error.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}, line {line_number}: expected a JSON object, got {type(row).__name__}")
                yield line_number, row
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}, line {line_number + 1}: cannot be read ({error})") from None
