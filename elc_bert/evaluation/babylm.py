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
(`Task.official_folder`), keyed by UID; our every metric in
<results>/<model name>/<revision>/eval-babylm/<task>.json; the summary in <results>/<model name>/summary.md and .json.
"""

import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import ClassVar

from .. import runs
from ..data.jsonl import read_json, read_jsonl
from ..extras import needs, require
from ..models.errors import InputError, InputNotADirectoryError, InputNotFoundError
from ..pretrained import is_hub_id
from ..runs.layout import (
    EVAL_BABYLM_RESULTS,
    EVAL_BABYLM_SUMMARY,
    PIPELINE_PREDICTIONS,
    REVISION_RECORD,
    check_pipeline_model_dir,
    read_words_seen,
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
    """A zero-shot task of candidates, whole: what eval-babylm (read, check, score, predictions, summary) and `collate`
    (the part of a submission, its fast score) ask of it; `TASKS` registers each once. The subclasses are the kinds
    whose metric differs (entity tracking, the wug tests, reading).

    `name`: eval-babylm's; `folders`: the data folders that may hold it, full then fast (one where the fast set is
    the full one); `official`: the official pipeline's name for it (its `--task`, the folder it writes under);
    `column`: its summary column; `reader`: how a record becomes an Item (record, path, "file:line"); `key`: its key
    in a submission (default: its name); `answer`: the fast data's field holding the right answer (collate's fast
    accuracy); `on_revisions`: the checkpoint revisions are scored on its fast set; `fast_from_full`: the fast set is
    (part of) the full one, so collate reads it from the full_eval/ folder where the fast copy is absent;
    `pred_is_sentence`: predictions.json's "pred" is the chosen sentence, not its completion (COMPS: they are equal).
    """

    name: str
    folders: tuple[str, ...]
    official: str
    column: str
    reader: Callable | None = None
    key: str = ""
    answer: str | None = None
    on_revisions: bool = True
    fast_from_full: bool = False
    pred_is_sentence: bool = False

    metric: ClassVar[str] = "accuracy"  # the kind of metric ("accuracy", "entity_tracking", "spearman", "reading")
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".jsonl.gz")  # the names of its files
    digits: ClassVar[int] = 1  # the summary's decimals
    unit: ClassVar[str] = "accuracy (%)"  # the curves' axis
    report_metric: ClassVar[str] = "ACCURACY"  # best_temperature_report.txt's
    needs_eval: ClassVar[bool] = False  # scored with the `eval` extra (scipy)

    def __post_init__(self):
        if not self.key:
            object.__setattr__(self, "key", self.name)

    def read(self, files: list[Path], folder: Path) -> list[Item]:
        """The items of its `files` (of `folder`), in file and line order; bad records raise InputError (file:line)."""
        return [self.read_record(record, path, f"{path}:{n}") for path in files for n, record in read_jsonl(path)]

    def read_record(self, record: dict, path: Path, where: str) -> Item:
        return self.reader(record, path, where)

    def official_folder(self, folder: Path) -> Path:
        """Where the official pipeline writes its predictions.json (read from the data folder `folder`) under
        <results>/<model name>/<revision>/zero_shot/<backend>/: <its --task>/<the folder's stem> (its
        `sentence_zero_shot/run.py`; `collate_preds.py` reads them there)."""
        return Path(self.official) / folder.stem

    def collated(self, fast: bool) -> Path:
        """The folder `official_folder` gives the final model's predictions (full set) or a revision's (fast set)."""
        return self.official_folder(Path(self.folders[-1] if fast else self.folders[0]))

    def check(self, tokenizer, items: list, causal: bool) -> None:
        check_items(tokenizer, items, causal)

    def result_key(self, weights: str, files: list[Path], pll: str | None, temperature: float | None) -> dict:
        return result_key(weights, files, pll, temperature)

    def score(
        self, model, tokenizer, items: list, causal: bool, official: Path, *, pll, temperature, batch_tokens, progress
    ) -> dict:
        """Scores `items`, writes the pipeline's outputs into `official` and returns the result (`evaluate`)."""
        scores = score_items(model, tokenizer, items, causal, pll, temperature, batch_tokens, progress)
        result = self.evaluate(items, scores)
        _write_json(official / PIPELINE_PREDICTIONS, self.predictions(items, scores))
        (official / "best_temperature_report.txt").write_text(self.report(result, temperature), encoding="utf-8")
        return result

    def evaluate(self, items: list[Item], scores: list[list[float]]) -> dict:
        """Its metric from the candidates' scores: {"metric", "average", "by": {key: {value: score}}}, accuracies in
        percent (the official report's unit), averaged over UIDs."""
        by = _accuracies(items, scores)
        return {"metric": "accuracy", "average": sum(by["UID"].values()) / len(by["UID"]), "by": by}

    def predictions(self, items: list[Item], scores: list[list[float]]) -> dict:
        """The official pipeline's predictions.json: {UID: {"predictions": [{"id": "<UID>_<k>", "pred": ...}]}}."""
        out = defaultdict(list)
        for item, item_scores in zip(items, scores):
            out[item.uid].append({"id": f"{item.uid}_{len(out[item.uid])}", **self.prediction(item, item_scores)})
        return {uid: {"predictions": entries} for uid, entries in out.items()}

    def prediction(self, item: Item, item_scores: list[float]) -> dict:
        pick = chosen(item_scores)
        return {"pred": item.sentences[pick] if self.pred_is_sentence else item.completions[pick]}

    def report(self, result: dict, temperature: float) -> str:
        """The official pipeline's best_temperature_report.txt."""
        lines = [f"TEMPERATURE: {temperature:.2f}", ""]
        for domain, values in result["by"].items():
            lines.append(f"### {domain.upper()} {self.report_metric}")
            lines += [f"{name}: {value:.2f}" for name, value in values.items()]
            lines.append("")
        lines += [f"### AVERAGE {self.report_metric}", f"{result['average']:.2f}", ""]
        return "\n".join(lines)

    def columns(self) -> list[tuple[str, str]]:
        """(key in a summary row, title) of each of its summary columns."""
        return [(self.name, self.column)]

    def summary_values(self, result: dict) -> dict:
        """Its values in a summary row, from its result."""
        return {self.name: result["average"]}

    def fast_scores(self, scorer, value: dict, where: Path) -> dict | None:
        """collate's fast score of a revision's predictions.json `value` (at `where`) per UID, against the fast data
        that `scorer` (`collate`'s) reads and notes the problems of: the accuracy."""
        scores = {}
        for uid, entry in value.items():
            data = scorer.file(self, self.fast_file(uid))
            answers = self.fast_answers(scorer.records(data), uid)
            scores[uid] = scorer.accuracy(entry["predictions"], answers, data, where, uid)
        return scores

    def fast_file(self, uid: str) -> str:
        return uid  # one file per UID

    def fast_answers(self, records: list[dict], uid: str) -> list:
        return [record.get(self.answer) for record in records]


class EntityTrackingTask(Task):
    """Entity tracking: the accuracy averages the UIDs of each of its three files, then the files; its fast set is the
    regular file's items, by their number of operations."""

    metric = "entity_tracking"
    files = ("regular", "ambiref", "move_contents")

    def evaluate(self, items: list[Item], scores: list[list[float]]) -> dict:
        by = _accuracies(items, scores)
        splits = {}
        for split in self.files:
            values = [accuracy for uid, accuracy in by["UID"].items() if uid.startswith(split + "_")]
            if values:
                splits[split] = sum(values) / len(values)
        by["file"] = splits
        return {"metric": "accuracy", "average": sum(splits.values()) / len(splits), "by": by}

    def fast_file(self, uid: str) -> str:
        return self.files[0]

    def fast_answers(self, records: list[dict], uid: str) -> list:
        items = [record for record in records if f"{self.files[0]}_{record.get('numops')}_ops" == uid]
        return [record["options"][0] if record.get("options") else None for record in items]


class WugTask(Task):
    """A wug test: Spearman's rho between the softmax of candidate 0 over the item's candidates ("prob" in
    predictions.json) and the human ratio; its items are reported under the task's name."""

    metric = "spearman"
    digits = 3
    unit = "Spearman's rho"
    report_metric = "SPEARMAN'S RHO"
    needs_eval = True

    def read_record(self, record: dict, path: Path, where: str) -> Item:
        return _wug(self.name, record, path, where)

    def evaluate(self, items: list[Item], scores: list[list[float]]) -> dict:
        rho = spearman([_first_share(item_scores) for item_scores in scores], [item.ratio for item in items])
        return {"metric": "spearman", "average": rho, "by": {"UID": {items[0].uid: rho}}}

    def prediction(self, item: Item, item_scores: list[float]) -> dict:
        return {**super().prediction(item, item_scores), "prob": _first_share(item_scores)}

    def fast_scores(self, scorer, value: dict, where: Path) -> dict | None:
        data = scorer.file(self, self.folders[-1])
        return {uid: scorer.rho(entry["predictions"], data, where, uid) for uid, entry in value.items()}


class ReadingTask(Task):
    """The reading task, no list of candidates: `reading` reads, checks and computes it."""

    metric = "reading"
    suffixes = (".csv", ".csv.gz")
    digits = 2
    unit = "variance explained (%)"
    needs_eval = True
    spr_column = ("reading_spr", "Reading (Self-Paced Reading Time)")  # its second score, as the BabyLM report shows

    def read(self, files: list[Path], folder: Path) -> list:
        if len(files) > 1:
            raise InputError(f"{folder}: one reading_data.csv expected, found {', '.join(p.name for p in files)}")
        return reading.read_reading(files[0])

    def official_folder(self, folder: Path) -> Path:
        return Path(self.official)  # reading/run.py writes no data folder

    def check(self, tokenizer, items: list, causal: bool) -> None:
        reading.check_words(tokenizer, items, causal)

    def result_key(self, weights: str, files: list[Path], pll: str | None, temperature: float | None) -> dict:
        return result_key(weights, files, None, None)  # the pipeline's reading task takes neither

    def score(
        self, model, tokenizer, items: list, causal: bool, official: Path, *, pll, temperature, batch_tokens, progress
    ) -> dict:
        surprisal = reading.surprisals(model, tokenizer, items, causal, batch_tokens, progress)
        result = reading.evaluate(items, *surprisal)
        _write_json(official / PIPELINE_PREDICTIONS, reading.predictions(*surprisal))
        reading.write_reports(official, result)
        return result

    def columns(self) -> list[tuple[str, str]]:
        return [*super().columns(), self.spr_column]

    def summary_values(self, result: dict) -> dict:
        return {**super().summary_values(result), self.spr_column[0]: result["by"]["score"]["self_paced_reading"]}

    def fast_scores(self, scorer, value: dict, where: Path) -> dict | None:
        return scorer.reading(self, value, where)


# fmt: off
TASKS = {
    task.name: task
    for task in (
        Task("blimp", ("blimp_filtered", "blimp_fast"), "blimp", "BLiMP", _minimal_pair, answer="sentence_good"),
        Task("supplement", ("supplement_filtered", "supplement_fast"), "blimp", "BLiMP Supplement", _minimal_pair,
             key="blimp_supplement", answer="sentence_good"),
        Task("ewok", ("ewok_filtered", "ewok_fast"), "ewok", "EWoK", _ewok, answer="Target1"),
        EntityTrackingTask("entity_tracking", ("entity_tracking", "entity_tracking_fast"), "entity_tracking",
                           "Entity Tracking", _entity_tracking, fast_from_full=True),
        WugTask("wug_adj", ("wug_adj_nominalization",), "wug_adj", "Wug Adj. (rho)", fast_from_full=True),
        WugTask("wug_past", ("wug_past_tense",), "wug_past", "Wug Past (rho)", fast_from_full=True),
        Task("comps", ("comps",), "comps", "COMPS", _comps, on_revisions=False, pred_is_sentence=True),
        ReadingTask("reading", ("reading",), "reading", "Reading (Eye Tracking)", fast_from_full=True),
    )
}
# fmt: on


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
    return TASKS[task].read(files, folder)


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


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho of `x` and `y` (scipy's, with the `eval` extra)."""
    with needs("eval", "the wug tests' Spearman correlation"):
        from scipy.stats import spearmanr

    return float(spearmanr(x, y)[0])


def _first_share(item_scores: list[float]) -> float:
    """The softmax of candidate 0 over the item's candidates (the wug tests' "prob")."""
    top = max(item_scores)
    weights = [math.exp(score - top) for score in item_scores]
    return weights[0] / sum(weights)


def _accuracies(items: list[Item], scores: list[list[float]]) -> dict:
    """{key: {value: accuracy in percent}} of the items by UID and by each key of their metadata."""
    total, correct = defaultdict(Counter), defaultdict(Counter)
    for item, item_scores in zip(items, scores):
        right = chosen(item_scores) == 0
        for key, value in {"UID": item.uid, **item.metadata}.items():
            total[key][value] += 1
            correct[key][value] += right
    return {
        key: {value: 100.0 * correct[key][value] / count for value, count in counts.items()}
        for key, counts in total.items()
    }


# ------------------------------------------------------------------------------------------------------- running
def model_folders(
    model: str | Path, all_checkpoints: bool, revision: str | None = None, all_revisions: bool = False
) -> dict[str, tuple[str, str | None]]:
    """{revision name: (model folder or Hub name, Hub commit or None)}: MODEL alone ("main"); with `all_checkpoints`
    every model of a pretraining run folder: its `checkpoint-N` folders by step, its words-seen ones (named by their
    BabyLM 2025 revision, `chck_1M`, where the rules name one, else by folder, `words-500K`) and its final model
    ("main") when it holds one; with `revision` that branch of the Hub repository MODEL, with `all_revisions` its
    BabyLM revisions in words order and main (`pretrained.hub_revisions`), each at the commit its branch holds now."""
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
    """A words-seen checkpoint's record (`runs.layout.read_words_seen`, which names a damaged one); {} without one."""
    return read_words_seen(folder) if (folder / runs.WORDS_SEEN).is_file() else {}


def _revision_record(repo: str, commit: str) -> dict:
    """The words, milestone and step that `push --revisions` recorded in a revision (`REVISION_RECORD`); {} for a
    revision without the record (main, a model pushed otherwise)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        record = read_json(
            hf_hub_download(repo, REVISION_RECORD, revision=commit), "a revision record of elc-bert push"
        )
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
    from ..job_configs.training_metrics import TrainingMetrics

    state = folder / runs.TRAINER_STATE
    if state.is_file():
        return read_json(state, "a Trainer state").get("global_step")
    seen = _words_seen(folder)
    if "step" in seen:
        return seen["step"]
    metrics = TrainingMetrics.read(folder)
    return None if metrics is None else metrics.step


def _write_json(path: Path, value) -> None:
    runs.replace_file(path, json.dumps(value, indent=2) + "\n")


def result_key(weights: str, files: list[Path], pll: str | None, temperature: float | None) -> dict:
    """What kept scores or results depend on, compared whole before they are reused: the model's weights (a
    fingerprint: `runs.fingerprint` of its folder, a Hub name and commit, eval-blimp's digest of a model in memory),
    the data files (name and size), the PLL variant and the temperature."""
    data = [[path.name, path.stat().st_size] for path in files]
    return {"model": weights, "data": data, "pll": pll, "temperature": temperature}


def kept_result(path: Path, key: dict) -> dict | None:
    """The result `keep_result` kept in `path` under `key` (`result_key`), to be reused; None when there is none, or
    it was made under another key (other weights, data or settings) or cannot be read: it is scored again (logged)."""
    if not path.is_file():
        return None
    try:
        kept = read_json(path, "a result eval-babylm or eval-blimp kept")
    except InputError as error:
        logger.warning("%s: scored again", error)
        return None
    if kept.get("key") == key:
        return kept
    logger.info("%s: made with other settings or weights: scored again", path)
    return None


def keep_result(path: Path, key: dict, result: dict) -> None:
    """Writes `result` whole to `path` with the `key` it was made under, for `kept_result`."""
    _write_json(path, {**result, "key": key})


def load_scorer(source: str | Path, kind: str | None = None, device: str | None = None, **loading) -> tuple:
    """(model, tokenizer, kind) of `source` with its LM head (`pretrained.load_model`; `kind` "causal" forces a
    decoder), on `device`: by default the GPU where there is one, else the CPU. eval-babylm's and eval-blimp's."""
    import torch

    from ..pretrained import load_model

    loaded = load_model(str(source), kind, lm_head=True, **loading)
    loaded[0].to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return loaded


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
    (<revision>/zero_shot/<backend>/`Task.official_folder`/predictions.json and best_temperature_report.txt; the reading
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
    if any(TASKS[task].needs_eval for task in tasks):  # said now, not after other tasks
        require("eval", what="the wug tests' Spearman correlation and the reading task's regression")
    folders = {task: Path((task_dirs or {}).get(task) or find_task_folder(task, data)) for task in tasks}
    items = {task: read_task(task, folders[task]) for task in tasks}  # every file checked before any model loads
    model_dir = check_pipeline_model_dir(out_dir, model, "--out")  # the pipeline's (and collate_preds.py's) tree
    revisions = model_folders(model, all_checkpoints, revision, all_revisions)
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
    folder = runs.pipeline_model_dir(out_dir, model) / revision
    weights = runs.fingerprint(source) if Path(source).is_dir() else f"{source}@{commit}" if commit else source
    loaded = None
    for task in tasks:
        spec = TASKS[task]
        result_file = folder / EVAL_BABYLM_RESULTS / f"{task}.json"
        key = spec.result_key(weights, task_files(folders[task], task), pll, temperature)
        kept = kept_result(result_file, key)
        if kept is not None:
            row.update(spec.summary_values(kept))
            continue
        if loaded is None:
            loaded = load_scorer(source, device=device, revision=commit)
            if loaded[2] != "causal" and loaded[1].mask_token_id is None:
                raise InputError(f"{source}: a masked LM needs a tokenizer with a mask token")
            for each in tasks:  # every task's sentences, before the first is scored
                TASKS[each].check(loaded[1], items[each], loaded[2] == "causal")
            record_pipeline_model(out_dir, model)  # the inputs are good: the tree is this model's
        model_object, tokenizer, kind = loaded
        causal = kind == "causal"
        logger.info("%s %s: %d items", folder.name, task, len(items[task]))
        backend = "causal" if causal else "mlm"
        official = folder / runs.PIPELINE_ZERO_SHOT / backend / spec.official_folder(folders[task])
        result = spec.score(model_object, tokenizer, items[task], causal, official, pll=pll, temperature=temperature,
                            batch_tokens=batch_tokens, progress=progress)  # fmt: skip
        result.update(task=task, revision=folder.name, items=len(items[task]), backend=backend)
        keep_result(result_file, key, result)
        row.update(spec.summary_values(result))


def summary_table(summary: dict) -> str:
    """A markdown row per revision (with its step and words seen where known), a column per task (accuracies in
    percent, the wug tests' Spearman's rho; the reading task's eye-tracking and self-paced reading scores, percent of
    the variance left by the baseline that surprisal explains)."""
    columns = _columns(summary["tasks"])
    header = "| model | step | words | " + " | ".join(title for _, title, _ in columns) + " |"
    lines = [header, "|---" * (len(columns) + 3) + "|"]
    for revision, row in summary["rows"].items():
        cells = ["" if row.get(key) is None else f"{row[key]:.{task.digits}f}" for key, _, task in columns]
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
    for key, title, task in _columns(summary["tasks"]):
        points = sorted(
            (row["step"], row[key]) for row in summary["rows"].values() if row.get("step") is not None and key in row
        )
        if points:
            plot_curves(
                folder / f"{key}.png",
                {key: ([p[0] for p in points], [p[1] for p in points])},
                "training step",
                task.unit,
                title,
            )


def _columns(tasks: list[str]) -> list[tuple[str, str, Task]]:
    """(key in a summary row, title, task) of each summary column: one per task, two for the reading task."""
    return [(key, title, TASKS[name]) for name in tasks for key, title in TASKS[name].columns()]


__all__ = [
    "TASKS",
    "Item",
    "Task",
    "chosen",
    "find_task_folder",
    "read_task",
    "resolve_data",
    "result_key",
    "score_items",
    "evaluate_babylm",
    "load_scorer",
    "model_folders",
    "summary_table",
]
