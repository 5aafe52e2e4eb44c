"""The BabyLM 2025 submission guide (docs/guides/babylm-submission.md) run end to end on a tiny model (issue 63): its
command lines, through `elc-bert`, from a pretraining run with three milestones to the collated submission file.

The evaluation data is made up here, small, in the pipeline's `evaluation_data` layout (full_eval/, fast_eval/, the
fast entity-tracking set too, and full_eval/glue_filtered/ for the seven fine-tuning tasks); its item counts are not
the pipeline's, so the collation is given them (`collate(counts=...)`, which the command line does not take).
"""

import json
import random
from pathlib import Path

import pytest
from helpers import MILESTONES, milestone_run, write_reading_csv
from hub_server import local_hub

from elc_bert.cli import main as cli_main
from elc_bert.data.glue import TASKS as GLUE
from elc_bert.evaluation import reading
from elc_bert.evaluation.collate import GLUE_TASKS, PARTS, ItemCounts, collate

REPO_ID, MODEL = "test-user/my-babylm", "my-babylm"
REVISIONS = list(MILESTONES)  # chck_1M, chck_2M, chck_3M: strict-small up to chck_3M
NOUNS = "cat dog house tree man woman city river king war".split()
VERBS = "saw found took left made".split()
BLIMP_LABELS = {"field": "morphology", "linguistics_term": "agreement"}
AOA_WORDS = ("ball", "dog", "milk")  # the words of each revision in the made-up AoA file


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def _record(key: str, uid: str, i: int, rng) -> dict:
    """A made-up item of `uid` in the format of the zero-shot task `key`, the right candidate first."""
    a, b = rng.sample(NOUNS, 2)
    verb = rng.choice(VERBS)
    good, bad = f"The {a} {verb} the {b}.", f"The {a} the {verb} {b}."  # the same words in a worse order
    if key == "blimp":
        return {"sentence_good": good, "sentence_bad": bad, "UID": uid, **BLIMP_LABELS}
    if key == "blimp_supplement":  # the UID is the file's
        return {"sentence_good": good, "sentence_bad": bad}
    if key == "ewok":
        return {"Domain": uid, "Context1": f"The {a} is here.", "Target1": good, "Target2": bad}
    if key == "entity_tracking":  # the UID is <file>_<numops>_ops
        options = [f" the {a}.", f" the {b}.", " nothing."]
        return {
            "input_prefix": f"Box {i} holds the {a}. Box {i} holds",
            "options": options,
            "numops": int(uid.split("_")[-2]),
        }
    if key == "comps":
        return {"prefix_acceptable": f"A {a}", "prefix_unacceptable": f"A {b}", "property_phrase": "can fly."}
    return {"sentences": f"The blick{i}ness is here.\tThe blick{i}ity is here.", "ratio": rng.random()}  # wug


def _records(key: str, uid: str, n: int, rng) -> list[dict]:
    return [_record(key, uid, i, rng) for i in range(n)]


def write_evaluation_data(root: Path) -> ItemCounts:
    """ROOT/evaluation_data in the pipeline's layout, a few items per UID; returns their counts, the stand-in for
    the pipeline's table of the real data's."""
    rng = random.Random(0)
    full, fast = root / "evaluation_data" / "full_eval", root / "evaluation_data" / "fast_eval"
    counts = ItemCounts(
        full={
            "blimp": {"anaphor_number_agreement": 3, "regular_plural_subject_verb_agreement_1": 2},
            "blimp_supplement": {"hypernym": 2, "turn_taking": 1},
            "ewok": {"agent-properties": 2, "social-relations": 1},
            "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 1, "ambiref_0_ops": 1, "move_contents_1_ops": 1},
            "wug_adj": 5,
            "wug_past": 4,
            "comps": {"base": 2, "wugs": 1},
            "reading": 0,  # the rows of the reading file, below
            **{task: 4 for task in GLUE_TASKS},
        },
        fast={
            "blimp": 4,
            "blimp_supplement": 2,
            "ewok": 2,
            "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 2},  # the regular file's items only
            "wug_adj": 5,
            "wug_past": 4,
            "reading": 0,
        },
        aoa=len(AOA_WORDS),
    )
    for key, full_folder, fast_folder in (("blimp", "blimp_filtered", "blimp_fast"),
                                          ("blimp_supplement", "supplement_filtered", "supplement_fast"),
                                          ("ewok", "ewok_filtered", "ewok_fast")):  # fmt: skip
        for uid, n in counts.full[key].items():
            _jsonl(full / full_folder / f"{uid}.jsonl", _records(key, uid, n, rng))
            _jsonl(fast / fast_folder / f"{uid}.jsonl", _records(key, uid, counts.fast[key], rng))
    for folder, uids in ((full / "entity_tracking", counts.full["entity_tracking"]),
                         (fast / "entity_tracking_fast", counts.fast["entity_tracking"])):  # fmt: skip
        by_file = {}
        for uid, n in uids.items():
            by_file.setdefault(uid.rsplit("_", 2)[0], []).extend(_records("entity_tracking", uid, n, rng))
        for name, records in by_file.items():
            _jsonl(folder / f"{name}.jsonl", records)
    for key, folder in (("wug_adj", "wug_adj_nominalization"), ("wug_past", "wug_past_tense")):
        # one set, read from full_eval/ by the fast evaluation too, as staged
        _jsonl(full / folder / f"{folder}.jsonl", _records(key, key, counts.full[key], rng))
    for uid, n in counts.full["comps"].items():
        _jsonl(full / "comps" / f"comps_{uid}.jsonl", _records("comps", uid, n, rng))
    rows = len(reading.read_reading(write_reading_csv(full / "reading" / "reading_data.csv")))
    counts.full["reading"] = counts.fast["reading"] = rows
    for task in GLUE_TASKS:  # the fine-tuning tasks' training and dev files (MNLI's mismatched dev set too)
        spec = GLUE[task]
        splits = [(task, "train", 8), (task, "valid", counts.full[task])] + [("mnli-mm", "valid", 4)] * (task == "mnli")
        for entry, split, n in splits:
            records = [{**{name: f"the {rng.choice(NOUNS)} {rng.choice(VERBS)} it" for name in spec.fields},
                        "label": i % spec.num_labels} for i in range(n)]  # fmt: skip
            _jsonl(full / "glue_filtered" / f"{entry}.{split}.jsonl", records)
    return counts


@pytest.mark.slow
def test_the_submission_guide_runs_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the guide's relative paths: results/, evaluation_data/, runs/
    counts = write_evaluation_data(tmp_path)
    # 1. pretrain with the track's milestones (`checkpoint_words=strict-small`, six tiny steps past 1M, 2M, 3M words)
    run = milestone_run(tmp_path, seed=0)
    with local_hub(monkeypatch, tmp_path / "hf-cache") as server:
        # 2. push the revisions
        cli_main(["push", str(run), "--repo-id", REPO_ID, "--revisions"])
        assert set(server.repos[REPO_ID]["branches"]) == {*REVISIONS, "main"}
        # 3. score every revision: the fast tasks on each, every task on main
        fast_tasks = ["blimp", "supplement", "ewok", "entity_tracking", "wug_adj", "wug_past", "reading"]
        cli_main(["eval-babylm", REPO_ID, "--all-revisions", "--data", "evaluation_data/fast_eval",
                  "--tasks", *fast_tasks, "--out", "results"])  # fmt: skip
        summary = json.loads(Path("results/summary.json").read_text())["rows"]
        assert list(summary) == [*REVISIONS, "main"]
        cli_main(["eval-babylm", REPO_ID, "--revision", "main", "--data", "evaluation_data/full_eval", "--out",
                  "results"])  # fmt: skip
        # 4. fine-tune as the pipeline does, cut for a CPU
        glue = "evaluation_data/full_eval/glue_filtered"
        cpu = ["max_length=128", "epochs=1", "task_epochs={}", "training.use_cpu=true", "training.disable_tqdm=true"]
        cli_main(
            ["finetune-glue", "babylm-2025", f"model={REPO_ID}", f"data_dir={glue}", "predictions_dir=results", *cpu]
        )
    # 5. AoA runs with the official pipeline (we do not implement it: its word list is not staged); its output,
    # zero_shot/<backend>/AoA_word/surprisal.json with a set of words per revision, is made up here in its layout.
    aoa = {"results": [{"step": revision, "word": word, "surprisal": 4.5} for revision in REVISIONS
                       for word in AOA_WORDS]}  # fmt: skip
    aoa_file = Path("results", MODEL, "main", "zero_shot", "mlm", "AoA_word", "surprisal.json")
    aoa_file.parent.mkdir(parents=True)
    aoa_file.write_text(json.dumps(aoa))
    capsys.readouterr()
    # 6. collate: the guide's command holds the small sets to the pipeline's item counts, and names what is short ...
    with pytest.raises(SystemExit) as refused:
        cli_main(["collate", MODEL, "--results", "results", "--track", "strict-small", "--data", "evaluation_data",
                  "--up-to", REVISIONS[-1]])  # fmt: skip
    assert refused.value.code == 2 and "the pipeline requires" in capsys.readouterr().err
    # ... and given the small sets' counts, writes the submission
    out = collate("results", MODEL, "strict-small", data="evaluation_data", up_to=REVISIONS[-1], counts=counts)

    assert out == Path("results", MODEL, "all_full_preds_and_fast_scores_mlm.json")
    submission = json.loads(out.read_text())
    keys = [part.key for part in PARTS]
    assert list(submission) == [*keys, "aoa", "glue", "fast_eval_results"]
    for key in keys:
        required = counts.full[key]
        uids = set(required) if isinstance(required, dict) else {key}
        assert {uid.lower() for uid in submission[key]} == uids, key
    assert submission["aoa"] == aoa and sorted(submission["glue"]) == sorted(GLUE_TASKS)
    fast = submission["fast_eval_results"]
    assert list(fast) == [part.key for part in PARTS if part.fast]
    assert all(len(scores) == len(REVISIONS) for scores in fast.values())
    assert all(set(scores) == {"spr", "rt"} for scores in fast["reading"])
    # each revision's fast BLiMP score (accuracy per UID, a fraction) is eval-babylm's (the UIDs' mean, in percent)
    for revision, by_uid in zip(REVISIONS, fast["blimp"]):
        assert set(by_uid) == set(counts.full["blimp"])
        assert 100 * sum(by_uid.values()) / len(by_uid) == pytest.approx(summary[revision]["blimp"], abs=1e-9)
