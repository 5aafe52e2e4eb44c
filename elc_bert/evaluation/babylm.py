"""The BabyLM 2025 zero-shot evaluation, scored as the official pipeline (`babylm/evaluation-pipeline-2025`) scores it.

Every task is a list of items; an item has candidate sentences, the completion of each that is scored (the rest of
the sentence is context), the UID it is reported under and, for the wug tests, the human preference `ratio`:

    task             folders (full / fast)                  candidates                         scored      UID
    blimp            blimp_filtered / blimp_fast            sentence_good, sentence_bad        whole       UID (file)
    supplement       supplement_filtered / supplement_fast  sentence_good, sentence_bad        whole       file
    ewok             ewok_filtered / ewok_fast              Context1 + " " + Target1, Target2  " Target"   Domain
    entity_tracking  entity_tracking / entity_tracking_fast input_prefix + each option         the option  file_N_ops
    wug_adj          wug_adj_nominalization                 its tab-separated sentences        whole       wug_adj
    wug_past         wug_past_tense                         its tab-separated sentences        whole       wug_past
    comps            comps                                  prefix_(un)acceptable + property   property    base, ...

(`file` is the file's name without .jsonl / .jsonl.gz; a BLiMP pair without UID or linguistics_term takes it for both,
as `eval-blimp` reads BLiMP-style files, one paradigm each.) The reading task (folder `reading`, its reading_data.csv)
is no list of candidates: `reading` computes it. Candidate 0 is the right one. A candidate's score is the
(pseudo-)log-likelihood of its completion's tokens (`scoring`); the prediction is the first candidate with the highest
score, so a tie counts as right, as in the official pipeline. Metrics: accuracy per UID (and per value of the other
metadata the pipeline counts), averaged over UIDs; entity tracking averages the UIDs of each of its three files, then
the files; the wug tests report Spearman's rho between the softmax of candidate 0 over the item's candidates and the
human ratio.

`read_task` checks a task's files before any model is loaded: a missing or empty field, a ratio outside [0, 1] or
fewer than two candidates name the file, the line and the field.

Everything goes into the pipeline's results tree, under one model's folder of the results root (`--out`, the
pipeline's `results/`): the predictions where the pipeline writes them and `collate_preds.py` reads them,
<results>/<model name>/<revision>/zero_shot/<mlm|causal>/<task's --task>/<data folder>/predictions.json
(`official_folder`), keyed by UID; our every metric in <results>/<model name>/<revision>/eval-babylm/<task>.json; the
summary in <results>/<model name>/summary.md and .json.
"""

import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from functools import partial
from pathlib import Path

from ..data.jsonl import read_jsonl
from ..extras import needs, require
from ..models.errors import InputError, InputNotADirectoryError, InputNotFoundError
from ..pretrained import is_hub_id
from ..runs.layout import (
    EVAL_BABYLM_RESULTS,
    EVAL_BABYLM_SUMMARY,
    PIPELINE_MODEL_RECORD,
    REVISION_RECORD,
    check_pipeline_model_dir,
    record_pipeline_model,
)
from ..scoring import DEFAULT_BATCH_TOKENS, causal_log_likelihoods, check_scorable, pseudo_log_likelihoods
from . import reading

logger = logging.getLogger(__name__)


@dataclass
class Item:
    """One evaluation item: candidates (candidate 0 is right), the scored completion of each, where it came from."""

    sentences: list[str]
    completions: list[str]
    uid: str
    where: str  # file:line
    metadata: dict = field(default_factory=dict)  # further keys the pipeline reports accuracies by
    ratio: float | None = None  # wug: the human preference for candidate 0


def _fields(record: dict, names: tuple, where: str) -> list:
    """The values of `names` in `record`; a missing, empty or non-string one raises ValueError naming file:line."""
    values = []
    for name in names:
        value = record.get(name)
        if value is None:
            raise InputError(f"{where}: field '{name}' is missing")
        if isinstance(value, str) and not value.strip():
            raise InputError(f"{where}: field '{name}' is empty")
        values.append(value)
    return values


def _file_uid(path: Path) -> str:
    """The pipeline's UID from a file: its stem (it reads `name.jsonl`; we also read `name.jsonl.gz`)."""
    return path.name.removesuffix(".gz").removesuffix(".jsonl")


SUPPLEMENT = "supplement"  # the field and term of a minimal pair that has no field (the supplement's)


def _minimal_pair(record, path: Path, where: str) -> Item:
    good, bad = _fields(record, ("sentence_good", "sentence_bad"), where)
    if "field" in record:  # BLiMP proper
        (field_name,) = _fields(record, ("field",), where)
        field_name = "syntax/semantics" if field_name == "syntax_semantics" else field_name
        uid = record.get("UID") or _file_uid(path)
        term = record.get("linguistics_term") or _file_uid(path)
    else:  # the supplement: no field or UID
        uid, field_name, term = _file_uid(path), SUPPLEMENT, SUPPLEMENT
    return Item([good, bad], [good, bad], uid, where, {"field": field_name, "linguistics_term": term})


def _ewok(record, path: Path, where: str) -> Item:
    context, target1, target2, domain = _fields(record, ("Context1", "Target1", "Target2", "Domain"), where)
    metadata = {name: record.get(key) for name, key in (("context_type", "ContextType"), ("context_contrast",
                "ContextDiff"), ("target_contrast", "TargetDiff"))}  # fmt: skip
    sentences = [f"{context} {target1}", f"{context} {target2}"]
    return Item(sentences, [f" {target1}", f" {target2}"], domain, where, metadata)


def _entity_tracking(record, path: Path, where: str) -> Item:
    prefix, options, ops = _fields(record, ("input_prefix", "options", "numops"), where)
    if not isinstance(options, list) or len(options) < 2:
        raise InputError(f"{where}: field 'options' must list at least 2 continuations, got {options!r}")
    for index, option in enumerate(options):
        if not isinstance(option, str) or not option.strip():
            raise InputError(f"{where}: field 'options' item {index} is empty")
    uid = f"{_file_uid(path)}_{ops}_ops"
    return Item([prefix + option for option in options], list(options), uid, where)


def _wug(uid: str, record, path: Path, where: str) -> Item:
    """A wug item, reported under `uid`: the pipeline's task name (`wug_adj`, `wug_past`), not the file's."""
    sentences, ratio = _fields(record, ("sentences", "ratio"), where)
    candidates = sentences.split("\t")
    if len(candidates) < 2 or not all(candidate.strip() for candidate in candidates):
        raise InputError(f"{where}: field 'sentences' must hold at least 2 non-empty tab-separated sentences")
    if not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise InputError(f"{where}: field 'ratio' must be a number in [0, 1], got {ratio!r}")
    return Item(candidates, candidates, uid, where, ratio=float(ratio))


COMPS_UIDS = {"comps_base": "base", "comps_wugs": "wugs", "comps_wugs_dist-before": "wugs_dist_before"}


def _comps(record, path: Path, where: str) -> Item:
    good, bad, phrase = _fields(record, ("prefix_acceptable", "prefix_unacceptable", "property_phrase"), where)
    uid = COMPS_UIDS.get(_file_uid(path), "wugs_dist_in_between")
    return Item([f"{good} {phrase}", f"{bad} {phrase}"], [f" {phrase}", f" {phrase}"], uid, where)


@dataclass(frozen=True)
class Task:
    """A zero-shot task: the folders that may hold it (full, fast), how a record becomes an Item (None: the reading
    task, read by `reading.read_reading`), the official pipeline's name for it (its `--task`, the folder it writes
    under), its metric ("accuracy", "entity_tracking", "spearman" or "reading") and the names of its files."""

    folders: tuple[str, ...]
    read: Callable | None
    official: str
    metric: str = "accuracy"
    suffixes: tuple[str, ...] = (".jsonl", ".jsonl.gz")


TASKS = {
    "blimp": Task(("blimp_filtered", "blimp_fast"), _minimal_pair, "blimp"),
    "supplement": Task(("supplement_filtered", "supplement_fast"), _minimal_pair, "blimp"),
    "ewok": Task(("ewok_filtered", "ewok_fast"), _ewok, "ewok"),
    "entity_tracking": Task(
        ("entity_tracking", "entity_tracking_fast"), _entity_tracking, "entity_tracking", "entity_tracking"
    ),
    "wug_adj": Task(("wug_adj_nominalization",), partial(_wug, "wug_adj"), "wug_adj", "spearman"),
    "wug_past": Task(("wug_past_tense",), partial(_wug, "wug_past"), "wug_past", "spearman"),
    "comps": Task(("comps",), _comps, "comps"),
    "reading": Task(("reading",), None, "reading", "reading", (".csv", ".csv.gz")),
}
ENTITY_TRACKING_FILES = ("regular", "ambiref", "move_contents")


def resolve_data(data: str | Path) -> Path:
    """The local folder of the evaluation data: `data` itself, or for a Hub dataset id (owner/name) that is not a
    local folder, its snapshot (downloaded once into the Hub cache)."""
    path = Path(data)
    if path.exists():
        if not path.is_dir():
            raise InputNotADirectoryError(f"{data}: the evaluation data must be a folder")
        return path

    if not is_hub_id(str(data), owner=True):  # a dataset id has an owner
        raise InputNotFoundError(f"{data}: no such folder (nor a Hub dataset id, which is owner/name)")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(data), repo_type="dataset"))


def task_files(folder: Path, task: str | None = None) -> list[Path]:
    """The files of `task` (default: a JSONL task) in `folder`, plain or gzip, sorted by name."""
    suffixes = TASKS[task].suffixes if task else Task.suffixes
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffixes))


def official_folder(task: str, folder: Path) -> Path:
    """Where the official pipeline writes `task`'s predictions.json (read from the data folder `folder`) under
    <results>/<model name>/<revision>/zero_shot/<backend>/: <its --task>/<the folder's stem>, or reading/ (its
    `sentence_zero_shot/run.py` and `reading/run.py`; `collate_preds.py` reads them there)."""
    official = TASKS[task].official
    return Path(official) if TASKS[task].metric == "reading" else Path(official) / folder.stem


def find_task_folder(task: str, data: Path) -> Path:
    """The folder of `task` under `data`: `data` itself when it holds the task's files directly under one of the
    task's folder names, else `data/<folder>`, `data/full_eval/<folder>` or `data/fast_eval/<folder>` for the
    first of the task's folder names found. For `data` = `.../fast_eval`, the pipeline's fast evaluation
    (eval_zero_shot_fast.sh) reads every task from it, the wug tests and reading too; a task it holds no copy of (our
    staged data lacks entity_tracking_fast, the wug tests and reading) comes from the `full_eval/` beside it, the
    same items where the fast set is the full one (the wug tests, reading), the full set for entity tracking."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    names = TASKS[task].folders
    if data.name in names and data.is_dir():
        return data
    for parents in ((data, data / "full_eval", data / "fast_eval"), (data.parent / "full_eval",)):
        for name in names:
            for parent in parents:
                if (parent / name).is_dir():
                    return parent / name
    raise InputNotFoundError(
        f"{data}: no folder for task {task} (looked for {', '.join(names)} in it, full_eval/ and fast_eval/)"
    )


def read_task(task: str, folder: Path) -> list[Item]:
    """The items of `task` in `folder` (or in the one file `folder`), in file and line order; bad records raise
    ValueError naming file:line."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    files = [folder] if folder.is_file() else task_files(folder, task)
    if not files:
        names = " or ".join(f"*{suffix}" for suffix in TASKS[task].suffixes)
        raise InputNotFoundError(f"{folder}: no {names} files for task {task}")
    if TASKS[task].metric == "reading":
        if len(files) > 1:
            raise InputError(f"{folder}: one reading_data.csv expected, found {', '.join(p.name for p in files)}")
        return reading.read_reading(files[0])
    items = []
    for path in files:
        for number, record in read_jsonl(path):
            items.append(TASKS[task].read(record, path, f"{path}:{number}"))
    return items


# ------------------------------------------------------------------------------------------------------ scoring
def _starts(items: list[Item], every_token: bool) -> list[int | None]:
    """Where each candidate's completion starts (a character position); with `every_token`, None (every token but the
    special ones is scored) for a candidate that is its own completion."""
    starts = [len(s) - len(c) for item in items for s, c in zip(item.sentences, item.completions)]
    return [start or None for start in starts] if every_token else starts


def check_items(tokenizer, items: list[Item], causal: bool, every_token: bool = False) -> None:
    """Refuses a candidate whose completion has no token to score (`scoring.check_scorable`, under `score_items`'s
    rule), naming its file, line and candidate: it would score 0 and win its item."""
    sentences = [sentence for item in items for sentence in item.sentences]
    starts = _starts(items, every_token)
    where = [f"{item.where}, candidate {index}" for item in items for index in range(len(item.sentences))]
    check_scorable(tokenizer, sentences, causal, starts, where)


def score_items(
    model,
    tokenizer,
    items: list[Item],
    causal: bool,
    pll: str = "original",
    temperature: float = 1.0,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
    every_token: bool = False,
) -> list[list[float]]:
    """The score (nats) of every candidate of every item: the (pseudo-)log-likelihood of its completion, the tokens
    whose character span ends after the completion starts (the pipeline's rule). With `every_token`, a candidate that
    is its own completion has every token but the special ones scored (the ELC-BERT protocol, eval-blimp's): the
    pipeline's rule leaves out a zero-width token at the start, such as a byte-level tokenizer's lone prefix space."""
    sentences = [sentence for item in items for sentence in item.sentences]
    starts = _starts(items, every_token)
    if causal:
        flat = causal_log_likelihoods(model, tokenizer, sentences, batch_tokens, progress, starts, temperature)
    else:
        flat = pseudo_log_likelihoods(model, tokenizer, sentences, batch_tokens, progress, starts, pll, temperature)
    scores, position = [], 0
    for item in items:
        scores.append(flat[position : position + len(item.sentences)])
        position += len(item.sentences)
    return scores


def chosen(scores: list[float]) -> int:
    """The predicted candidate: the first with the highest score (a tie goes to candidate 0, the right one)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def _spearman(x: list[float], y: list[float]) -> float:
    with needs("eval", "the wug tests' Spearman correlation"):
        from scipy.stats import spearmanr

    return float(spearmanr(x, y)[0])


def evaluate(task: str, items: list[Item], scores: list[list[float]]) -> dict:
    """The task's metric from the candidates' scores: {"metric", "average", "by": {key: {value: score}}}, with
    accuracies in percent (the official report's unit) and the wug tests' Spearman's rho as it is."""
    spec = TASKS[task]
    if spec.metric == "spearman":
        model_ratios = []
        for item_scores in scores:
            top = max(item_scores)
            weights = [math.exp(score - top) for score in item_scores]
            model_ratios.append(weights[0] / sum(weights))
        rho = _spearman(model_ratios, [item.ratio for item in items])
        return {"metric": "spearman", "average": rho, "by": {"UID": {items[0].uid: rho}}}
    total, correct = defaultdict(Counter), defaultdict(Counter)
    for item, item_scores in zip(items, scores):
        right = chosen(item_scores) == 0
        for key, value in {"UID": item.uid, **item.metadata}.items():
            total[key][value] += 1
            correct[key][value] += right
    by = {
        key: {value: 100.0 * correct[key][value] / count for value, count in counts.items()}
        for key, counts in total.items()
    }
    uids = by["UID"]
    if spec.metric == "entity_tracking":
        splits = {}
        for split in ENTITY_TRACKING_FILES:
            values = [accuracy for uid, accuracy in uids.items() if uid.startswith(split + "_")]
            if values:
                splits[split] = sum(values) / len(values)
        by["file"] = splits
        average = sum(splits.values()) / len(splits)
    else:
        average = sum(uids.values()) / len(uids)
    return {"metric": "accuracy", "average": average, "by": by}


def predictions(task: str, items: list[Item], scores: list[list[float]]) -> dict:
    """The official pipeline's predictions.json: {UID: {"predictions": [{"id": "<UID>_<k>", "pred": ...}]}}, the chosen
    candidate's completion (COMPS: its sentence, the completions being equal), and for the wug tests "prob", the
    softmax of candidate 0."""
    out = defaultdict(list)
    for item, item_scores in zip(items, scores):
        pick = chosen(item_scores)
        pred = item.sentences[pick] if task == "comps" else item.completions[pick]
        entry = {"id": f"{item.uid}_{len(out[item.uid])}", "pred": pred}
        if TASKS[task].metric == "spearman":
            top = max(item_scores)
            weights = [math.exp(score - top) for score in item_scores]
            entry["prob"] = weights[0] / sum(weights)
        out[item.uid].append(entry)
    return {uid: {"predictions": entries} for uid, entries in out.items()}


# ------------------------------------------------------------------------------------------------------- running
SUMMARY_COLUMNS = {  # the BabyLM 2025 report's zero-shot columns, by task
    "blimp": "BLiMP",
    "supplement": "BLiMP Supplement",
    "ewok": "EWoK",
    "entity_tracking": "Entity Tracking",
    "wug_adj": "Wug Adj. (rho)",
    "wug_past": "Wug Past (rho)",
    "comps": "COMPS",
    "reading": "Reading (Eye Tracking)",  # the reading task's two scores, as the BabyLM report shows them
    "reading_spr": "Reading (Self-Paced Reading Time)",
}


def _columns(tasks: list[str]):
    """(key in a summary row, task) of each summary column: one per task, two for the reading task."""
    for task in tasks:
        yield task, task
        if TASKS[task].metric == "reading":
            yield "reading_spr", task


def _summary_values(task: str, result: dict) -> dict:
    """The summary row's values of `task` from its result: its average, and the reading task's second score."""
    values = {task: result["average"]}
    if TASKS[task].metric == "reading":
        values["reading_spr"] = result["by"]["score"]["self_paced_reading"]
    return values


def model_folders(
    model: str | Path, all_checkpoints: bool, revision: str | None = None, all_revisions: bool = False
) -> dict[str, tuple[str, str | None]]:
    """{revision name: (model folder or Hub name, Hub commit or None)}: MODEL alone ("main"); with `all_checkpoints`
    every model of a pretraining run folder: its `checkpoint-N` folders by step, its words-seen ones (named by their
    BabyLM 2025 revision, `chck_1M`, where the rules name one, else by folder, `words-500K`) and its final model
    ("main") when it holds one; with `revision` that branch of the Hub repository MODEL, with `all_revisions` its
    BabyLM revisions in words order and main (`pretrained.hub_revisions`), each at the commit its branch holds now."""
    from .. import runs
    from ..pretrained import hub_revisions
    from ..runs.layout import revision_name, revision_words, words_checkpoints

    if revision is not None or all_revisions:
        if all_checkpoints or (revision is not None and all_revisions):
            raise InputError("choose one of --all-checkpoints, --revision and --all-revisions")
        if revision is not None and revision != "main":
            revision_words(revision)  # a name the rules do not know is refused before the Hub is asked
        if Path(model).exists() or not is_hub_id(str(model)):
            raise InputError(
                f"{model}: --revision and --all-revisions read the branches of a Hub repository (USER/NAME); for a "
                "local pretraining run use --all-checkpoints"
            )
        branches = hub_revisions(str(model))
        if revision is not None and revision not in branches:
            raise InputNotFoundError(
                f"{model} has no revision {revision} (its BabyLM revisions: {', '.join(branches) or 'none'})"
            )
        chosen = [revision] if revision is not None else list(branches)
        if not chosen:
            raise InputNotFoundError(f"{model}: no branch named as a BabyLM revision (chck_1M, ...) nor main")
        # Every revision is checked before any is scored: an empty one (a new repository's main) would fail to load
        # after the others were scored.
        empty = [name for name in chosen if not _holds_model(str(model), branches[name])]
        if revision is not None and empty:
            raise InputError(f"{model}: revision {revision} holds no model (no config.json and weights)")
        if empty:
            logger.warning(
                "%s: revision(s) %s hold no model (no config.json and weights): not scored; push the model there "
                "(main: `elc-bert push --revisions` pushes the final model) and run again",
                model,
                ", ".join(empty),
            )
        if len(empty) == len(chosen):
            raise InputNotFoundError(f"{model}: none of its revisions ({', '.join(chosen)}) holds a model")
        return {name: (str(model), branches[name]) for name in chosen if name not in empty}
    if not all_checkpoints:
        return {"main": (str(model), None)}
    folder = Path(model)
    if not folder.is_dir():
        raise InputNotADirectoryError(f"{model}: --all-checkpoints needs a pretraining run folder")
    found = {path.name: (str(path), None) for path in runs.checkpoints(folder)}
    for words, path in words_checkpoints(folder).items():
        found[revision_name(words) or path.name] = (str(path), None)
    if (folder / "config.json").is_file():
        found["main"] = (str(folder), None)
    if not found:
        raise InputNotFoundError(f"{folder}: no checkpoint-*, words-* or final model to evaluate")
    return found


def _holds_model(repo: str, commit: str) -> bool:
    """Whether the Hub repository `repo` at `commit` holds a model: its config.json and weights (the files
    `runs.fingerprint` reads in a folder)."""
    from huggingface_hub import HfApi

    files = HfApi().list_repo_files(repo, revision=commit)
    weights = [name for name in files if fnmatch(name, "model*.safetensors") or fnmatch(name, "pytorch_model*.bin")]
    return "config.json" in files and bool(weights)


def _words_seen(folder: Path) -> dict:
    from .. import runs

    path = folder / runs.WORDS_SEEN
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _revision_record(repo: str, commit: str) -> dict:
    """The words, milestone and step that `push --revisions` recorded in a revision (`REVISION_RECORD`); {} for a
    revision without the record (main, a model pushed otherwise)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        record = json.loads(Path(hf_hub_download(repo, REVISION_RECORD, revision=commit)).read_text(encoding="utf-8"))
    except EntryNotFoundError:
        return {}
    return {key: record[key] for key in ("words", "milestone", "step") if key in record}


def _row_start(source: str, commit: str | None) -> dict:
    """A summary row's step and words seen (where known) of the model at `source` (at `commit` of a Hub repo)."""
    if Path(source).is_dir():
        return {"step": _step(Path(source)), **_words_seen(Path(source))}
    return {"step": None, **(_revision_record(source, commit) if commit else {})}


def _step(folder: Path) -> int | None:
    """The training step a model folder holds: a checkpoint's, a words-seen checkpoint's, a final model's."""
    from .. import runs

    state = folder / runs.TRAINER_STATE
    if state.is_file():
        return json.loads(state.read_text(encoding="utf-8")).get("global_step")
    if "step" in _words_seen(folder):
        return _words_seen(folder)["step"]
    metrics = folder / runs.METRICS
    if metrics.is_file():
        history = json.loads(metrics.read_text(encoding="utf-8")).get("log_history", [])
        steps = [entry["step"] for entry in history if "step" in entry]
        return max(steps) if steps else None
    return None


def _write_json(path: Path, value) -> None:
    """Writes `value` whole or not at all (a kill mid-write leaves the old file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def result_key(weights: str, files: list[Path], pll: str | None, temperature: float | None) -> dict:
    """What kept scores or results depend on, compared whole before they are reused: the model's weights (a
    fingerprint: `runs.fingerprint` of its folder, a Hub name and commit, eval-blimp's digest of a model in memory),
    the data files (name and size), the PLL variant and the temperature."""
    data = [[path.name, path.stat().st_size] for path in files]
    return {"model": weights, "data": data, "pll": pll, "temperature": temperature}


def evaluate_babylm(
    model: str | Path,
    data: str | Path,
    out_dir: str | Path,
    tasks: list[str] | None = None,
    *,
    pll: str = "original",
    temperature: float = 1.0,
    all_checkpoints: bool = False,
    revision: str | None = None,
    all_revisions: bool = False,
    task_dirs: dict[str, str | Path] | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    device: str | None = None,
    progress: bool = True,
) -> dict:
    """Scores MODEL (a folder or Hub name; with `all_checkpoints`, every model of a pretraining run; with `revision`,
    that branch of a Hub repository, with `all_revisions` its BabyLM revisions and main: `model_folders`) on `tasks`
    (all of TASKS by default) read from `data` (the official `evaluation_data` layout, or a folder holding the task
    folders; `task_dirs` names a task's folder directly). Every task's files are read and checked before a model
    loads. `out_dir` is the results root (the pipeline's `results/`), and everything goes into the model's folder
    in it, <model name>/ (`runs.layout.check_pipeline_model_dir`: one holding another model's results is refused
    before anything is scored): <revision>/eval-babylm/<task>.json (every metric; kept: a rerun or a resumed run
    skips what is done with the same model weights, data, pll and temperature), the official pipeline's layout
    (<revision>/zero_shot/<backend>/`official_folder`/predictions.json and best_temperature_report.txt; the reading
    task: reading/predictions.json and its reports), summary.md / summary.json (a row per revision, a column per
    task, two for reading; written also when a revision fails, with what was scored) and, for several revisions,
    curves/<column>.png. Returns the summary."""
    data, out_dir = Path(data), Path(out_dir)
    tasks = list(tasks or TASKS)
    for task in tasks:
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if temperature <= 0:
        raise InputError(f"temperature must be positive, got {temperature}")
    if any(TASKS[task].metric in ("spearman", "reading") for task in tasks):  # said now, not after other tasks
        require("eval", what="the wug tests' Spearman correlation and the reading task's regression")
    folders = {task: Path((task_dirs or {}).get(task) or find_task_folder(task, data)) for task in tasks}
    items = {task: read_task(task, folders[task]) for task in tasks}  # every file checked before any model loads
    if (out_dir / PIPELINE_MODEL_RECORD).is_file():
        raise InputError(
            f"--out {out_dir}: a model's folder in a results tree ({PIPELINE_MODEL_RECORD}); --out is the results "
            f"root (the pipeline's results/), the model's folder goes below it: give --out {out_dir.parent}"
        )
    revisions = model_folders(model, all_checkpoints, revision, all_revisions)
    model_dir = check_pipeline_model_dir(out_dir, model)  # the pipeline's (and collate_preds.py's) results tree
    summary = {"model": str(model), "pll": pll, "temperature": temperature, "tasks": tasks, "rows": {}}
    settings = dict(pll=pll, temperature=temperature, batch_tokens=batch_tokens, device=device, progress=progress)
    try:
        for revision, (source, commit) in revisions.items():
            summary["rows"][revision] = _row_start(source, commit)
            _score_revision(out_dir, model, revision, source, commit, tasks, folders, items, summary["rows"][revision],
                            **settings)  # fmt: skip
    finally:  # what was scored is summed up, also when a later revision fails
        if any(task in row for row in summary["rows"].values() for task in tasks):
            _write_json(model_dir / f"{EVAL_BABYLM_SUMMARY}.json", summary)
            (model_dir / f"{EVAL_BABYLM_SUMMARY}.md").write_text(summary_table(summary), encoding="utf-8")
            if len(summary["rows"]) > 1:
                _curves(summary, model_dir / "curves")
    return summary


def _score_revision(
    out_dir: Path, model, revision: str, source: str, commit, tasks, folders, items, row: dict, *, pll, temperature,
    batch_tokens, device, progress
) -> None:  # fmt: skip
    """Scores `revision` of `model`, the model at `source` (at `commit` of a Hub repository), on `tasks` into the
    results tree under `out_dir`, adding each task's values to its summary `row` as it is done (`evaluate_babylm`)."""
    import torch

    from .. import runs
    from ..pretrained import load_model

    folder = runs.pipeline_model_dir(out_dir, model) / revision
    weights = runs.fingerprint(source) if Path(source).is_dir() else f"{source}@{commit}" if commit else source
    loaded = None
    for task in tasks:
        result_file = folder / EVAL_BABYLM_RESULTS / f"{task}.json"
        key = result_key(weights, task_files(folders[task], task), pll, temperature)
        if TASKS[task].metric == "reading":  # the pipeline's reading task takes neither
            key.update(pll=None, temperature=None)
        if result_file.is_file():
            kept = json.loads(result_file.read_text(encoding="utf-8"))
            if kept.get("key") == key:
                row.update(_summary_values(task, kept))
                continue
            logger.info("%s: made with other settings or weights: scored again", result_file)
        if loaded is None:
            loaded = load_model(source, lm_head=True, revision=commit)
            loaded[0].to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            if loaded[2] != "causal" and loaded[1].mask_token_id is None:
                raise InputError(f"{source}: a masked LM needs a tokenizer with a mask token")
            for each in tasks:  # every task's sentences, before the first is scored
                check = reading.check_words if TASKS[each].metric == "reading" else check_items
                check(loaded[1], items[each], loaded[2] == "causal")
            record_pipeline_model(out_dir, model)  # the inputs are good: the tree is this model's
        model_object, tokenizer, kind = loaded
        causal = kind == "causal"
        logger.info("%s %s: %d items", folder.name, task, len(items[task]))
        backend = "causal" if causal else "mlm"
        official = folder / runs.PIPELINE_ZERO_SHOT / backend / official_folder(task, folders[task])
        if TASKS[task].metric == "reading":
            surprisal = reading.surprisals(model_object, tokenizer, items[task], causal, batch_tokens, progress)
            result = reading.evaluate(items[task], *surprisal)
            _write_json(official / runs.PIPELINE_PREDICTIONS, reading.predictions(*surprisal))
            reading.write_reports(official, result)
        else:
            scores = score_items(model_object, tokenizer, items[task], causal, pll, temperature, batch_tokens, progress)
            result = evaluate(task, items[task], scores)
            _write_json(official / runs.PIPELINE_PREDICTIONS, predictions(task, items[task], scores))
            report = _report(task, result, temperature)
            (official / "best_temperature_report.txt").write_text(report, encoding="utf-8")
        result.update(task=task, revision=folder.name, items=len(items[task]), backend=backend, key=key)
        _write_json(result_file, result)
        row.update(_summary_values(task, result))


def _report(task: str, result: dict, temperature: float) -> str:
    """The official pipeline's best_temperature_report.txt for one task."""
    metric = "SPEARMAN'S RHO" if result["metric"] == "spearman" else "ACCURACY"
    lines = [f"TEMPERATURE: {temperature:.2f}", ""]
    for domain, values in result["by"].items():
        lines.append(f"### {domain.upper()} {metric}")
        lines += [f"{name}: {value:.2f}" for name, value in values.items()]
        lines.append("")
    lines += [f"### AVERAGE {metric}", f"{result['average']:.2f}", ""]
    return "\n".join(lines)


def summary_table(summary: dict) -> str:
    """A markdown row per revision (with its step and words seen where known), a column per task (accuracies in
    percent, the wug tests' Spearman's rho; the reading task's eye-tracking and self-paced reading scores, percent of
    the variance left by the baseline that surprisal explains)."""
    columns = list(_columns(summary["tasks"]))
    header = "| model | step | words | " + " | ".join(SUMMARY_COLUMNS[key] for key, _ in columns) + " |"
    lines = [header, "|---" * (len(columns) + 3) + "|"]
    digits = {"spearman": 3, "reading": 2}
    for revision, row in summary["rows"].items():
        cells = []
        for key, task in columns:
            value = row.get(key)
            cells.append("" if value is None else f"{value:.{digits.get(TASKS[task].metric, 1)}f}")
        step = "" if row.get("step") is None else str(row["step"])
        words = "" if row.get("words") is None else f"{row['words']:,}"
        lines.append(f"| {revision} | {step} | {words} | " + " | ".join(cells) + " |")
    pll = f"pll {summary['pll']}" if summary.get("pll") else ""
    return (
        f"Zero-shot BabyLM 2025 tasks of {summary['model']} ({pll}, temperature {summary['temperature']:g})\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _curves(summary: dict, folder: Path) -> None:
    """One PNG per summary column: its score against the training step of each revision that has one."""
    from ..plots import plot_curves

    folder.mkdir(parents=True, exist_ok=True)
    units = {"spearman": "Spearman's rho", "reading": "variance explained (%)"}
    for key, task in _columns(summary["tasks"]):
        points = sorted(
            (row["step"], row[key]) for row in summary["rows"].values() if row.get("step") is not None and key in row
        )
        if points:
            plot_curves(
                folder / f"{key}.png",
                {key: ([p[0] for p in points], [p[1] for p in points])},
                "training step",
                units.get(TASKS[task].metric, "accuracy (%)"),
                SUMMARY_COLUMNS[key],
            )


__all__ = [
    "TASKS",
    "Item",
    "Task",
    "chosen",
    "evaluate",
    "find_task_folder",
    "official_folder",
    "predictions",
    "read_task",
    "resolve_data",
    "result_key",
    "score_items",
    "evaluate_babylm",
    "model_folders",
    "summary_table",
]
