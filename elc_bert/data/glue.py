"""The BabyLM (Super)GLUE tasks and their data: one `<task>.<split>.jsonl(.gz)` file per task and split, a JSON
object per line with the task's text fields and an integer `label`.

`TASKS` and `BABYLM_ENTRIES` are the one list of tasks that fine-tuning (`elc-bert finetune-glue`) and the scorecard
both read; `task_files` finds a task's files, `text_pair` makes its inputs as the BabyLM 2025 evaluation pipeline does.
"""

from dataclasses import dataclass
from pathlib import Path

from ..extras import needs
from ..models.errors import InputError, InputNotFoundError
from .jsonl import read_jsonl


@dataclass(frozen=True)
class GlueTask:
    """One BabyLM (Super)GLUE task: its jsonl fields, number of classes and the metric it is ranked by."""

    name: str
    fields: tuple[str, ...]  # the text fields; two make a sentence pair
    num_labels: int
    metric: str  # "mcc", "f1" or "accuracy"

    @property
    def entries(self) -> list[str]:
        """The BabyLM entries its model is scored as, one per dev set: MNLI's also on the mismatched one."""
        return [self.name, "mnli-mm"] if self.name == "mnli" else [self.name]


TASKS = {
    "cola": GlueTask("cola", ("sentence",), 2, "mcc"),
    "sst2": GlueTask("sst2", ("sentence",), 2, "accuracy"),
    "mrpc": GlueTask("mrpc", ("sentence1", "sentence2"), 2, "f1"),
    "qqp": GlueTask("qqp", ("question1", "question2"), 2, "f1"),
    "mnli": GlueTask("mnli", ("premise", "hypothesis"), 3, "accuracy"),
    "qnli": GlueTask("qnli", ("question", "sentence"), 2, "accuracy"),
    "rte": GlueTask("rte", ("sentence1", "sentence2"), 2, "accuracy"),
    "boolq": GlueTask("boolq", ("question", "passage"), 2, "accuracy"),
    "multirc": GlueTask("multirc", ("paragraph", "question", "answer"), 2, "accuracy"),
    "wsc": GlueTask("wsc", ("text", "span1_text", "span2_text"), 2, "accuracy"),
}
# The BabyLM score list, in its order: MNLI-mm is the mismatched evaluation of the MNLI model, not a task of its own.
BABYLM_ENTRIES = [entry for task in TASKS.values() for entry in task.entries]
SUFFIXES = (".jsonl", ".jsonl.gz")


def task_files(task: GlueTask, folders: list[Path]) -> tuple[Path, dict[str, Path]]:
    """The task's training file and the dev file of each of its entries (`GlueTask.entries`), the first found in
    `folders`; a missing one raises InputNotFoundError naming the task and the paths looked for."""

    def find(name: str, split: str) -> Path:
        """The first `<name>.<split>.jsonl(.gz)` in `folders`."""
        paths = (folder / f"{name}.{split}{suffix}" for folder in folders for suffix in SUFFIXES)
        path = next((path for path in paths if path.is_file()), None)
        if path is None:
            expected = " or ".join(str(folders[0] / f"{name}.{split}{suffix}") for suffix in SUFFIXES)
            searched = f" (also searched {', '.join(map(str, folders[1:]))})" if len(folders) > 1 else ""
            what = "training" if split == "train" else "validation"
            raise InputNotFoundError(
                f"{task.name}: no {what} file: looked for {expected}{searched}; add it, or leave {task.name} out of "
                "tasks"
            )
        return path

    return find(task.name, "train"), {entry: find(entry, "valid") for entry in task.entries}


def read_task_file(path: str | Path, task: GlueTask, limit: int | None = None) -> list[dict]:
    """The rows of one jsonl(.gz) file: a JSON object per line with the task's text fields (strings) and an integer
    `label` in [0, num_labels). Blank lines are skipped; a bad line raises ValueError naming the file and line."""
    rows = []
    for line_number, row in read_jsonl(path):
        if limit is not None and len(rows) >= limit:
            break
        for key in task.fields:
            if not isinstance(row.get(key), str):
                raise InputError(f"{path}, line {line_number}: field '{key}' is missing or not a string")
        label = row.get("label")
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < task.num_labels:
            raise InputError(
                f"{path}, line {line_number}: 'label' must be an integer in [0, {task.num_labels}), got {label!r}"
            )
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no examples in the file")
    return rows


def text_pair(task: GlueTask, row: dict) -> tuple[str, str | None]:
    """The (first, second) segments of a row, as the BabyLM 2025 evaluation pipeline makes them (its
    finetune/dataset.py): the task's fields in order, but MultiRC asks "Question: {question} Answer: {answer}" before
    its paragraph and WSC 'Does "{span2_text}" refer to "{span1_text}" in this passage?' before its text."""
    if task.name == "multirc":
        return f"Question: {row['question']} Answer: {row['answer']}", row["paragraph"]
    if task.name == "wsc":
        return f'Does "{row["span2_text"]}" refer to "{row["span1_text"]}" in this passage?', row["text"]
    return row[task.fields[0]], (row[task.fields[1]] if len(task.fields) > 1 else None)


def encode(tokenizer, task: GlueTask, rows: list[dict], max_length: int):
    """A datasets.Dataset of input_ids / attention_mask (/ token_type_ids) / labels, unpadded."""
    with needs("data", "GLUE data"):  # here: the scorecard imports this module for the task list alone
        import datasets

    firsts, seconds = zip(*(text_pair(task, row) for row in rows))
    pairs = None if seconds[0] is None else list(seconds)
    encoded = tokenizer(list(firsts), pairs, truncation="longest_first", max_length=max_length)
    return datasets.Dataset.from_dict({**encoded, "labels": [row["label"] for row in rows]})
