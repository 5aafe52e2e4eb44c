"""The BabyLM 2025 submission file, collated from a results tree as the official pipeline collates it.

`babylm/evaluation-pipeline-2025`'s `evaluation_pipeline/collate_preds.py`, as its `collate_preds.sh MODEL BACKEND
TRACK` runs it (with `--fast`), reads the predictions of the final model (revision `main`) on the full tasks and of
every checkpoint revision on the fast ones, checks them, scores the fast ones and writes one JSON file. `collate`
writes the same file from the same predictions, whether eval-babylm or the pipeline made them; every check is made,
and every problem named, before anything is written.

The results tree, the pipeline's, under RESULTS/<model>/<revision>/ (<model> is the last part of the model's path or
Hub name, without a suffix, as the pipeline names it; <backend> is mlm, causal, ...):

    key               final model (main): full sets                      each revision: fast sets
    blimp             zero_shot/<backend>/blimp/blimp_filtered/          .../blimp/blimp_fast/
    blimp_supplement  zero_shot/<backend>/blimp/supplement_filtered/     .../blimp/supplement_fast/
    ewok              zero_shot/<backend>/ewok/ewok_filtered/            .../ewok/ewok_fast/
    entity_tracking   zero_shot/<backend>/entity_tracking/entity_tracking/  .../entity_tracking/entity_tracking_fast/
    wug_adj           zero_shot/<backend>/wug_adj/wug_adj_nominalization/   the same
    wug_past          zero_shot/<backend>/wug_past/wug_past_tense/       the same
    comps             zero_shot/<backend>/comps/comps/                   -
    reading           zero_shot/<backend>/reading/                       the same
    aoa               zero_shot/<backend>/AoA_word/surprisal.json        -
    glue              finetune/<boolq|mnli|mrpc|multirc|qqp|rte|wsc>/    -

Each folder holds predictions.json: {UID: {"predictions": [{"id": ..., "pred": ...}, ...]}} (the wug tests add
"prob", the softmax of the first candidate; reading has the one UID "reading" and "pred", "prev_pred": a word's
surprisal and the previous word's). surprisal.json, the pipeline's AoA output, is {"results": [{"step": <revision>,
...}, ...]}. The revisions are the 2025 rules' checkpoints by words seen, chck_1M ... for the track
(`runs.layout.track_revisions`; a run that stopped early gives `up_to`, its last, as the rules allow).

The file (default RESULTS/<model>/all_full_preds_and_fast_scores_<backend>.json) is one line of JSON:

    {"blimp": <main's predictions.json>, "blimp_supplement": ..., "ewok": ..., "entity_tracking": ..., "wug_adj": ...,
     "wug_past": ..., "comps": ..., "reading": ..., "aoa": <surprisal.json>, "glue": {<the seven files' UIDs>},
     "fast_eval_results": {"blimp": [{UID: accuracy}, one per revision], "blimp_supplement": [...], "ewok": [...],
                           "entity_tracking": [...], "wug_adj": [{UID: rho}, ...], "wug_past": [...],
                           "reading": [{"spr": ..., "rt": ...}, ...]}}

The fast scores come from the fast evaluation data: accuracy (a fraction) of the predictions against the item's right
answer (`sentence_good`, EWoK's `Target1`, entity tracking's first option; the regular file's items by `numops`);
the wug tests' Spearman's rho between "prob" and the human `ratio`; reading's gain in R² of ordinary least squares
regressions of the reading times on the word's frequency, length and context length (and the previous word's, for
self-paced reading) when the surprisal is added, relative to what the baseline left unexplained: "rt" the mean over
the four eye-tracking times, "spr" the self-paced reading time, as fractions (`reading.submission_scores`, whose
regressions are the reading task's own: statsmodels' floats to about 1e-12 relative on the same numbers, and the
pipeline's own scores within float32 noise, since its surprisals come from its own forward passes; its pinned pandas
2.2.3 also reads 45 of the staged CSV's numbers one unit in the last place off Python's correct rounding, which moves
the scores by under 1e-15). The fast data of a key is read from fast_eval/<folder> (blimp_fast,
supplement_fast, ewok_fast, entity_tracking_fast/regular.jsonl, wug_adj_nominalization, wug_past_tense,
reading/reading_data.csv; .gz too), or, for the sets the fast evaluation shares with the full one (entity tracking's
regular items, the wug tests, reading), from their full_eval/ folder beside it, as the data is staged.

The checks: the pipeline's (every file there, each UID with the number of predictions the pipeline requires, the
AoA file holding every revision with its count of words), and what it lets through: a UID missing from a task whose
UIDs it lists (a submission without it), a UID it does not know, a prediction without its field, a wug "prob" or a
reading "pred" / "prev_pred" that is not a finite number (reading's null or NaN is a missing value, as the pipeline
drops it), a reading regression with no more rows left than parameters, a fast data file whose items do not match
the predictions (the pipeline pairs them silently), two fine-tuning files with one UID.
"""

import json
import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import runs
from ..data.jsonl import read_jsonl
from ..data.text import read_text
from ..extras import require
from ..models.errors import InputError, InputNotADirectoryError, InputNotFoundError
from ..runs.layout import track_revisions
from .babylm import TASKS, Task, resolve_data, spearman
from .reading import SUBMISSION_FITS, UID, read_reading, submission_scores, too_few_rows

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------- the pipeline's rules
BACKENDS = ("mlm", "causal", "mntp", "enc_dec_mask", "enc_dec_prefix")
GLUE_TASKS = ("boolq", "mnli", "mrpc", "multirc", "qqp", "rte", "wsc")


@dataclass(frozen=True)
class ItemCounts:
    """The number of predictions the pipeline requires, by key (of the file, and of its UID tables): per UID (a dict
    whose UIDs are all required; the pipeline looks UIDs up in lower case) or for every UID (an int); the fast sets'
    UIDs are those of the full set where the fast count is an int. `aoa`: the AoA file's words per revision."""

    full: dict
    fast: dict
    aoa: int


# collate_preds.py's tables (BLIMP_SIZES, SUPPLEMENT_SIZES, EWOK_SIZES, ENTITY_TRACKING_SIZES, COMPS_SIZES, the
# GLUE sizes, FAST_SIZES, AOA_SIZE) at babylm/evaluation-pipeline-2025 591121d.
BLIMP_COUNTS = {
    "adjunct_island": 928, "anaphor_gender_agreement": 971, "anaphor_number_agreement": 931,
    "animate_subject_passive": 895, "animate_subject_trans": 923, "causative": 818, "complex_np_island": 846,
    "coordinate_structure_constraint_complex_left_branch": 906,
    "coordinate_structure_constraint_object_extraction": 949, "determiner_noun_agreement_1": 929,
    "determiner_noun_agreement_2": 931, "determiner_noun_agreement_irregular_1": 681,
    "determiner_noun_agreement_irregular_2": 820, "determiner_noun_agreement_with_adj_2": 941,
    "determiner_noun_agreement_with_adj_irregular_1": 718, "determiner_noun_agreement_with_adj_irregular_2": 840,
    "determiner_noun_agreement_with_adjective_1": 933, "distractor_agreement_relational_noun": 788,
    "distractor_agreement_relative_clause": 871, "drop_argument": 920, "ellipsis_n_bar_1": 802,
    "ellipsis_n_bar_2": 828, "existential_there_object_raising": 812, "existential_there_quantifiers_1": 930,
    "existential_there_quantifiers_2": 911, "existential_there_subject_raising": 924,
    "expletive_it_object_raising": 759, "inchoative": 855, "intransitive": 868,
    "irregular_past_participle_adjectives": 961, "irregular_past_participle_verbs": 942,
    "irregular_plural_subject_verb_agreement_1": 804, "irregular_plural_subject_verb_agreement_2": 892,
    "left_branch_island_echo_question": 947, "left_branch_island_simple_question": 951,
    "matrix_question_npi_licensor_present": 929, "npi_present_1": 909, "npi_present_2": 914,
    "only_npi_licensor_present": 882, "only_npi_scope": 837, "passive_1": 840, "passive_2": 903,
    "principle_a_c_command": 946, "principle_a_case_1": 912, "principle_a_case_2": 915, "principle_a_domain_1": 914,
    "principle_a_domain_2": 915, "principle_a_domain_3": 941, "principle_a_reconstruction": 967,
    "regular_plural_subject_verb_agreement_1": 890, "regular_plural_subject_verb_agreement_2": 945,
    "sentential_negation_npi_licensor_present": 919, "sentential_negation_npi_scope": 871,
    "sentential_subject_island": 961, "superlative_quantifiers_1": 979, "superlative_quantifiers_2": 986,
    "tough_vs_raising_1": 948, "tough_vs_raising_2": 920, "transitive": 868, "wh_island": 960,
    "wh_questions_object_gap": 859, "wh_questions_subject_gap": 898, "wh_questions_subject_gap_long_distance": 857,
    "wh_vs_that_no_gap": 861, "wh_vs_that_no_gap_long_distance": 875, "wh_vs_that_with_gap": 919,
    "wh_vs_that_with_gap_long_distance": 910,
}  # fmt: skip
ENTITY_TRACKING_COUNTS = {
    f"{split}_{ops}_ops": count
    for split, counts in (
        ("regular", (606, 607, 606, 606, 568, 159)),
        ("ambiref", (607, 607, 604, 604, 615, 187)),
        ("move_contents", (605, 606, 605, 606, 529, 156)),
    )
    for ops, count in enumerate(counts)
}
PIPELINE_COUNTS = ItemCounts(
    full={
        "blimp": BLIMP_COUNTS,
        "blimp_supplement": {
            "hypernym": 842, "qa_congruence_easy": 64, "qa_congruence_tricky": 165, "subject_aux_inversion": 3867,
            "turn_taking": 280,
        },
        "ewok": {
            "agent-properties": 2210, "social-relations": 1548, "physical-relations": 818, "material-dynamics": 770,
            "physical-interactions": 556, "spatial-relations": 490, "social-properties": 328,
            "quantitative-properties": 314, "social-interactions": 294, "material-properties": 170,
            "physical-dynamics": 120,
        },
        "entity_tracking": ENTITY_TRACKING_COUNTS,
        "wug_adj": 200,
        "wug_past": 50,
        "comps": {"base": 49340, "wugs_dist_before": 13896, "wugs_dist_in_between": 13896, "wugs": 13896},
        "reading": 1726,
        "boolq": 1635, "mnli": 4908, "mrpc": 204, "multirc": 2424, "qqp": 20215, "rte": 139, "wsc": 52,
    },
    fast={
        "blimp": 200,
        "blimp_supplement": 50,
        "ewok": 100,
        "entity_tracking": {uid: n for uid, n in ENTITY_TRACKING_COUNTS.items() if uid.startswith("regular_")},
        "wug_adj": 200,
        "wug_past": 50,
        "reading": 1726,
    },
    aoa=8005,
)  # fmt: skip


AOA_FILE = "AoA_word/surprisal.json"


def output_file(results_dir: str | Path, model: str, backend: str) -> Path:
    """Where the pipeline writes the submission: RESULTS/<model>/all_full_preds_and_fast_scores_<backend>.json."""
    return runs.pipeline_model_dir(results_dir, model) / f"all_full_preds_and_fast_scores_{backend}.json"


# --------------------------------------------------------------------------------------------------- collating
def _refuse_if_any(problems: list[str], what: str) -> None:
    """One InputError naming every problem found (the first dozen, and how many more), each once."""
    problems = list(dict.fromkeys(problems))  # a missing fast data file is met at every revision
    if problems:
        shown = "; ".join(problems[:12]) + (f"; and {len(problems) - 12} more" if len(problems) > 12 else "")
        raise InputError(f"{what}: {len(problems)} problem(s): {shown}")


def _load_json(path: Path, problems: list[str], what: str):
    """The JSON in `path`, or None with the problem noted."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        problems.append(f"{path} ({what}): not valid JSON (line {error.lineno}: {error.msg})")
    except InputError as error:
        problems.append(f"{what}: {error}")
    return None


def _check_predictions(
    value, path: Path, what: str, sizes: int | dict, required: set | None, problems: list[str]
) -> bool:
    """Whether `value` (a predictions.json) has the pipeline's shape and, for each UID, the number of predictions it
    requires (`sizes`: per UID in lower case, or one for all); `required`: the UIDs it must have."""
    if not isinstance(value, dict) or not value:
        problems.append(f'{path} ({what}): expected {{UID: {{"predictions": [...]}}}}, got {type(value).__name__}')
        return False
    noted = len(problems)
    for uid, entry in value.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("predictions"), list):
            problems.append(f'{path} ({what}): UID {uid} has no "predictions" list')
            continue
        expected = sizes.get(uid.lower()) if isinstance(sizes, dict) else sizes
        if expected is None:
            problems.append(f"{path} ({what}): UID {uid} is not one of the task's UIDs")
        elif len(entry["predictions"]) != expected:
            got = len(entry["predictions"])
            problems.append(f"{path} ({what}): UID {uid} has {got} predictions, the pipeline requires {expected}")
    missing = sorted((required or set()) - {uid.lower() for uid in value})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        problems.append(f"{path} ({what}): no predictions for UID {shown}")
    return len(problems) == noted


def _required_uids(counts: ItemCounts, key: str, fast: bool) -> set | None:
    sizes = counts.fast[key] if fast else counts.full[key]
    if isinstance(sizes, dict):
        return set(sizes)
    full = counts.full.get(key)
    return set(full) if fast and isinstance(full, dict) else None


def _check_aoa(value, path: Path, revisions: list[str], size: int, problems: list[str]) -> None:
    """The pipeline's AoA check: one set of results per revision, of `size` words each, and no other revision."""
    results = value.get("results") if isinstance(value, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) and "step" in r for r in results):
        problems.append(f'{path} (aoa): expected {{"results": [{{"step": <revision>, ...}}, ...]}}')
        return
    per_step = Counter(record["step"] for record in results)
    missing = [revision for revision in revisions if revision not in per_step]
    extra = sorted(set(per_step) - set(revisions))
    if missing:
        problems.append(f"{path} (aoa): no results for revision {', '.join(missing)}")
    if extra:
        problems.append(f"{path} (aoa): results for revision {', '.join(extra)}, which the track does not have")
    for revision in revisions:
        if revision in per_step and per_step[revision] != size:
            problems.append(
                f"{path} (aoa): revision {revision} has {per_step[revision]} words, the pipeline requires {size}"
            )


def collate(
    results_dir: str | Path,
    model_name: str,
    track: str,
    out_file: str | Path | None = None,
    *,
    data: str | Path,
    backend: str | None = None,
    revision: str = "main",
    up_to: str | None = None,
    counts: ItemCounts | None = None,
) -> Path:
    """Writes the submission of `model_name` (of a path or Hub name, its stem, as the pipeline names the model) to
    `track` from RESULTS_DIR as collate_preds.py writes it (see the module's docstring) and returns its path.
    `data`: the fast evaluation data (the `evaluation_data` folder holding fast_eval/, fast_eval/ itself, or a Hub
    dataset id holding either); `backend`: the one under
    <revision>/zero_shot/ when None; `revision`: the final model's; `up_to`: the last checkpoint revision of a run
    that stopped early; `counts`: the item counts required (default: the pipeline's, `PIPELINE_COUNTS`). A missing
    file, task or revision, or a wrong number of predictions, is refused naming them all before anything is
    written."""
    revisions = track_revisions(track, up_to)
    counts = counts or PIPELINE_COUNTS
    require("eval", what="the wug tests' Spearman correlation")
    model_dir = runs.pipeline_model_dir(results_dir, model_name)
    if not model_dir.is_dir():
        raise InputNotFoundError(f"{model_dir}: no results folder for model {model_name} in {results_dir}")
    backend = backend or _the_backend(model_dir / revision / runs.PIPELINE_ZERO_SHOT)
    if backend not in BACKENDS:
        raise InputError(f"backend {backend!r}: choose from {', '.join(BACKENDS)}")
    fast_data = _fast_data_dir(resolve_data(data))

    problems = []
    for name in [revision, *revisions]:  # the whole tree first, as the pipeline checks it
        if not (model_dir / name).is_dir():
            problems.append(f"revision {name}: no folder {model_dir / name}")
            continue
        for path, what in _files(model_dir / name, backend, fast=name != revision):
            if not path.is_file():
                problems.append(f"{path}: missing ({what}, revision {name})")
    _refuse_if_any(problems, f"cannot collate {model_dir}")

    zero_shot = model_dir / revision / runs.PIPELINE_ZERO_SHOT / backend
    full = {}
    for task in TASKS.values():
        path = zero_shot / task.collated(fast=False) / runs.PIPELINE_PREDICTIONS
        value = _load_json(path, problems, task.key)
        if value is not None and _check_predictions(
            value, path, task.key, counts.full[task.key], _required_uids(counts, task.key, False), problems
        ):
            full[task.key] = value
    aoa = _load_json(zero_shot / AOA_FILE, problems, "aoa")
    if aoa is not None:
        _check_aoa(aoa, zero_shot / AOA_FILE, revisions, counts.aoa, problems)
    full["aoa"] = aoa
    glue, owner = {}, {}
    for task in GLUE_TASKS:
        path = model_dir / revision / runs.PIPELINE_FINETUNE / task / runs.PIPELINE_PREDICTIONS
        value = _load_json(path, problems, task)
        if value is not None and _check_predictions(value, path, task, counts.full[task], None, problems):
            for uid in value:
                if uid in owner:
                    problems.append(f"{path} ({task}): UID {uid} is also {owner[uid]}'s: one would hide the other")
                owner[uid] = task
            glue |= value
    full["glue"] = glue

    scorer = _FastScorer(fast_data, problems)
    fast_tasks = [task for task in TASKS.values() if task.on_revisions]
    fast = {task.key: [] for task in fast_tasks}
    for name in revisions:
        for task in fast_tasks:
            path, what = _fast_file(model_dir / name, backend, task)
            what += f", revision {name}"
            value = _load_json(path, problems, what)
            required = _required_uids(counts, task.key, True)
            if value is not None and _check_predictions(value, path, what, counts.fast[task.key], required, problems):
                fast[task.key].append(task.fast_scores(scorer, value, path))
    _refuse_if_any(problems, f"cannot collate {model_dir}")

    submission = {key: full[key] for key in [task.key for task in TASKS.values()] + ["aoa", "glue"]}
    submission["fast_eval_results"] = fast
    out_file = Path(out_file) if out_file else output_file(results_dir, model_name, backend)
    runs.replace_file(out_file, json.dumps(submission))  # json.dump's defaults, as the pipeline writes
    logger.info("%s: %s, revision %s and %d checkpoint revisions", out_file, track, revision, len(revisions))
    return out_file


def _files(folder: Path, backend: str, fast: bool) -> list[tuple[Path, str]]:
    """The files a revision's folder must hold, with what each is."""
    if fast:
        return [_fast_file(folder, backend, task) for task in TASKS.values() if task.on_revisions]
    zero_shot = folder / runs.PIPELINE_ZERO_SHOT / backend
    files = [(zero_shot / task.collated(fast=False) / runs.PIPELINE_PREDICTIONS, task.key) for task in TASKS.values()]
    files.append((zero_shot / AOA_FILE, "aoa"))
    return files + [(folder / runs.PIPELINE_FINETUNE / task / runs.PIPELINE_PREDICTIONS, task) for task in GLUE_TASKS]


def _fast_file(folder: Path, backend: str, task: Task) -> tuple[Path, str]:
    """A revision's predictions of `task`'s fast set, with what it is."""
    path = folder / runs.PIPELINE_ZERO_SHOT / backend / task.collated(fast=True) / runs.PIPELINE_PREDICTIONS
    return path, f"{task.key} fast"


def _the_backend(zero_shot: Path) -> str:
    found = sorted(p.name for p in zero_shot.iterdir() if p.is_dir()) if zero_shot.is_dir() else []
    if len(found) != 1:
        held = f"it holds {', '.join(found)}" if found else "it holds none"
        raise InputError(f"{zero_shot}: cannot tell the backend ({held}): give it (one of {', '.join(BACKENDS)})")
    return found[0]


def _fast_data_dir(data: Path) -> Path:
    if (data / "fast_eval").is_dir():
        return data / "fast_eval"
    if not data.is_dir():
        raise InputNotADirectoryError(f"{data}: the fast evaluation data must be a folder")
    return data


# ------------------------------------------------------------------------------------------------ fast scores
class _FastScorer:
    """The fast scores of the revisions' predictions, from the fast evaluation data (each file read once); what is
    wrong is added to `problems` (and its score is None)."""

    def __init__(self, data: Path, problems: list[str]):
        self.data, self.problems, self.read = data, problems, {}

    def file(self, task: Task, name: str) -> Path | None:
        """The fast data file `name` of `task`: in its fast folder, else in the full_eval/ twin of that folder."""
        folders = [self.data / task.folders[-1]]
        folders += [self.data.parent / "full_eval" / task.folders[0]] if task.fast_from_full else []
        for folder in folders:
            for suffix in task.suffixes:
                if (folder / f"{name}{suffix}").is_file():
                    return folder / f"{name}{suffix}"
        self.problems.append(f"{folders[0] / (name + task.suffixes[0])}: missing (the fast data of {task.key})")
        return None

    def records(self, path: Path | None) -> list[dict]:
        if path is not None and path not in self.read:
            self.read[path] = [record for _, record in read_jsonl(path)]
        return self.read.get(path, [])

    def _paired(self, predictions: list, items: list, data: Path | None, where: Path, uid: str) -> bool:
        if data is None:
            return False
        if len(items) != len(predictions):
            self.problems.append(
                f"{where}: UID {uid} has {len(predictions)} predictions, its fast data {data} {len(items)} items "
                "(not the set they were made on)"
            )
            return False
        return True

    def _values(
        self, predictions: list, name: str, where: Path, uid: str, number: bool = False, missing: bool = False
    ) -> list | None:
        """Each prediction's `name`, or None (the problem noted) when one has none. `number`: as floats, and one that
        is not a finite number is refused (the pipeline ranks a string such as "0.3" as text in spearmanr, and fits
        it as a category in statsmodels' formula); `missing`: null and NaN allowed too, as NaN (a value the pipeline
        drops)."""
        for index, entry in enumerate(predictions):
            if not isinstance(entry, dict) or name not in entry:
                self.problems.append(f'{where}: UID {uid}, prediction {index} has no "{name}"')
                return None
            if number and not _is_number(entry[name], missing):
                item = f" (id {entry['id']!r})" if "id" in entry else ""
                self.problems.append(
                    f'{where}: UID {uid}, prediction {index}{item} has "{name}" {entry[name]!r}, not a number'
                )
                return None
        values = [entry[name] for entry in predictions]
        return [math.nan if value is None else float(value) for value in values] if number else values

    def accuracy(self, predictions, answers, data: Path | None, where: Path, uid: str) -> float | None:
        """The share of predictions equal to the item's right answer (both stripped), as the pipeline counts it."""
        if not self._paired(predictions, answers, data, where, uid):
            return None
        if None in answers:
            self.problems.append(f"{data}: item {answers.index(None)} of UID {uid} has no right answer")
            return None
        preds = self._values(predictions, "pred", where, uid)
        if preds is None:
            return None
        strip = lambda text: text.strip() if isinstance(text, str) else text  # noqa: E731
        return sum(strip(pred) == strip(answer) for pred, answer in zip(preds, answers)) / len(preds)

    def rho(self, predictions, data: Path | None, where: Path, uid: str) -> float | None:
        """Spearman's rho between the predictions' "prob" and the items' human `ratio`."""
        ratios = [record.get("ratio") for record in self.records(data)]
        if not self._paired(predictions, ratios, data, where, uid):
            return None
        probs = self._values(predictions, "prob", where, uid, number=True)
        if probs is None:
            return None
        if not all(isinstance(ratio, (int, float)) for ratio in ratios):
            self.problems.append(f"{data}: an item has no number 'ratio' (the human preference)")
            return None
        return spearman(probs, ratios)

    def reading(self, task: Task, value: dict, where: Path) -> dict | None:
        if UID not in value:
            self.problems.append(f'{where}: no UID "{UID}" (the pipeline reads its predictions there)')
            return None
        data = self.file(task, "reading_data")
        if data is not None and data not in self.read:
            try:
                self.read[data] = read_reading(data, SUBMISSION_FITS)
            except InputError as error:  # named with the others
                self.problems.append(str(error))
                self.read[data] = None
        words = self.read.get(data)
        if words is None:
            return None
        predictions = value[UID]["predictions"]
        if not self._paired(predictions, words, data, where, UID):
            return None
        pred, prev_pred = (
            self._values(predictions, name, where, UID, number=True, missing=True) for name in ("pred", "prev_pred")
        )
        if pred is None or prev_pred is None:
            return None
        short = too_few_rows(words, pred, prev_pred, SUBMISSION_FITS)
        if short:
            self.problems.append(f"{where}: too few rows for the reading regressions: {'; '.join(short)}")
            return None
        return submission_scores(words, pred, prev_pred)


def _is_number(value, missing: bool) -> bool:
    """Whether `value` (from JSON) is a finite number, or, where `missing`, null or NaN (a missing value)."""
    if missing and (value is None or (isinstance(value, float) and math.isnan(value))):
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
