"""The run folder's layout: the file and folder names each job writes (listed in `elc_bert.runs`), which job made a
folder, and what in it counts as work a rerun must resume under the same config; and the BabyLM 2025 rules: the tracks,
the checkpoint revisions each is scored on (`track_revisions`) and their names for a pretraining run's words-seen
checkpoints as revisions of a Hub repository (`revision_name`).
"""

import json
import os
from pathlib import Path

from ..data.jsonl import read_json
from ..models.errors import InputError

# The config file a job saves in its run folder: <job>_config.yaml (finetune-ner: finetune_ner_config.yaml). The jobs
# themselves are declared by their config classes (`job_configs.CONFIG_CLASSES`, each class naming its `job`).
CONFIG_FILE_SUFFIX = "_config.yaml"

METRICS = "metrics.json"

RESULTS = "results.json"

RESULTS_TABLE = "results.md"

RESULT = "result.json"  # one finetune-ner trial's or finetune-glue task's

MODEL = "model"  # a kept model folder inside a trial's or task's folder
ADAPTER = "adapter"  # with `lora`: the kept LoRA adapter beside it (the model folder holds the merged model)

TOKENIZER = "tokenizer"

GLUE = "glue"

CLAIM = ".claimed"

WRITER_LOCK = ".writer.lock"  # held by the one process that writes a run folder (`hold_run_folder`)

WRITER = ".writer"  # who holds it: host and pid

SAVING = ".saving"  # a temporary folder that a final model is saved into, then moved out of (`replacing_files`)

STARTING_LOCK = ".starting.lock"  # held while a process checks a shared run's config (`starting_trials`)

MODEL_FINGERPRINTS = "model_fingerprints.jsonl"

WORDS_CHECKPOINT = "words-"  # a pretraining run's model after N words: words-1M, words-10M, ... (`words_checkpoint`)

WORDS_SEEN = "words_seen.json"  # in a words-seen checkpoint: the words, milestone and step

CHECKPOINT_PREFIX = "checkpoint-"  # the Trainer's (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR)

TRAINER_STATE = "trainer_state.json"  # in each checkpoint, the Trainer's (transformers.trainer.TRAINER_STATE_NAME)

EVAL = "eval"  # the model-folder output of older `elc-bert eval-blimp` runs (the scorecard still reads it)

LOSS_PLOT = "loss.png"  # pretrain

EVAL_LOSS_PLOT = "eval_loss.png"  # mlm

F1_VS_N_PLOT = "f1_vs_n.png"  # finetune-ner

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")  # any of them makes a tokenizer folder


# The BabyLM 2025 evaluation pipeline's results tree, which its collate_preds.py reads, and eval-babylm,
# finetune-glue's `predictions_dir` and collate write or read: RESULTS/<model>/<revision>/zero_shot/<backend>/<task>/
# <dataset>/predictions.json and RESULTS/<model>/<revision>/finetune/<task>/predictions.json.
PIPELINE_ZERO_SHOT = "zero_shot"
PIPELINE_FINETUNE = "finetune"
PIPELINE_PREDICTIONS = "predictions.json"


PIPELINE_MODEL_RECORD = "elc_bert_model.json"  # in RESULTS/<model>/: the model whose results the folder holds
EVAL_BABYLM_RESULTS = "eval-babylm"  # RESULTS/<model>/<revision>/eval-babylm/<task>.json: eval-babylm's every metric
EVAL_BABYLM_SUMMARY = "summary"  # RESULTS/<model>/summary.md and .json: eval-babylm's table, a row per revision


def pipeline_model_dir(results: str | Path, model: str | Path) -> Path:
    """RESULTS/<model>: the pipeline names a model by the last part of its path or Hub name, without a suffix (a local
    folder's path is made absolute first, so that `.` or `run/..` is named by its folder)."""
    path = Path(model).expanduser()
    return Path(results) / Path(os.path.abspath(path) if path.exists() else str(model).rstrip("/")).stem


def model_source(model: str | Path) -> str:
    """What names a model across runs: a local folder's absolute path, else the Hub name as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else str(model)


def check_pipeline_model_dir(results: str | Path, model: str | Path, argument: str = "the results root") -> Path:
    """RESULTS/<model>, where `model`'s results go; InputError naming both models when its record
    (`PIPELINE_MODEL_RECORD`) names another: two models of one folder name would mix in one tree, and the collation
    would build one submission of both. A folder without a record (the pipeline's own, or none yet) is `model`'s.
    RESULTS itself holding a record (a model's folder given as the root) is refused, naming `argument`."""
    if (Path(results) / PIPELINE_MODEL_RECORD).is_file():
        raise InputError(
            f"{argument} {results}: a model's folder in a results tree ({PIPELINE_MODEL_RECORD}); {argument} is the "
            f"results root (the pipeline's results/), the model's folder goes below it: give {argument} "
            f"{Path(results).parent}"
        )
    folder = pipeline_model_dir(results, model)
    record, source = folder / PIPELINE_MODEL_RECORD, model_source(model)
    what = 'the record elc-bert writes there ({"model": PATH_OR_HUB_NAME})'
    held = read_json(record, what, fields=("model",))["model"] if record.is_file() else source
    if held != source:
        raise InputError(
            f"{folder} holds the results of model {held} ({record}); {source} has the same folder name, and their "
            "results would mix: give this one another results folder (eval-babylm's --out, finetune-glue's "
            "predictions_dir)"
        )
    return folder


def record_pipeline_model(results: str | Path, model: str | Path) -> Path:
    """Records in RESULTS/<model> (made if need be) that it holds `model`'s results, once `check_pipeline_model_dir`
    has let it write there; returns the folder."""
    folder = check_pipeline_model_dir(results, model)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PIPELINE_MODEL_RECORD).write_text(json.dumps({"model": model_source(model)}) + "\n", encoding="utf-8")
    return folder


# The BabyLM 2025 rules, their one statement: a submission's checkpoints are revisions (branches) of its Hub repository
# named by the words seen, chck_1M ... chck_9M, chck_10M ... chck_100M and, but for the strict-small track, chck_200M
# ... chck_1000M (the official pipeline's collate_preds.py and eval_zero_shot_fast_all_revisions.sh). A run keeps its
# words-seen checkpoints as words-<W>/ (runs made before revisions were pushed stay readable); this is the one map
# between the two.
REVISION_PREFIX = "chck_"

# In each revision `push --revisions` pushes: the run it came from, the revision, the sha256 of the run's weights it
# was exported from and, for a words-seen checkpoint, its words_seen.json (words, milestone, step), which eval-babylm
# reads back for its summary's step and words columns.
REVISION_RECORD = "elc_bert_revision.json"

TRACK_CHECKPOINT_WORDS = {  # `checkpoint_words: strict-small` (or strict) keeps these
    "strict-small": tuple(m * 10**6 for m in (*range(1, 10), *range(10, 101, 10))),
    "strict": tuple(m * 10**6 for m in (*range(1, 10), *range(10, 100, 10), *range(100, 1001, 100))),
}

# The text tracks, by the words seen of the revisions a submission to each is scored on: interaction's are strict's;
# multimodal adds vision tasks, not collated here.
TRACK_WORDS = {**TRACK_CHECKPOINT_WORDS, "interaction": TRACK_CHECKPOINT_WORDS["strict"]}
TRACKS = tuple(TRACK_WORDS)

REVISION_WORDS = {f"{REVISION_PREFIX}{words // 10**6}M": words for words in TRACK_CHECKPOINT_WORDS["strict"]}


def revision_name(words: int) -> str | None:
    """The BabyLM 2025 revision of the checkpoint after `words` words (1000000 -> "chck_1M"); None for a count the
    rules name no revision for (a run may keep other checkpoints too)."""
    name = f"{REVISION_PREFIX}{words // 10**6}M"
    return name if REVISION_WORDS.get(name) == words else None


def revision_words(name: str) -> int:
    """The words seen of the BabyLM 2025 revision `name` ("chck_1M" -> 1000000); InputError naming a name the rules do
    not know."""
    if name not in REVISION_WORDS:
        raise InputError(
            f"revision {name!r} is not one the BabyLM 2025 rules name: they are chck_1M ... chck_9M, chck_10M ... "
            "chck_100M and (but for strict-small) chck_200M ... chck_1000M, besides main"
        )
    return REVISION_WORDS[name]


def track_revisions(track: str, up_to: str | None = None) -> list[str]:
    """The checkpoint revisions a submission to `track` is scored on, in order; with `up_to`, those up to it (a run
    that stopped early)."""
    if track not in TRACK_WORDS:
        hint = " (its vision tasks are not collated here)" if track == "multimodal" else ""
        raise InputError(f"track {track!r}{hint}: choose from {', '.join(TRACKS)}")
    revisions = [revision_name(words) for words in TRACK_WORDS[track]]
    if up_to is None:
        return revisions
    if up_to not in revisions:
        raise InputError(f"up_to {up_to!r} is not a revision of the {track} track: {revisions[0]} ... {revisions[-1]}")
    return revisions[: revisions.index(up_to) + 1]


def words_label(words: int) -> str:
    """1000000 -> "1M", 2500000000 -> "2.5B": the name part of a words-seen checkpoint."""
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if words >= size:
            return f"{words / size:g}{unit}"
    return str(words)


def words_checkpoint(run_dir: str | Path, words: int) -> Path:
    """The folder of a pretraining run's model after `words` words: words-1M, words-2.5B, words-500."""
    return Path(run_dir) / f"{WORDS_CHECKPOINT}{words_label(words)}"


def words_checkpoints(run_dir: str | Path) -> dict[int, Path]:
    """{milestone: folder} of a pretraining run's words-seen checkpoints, in words order (the milestone each folder
    records in words_seen.json; a folder without one is passed over)."""
    found = {}
    for folder in Path(run_dir).glob(WORDS_CHECKPOINT + "*"):
        if (folder / WORDS_SEEN).is_file():
            found[read_words_seen(folder)["milestone"]] = folder
    return dict(sorted(found.items()))


def read_words_seen(folder: str | Path) -> dict:
    """The words_seen.json of a words-seen checkpoint ({"words", "milestone", "step"}); InputError naming the file
    when it is not that (damaged, or edited by hand)."""
    path = Path(folder) / WORDS_SEEN
    fix = 'restore the JSON the run wrote there: {"words": W, "milestone": M, "step": S}'
    seen = read_json(path, "a readable words-seen record", fix=fix)
    if not isinstance(seen.get("milestone"), int):
        raise InputError(f"{path}: not a readable words-seen record (no whole-number milestone); {fix}")
    return seen


def config_file(run_dir: str | Path, job: str) -> Path:
    """The config file that `job` (its command name) saves in its run folder `run_dir`."""
    return Path(run_dir) / (job.replace("-", "_") + CONFIG_FILE_SUFFIX)


def trial_dir(run_dir: str | Path, shots: int, trial: int) -> Path:
    """A finetune-ner trial's folder: N = `shots`, trial number `trial`."""
    return Path(run_dir) / f"n{shots}" / f"trial{trial}"


def trial_results(run_dir: str | Path) -> list[Path]:
    """The result.json files of a finetune-ner run's finished trials."""
    return sorted(Path(run_dir).glob(f"n*/trial*/{RESULT}"))


def glue_dir(model_run_dir: str | Path) -> Path:
    """finetune-glue's run folder for the model whose run (or model folder) is `model_run_dir`."""
    return Path(model_run_dir) / GLUE


def has_work(folder: str | Path) -> bool:
    """Whether `folder` holds work that running its job again would resume or reuse, at any depth: a checkpoint, a
    kept model (a finetune-ner trial's best epoch, a finetune-glue task's), a finished result, a finished run's
    metrics, or a trial claimed by a process (started, perhaps by a process running beside this one)."""
    folder = Path(folder)
    return (
        (folder / METRICS).exists()
        or any(folder.rglob(RESULT))
        or any(folder.rglob(CLAIM))
        or any(path.is_dir() for name in (MODEL, ADAPTER) for path in folder.rglob(name))
        or any(path.is_dir() for path in folder.rglob(CHECKPOINT_PREFIX + "*"))
    )


def links_out_of(folder: str | Path, paths=None) -> list[Path]:
    """The symbolic links among `paths` (default: everything under `folder`) whose targets lie outside `folder`:
    a command that copies or uploads files of a folder refuses them, so that no file from elsewhere (a token, a
    system file) ends up in what it writes."""
    root = Path(folder).resolve()
    paths = Path(folder).rglob("*") if paths is None else paths
    return [path for path in paths if Path(path).is_symlink() and not Path(path).resolve().is_relative_to(root)]
