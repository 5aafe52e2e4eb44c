"""The BabyLM 2025 submission file (issue 63), against what the official pipeline's collate_preds.py writes.

collate_preds.py (babylm/evaluation-pipeline-2025 at 591121d) cannot run here (it is not ours to copy, and needs
statsmodels); its behaviour is written down below as the expectation (`expected_submission`, with naive float64
regressions for reading), and its reading scores of the tree were computed once with its own pinned statsmodels
(`STATSMODELS_READING`). The trees are small and made up here, in the pipeline's layout (the fast entity-tracking
set, regular items only, included), with their own item counts (`COUNTS`); the staged data in ../shared/data is only
read, to check the pipeline's counts as transcribed.
"""

import csv
import gzip
import io
import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from elc_bert import InputError
from elc_bert.evaluation import babylm
from elc_bert.evaluation.collate import PIPELINE_COUNTS, ItemCounts, collate
from elc_bert.runs.layout import track_revisions

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "babylm_eval_2025"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not beside the repository")

MODEL, BACKEND = "tiny-elc", "mlm"
REVISIONS = ["chck_1M", "chck_2M"]  # strict-small up to chck_2M
GLUE = ("boolq", "mnli", "mrpc", "multirc", "qqp", "rte", "wsc")
READING_ROWS = 40
COUNTS = ItemCounts(
    full={
        "blimp": {"adjunct_island": 3, "principle_a_c_command": 2},  # lower case, as the pipeline's table
        "blimp_supplement": {"hypernym": 2, "turn_taking": 1},
        "ewok": {"agent-properties": 2},
        "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 1, "ambiref_0_ops": 1},
        "wug_adj": 5,
        "wug_past": 4,
        "comps": {"base": 2, "wugs": 1},
        "reading": READING_ROWS,
        **{task: 1 + index % 3 for index, task in enumerate(GLUE)},
    },
    fast={
        "blimp": 2,
        "blimp_supplement": 1,
        "ewok": 2,
        "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 1},
        "wug_adj": 5,
        "wug_past": 4,
        "reading": READING_ROWS,
    },
    aoa=3,
)
FAST_UIDS = {  # the UID of each fast file, as the data spells it (BLiMP's own UIDs have capitals)
    "blimp": ["adjunct_island", "principle_A_c_command"],
    "blimp_supplement": ["hypernym", "turn_taking"],
    "ewok": ["agent-properties"],
}


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def _json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def make_fast_data(root: Path) -> Path:
    """evaluation_data/ with fast_eval/ (the fast BLiMP, supplement, EWoK and entity tracking sets: the last, regular
    items only, is not staged) and full_eval/ holding the sets the fast evaluation shares with the full one (the wug
    tests, reading), as staged. Returns evaluation_data/."""
    fast, full = root / "evaluation_data" / "fast_eval", root / "evaluation_data" / "full_eval"
    for uid in FAST_UIDS["blimp"]:
        _jsonl(fast / "blimp_fast" / f"{uid}.jsonl", [
            {"sentence_good": f"The {uid} {i} is good.", "sentence_bad": f"The {uid} {i} good is.", "UID": uid,
             "field": "syntax", "linguistics_term": "island_effects"} for i in range(2)])  # fmt: skip
    for uid in FAST_UIDS["blimp_supplement"]:
        _jsonl(fast / "supplement_fast" / f"{uid}.jsonl", [{"sentence_good": f"A {uid}.", "sentence_bad": f"{uid} A."}])
    _jsonl(fast / "ewok_fast" / "agent-properties.jsonl", [
        {"Context1": f"Ann has {i} cats.", "Target1": "She is kind.", "Target2": "She is a rock.",
         "Domain": "agent-properties"} for i in range(2)])  # fmt: skip
    _jsonl(fast / "entity_tracking_fast" / "regular.jsonl", [  # interleaved: the pipeline groups them by numops
        {"input_prefix": "Box A holds the apple. Box A holds", "options": [" the apple.", " the pen."], "numops": 0},
        {"input_prefix": "Box B is empty; the pen moves to B. Box B holds", "options": [" the pen.", " nothing."],
         "numops": 1},
        {"input_prefix": "Box C holds the cup. Box C holds", "options": [" the cup.", " the key."], "numops": 0},
    ])  # fmt: skip
    rng = random.Random(0)
    for name, n in (("wug_adj_nominalization", 5), ("wug_past_tense", 4)):
        items = [{"sentences": f"blick{i}ness\tblick{i}ity", "ratio": round(rng.random(), 3)} for i in range(n)]
        _jsonl(full / name / f"{name}.jsonl", items)
    (full / "reading").mkdir(parents=True)
    with gzip.open(full / "reading" / "reading_data.csv.gz", "wt", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        times = ["RTfirstfix", "RTfirstpass", "RTgopast", "RTrightbound", "self_paced_reading_time"]
        erp = ["ELAN", "LAN", "N400", "P600", "EPNP", "PNP"]  # read by the reading task, not by the collation
        writer.writerow(["", "item", "word", "Subtlex_log10", "length", "context_length", "prev_length", *times, *erp,
                         "prev_word", "prev_item"])  # fmt: skip
        for row in range(READING_ROWS):
            frequency = "" if row % 13 == 5 else f"{rng.uniform(1, 5):.6f}"  # missing, as in the real file
            times = [f"{rng.uniform(150, 400):.4f}" for _ in range(5)]
            previous = ["", ""] if row % 9 == 0 else ["placed", "Arthur"]
            writer.writerow([row, "Arthur placed", "the", frequency, rng.randint(1, 9), row % 7, rng.randint(1, 9)]
                            + times + ["0.5"] * len(erp) + previous)  # fmt: skip
    return root / "evaluation_data"


def _pred_entries(uid: str, n: int, pred=lambda i: "x") -> dict:
    return {"predictions": [{"id": f"{uid}_{i}", "pred": pred(i)} for i in range(n)]}


def _right(revision_index: int, item: int) -> bool:
    return (item + revision_index) % 3 != 0


def make_tree(root: Path, data: Path) -> Path:
    """results/tiny-elc/{main,chck_1M,chck_2M}/... in the pipeline's layout, with every file the collation asks
    for. Fast predictions are right or wrong by `_right`; a few have stray spaces, which the pipeline strips."""
    model = root / "results" / MODEL
    zero_shot = model / "main" / "zero_shot" / BACKEND
    for folder, key in (("blimp/blimp_filtered", "blimp"), ("blimp/supplement_filtered", "blimp_supplement"),
                        ("ewok/ewok_filtered", "ewok"), ("entity_tracking/entity_tracking", "entity_tracking"),
                        ("comps/comps", "comps")):  # fmt: skip
        uids = {"blimp": ["adjunct_island", "principle_A_c_command"]}.get(key, COUNTS.full[key])
        _json(zero_shot / folder / "predictions.json",
              {uid: _pred_entries(uid, COUNTS.full[key][uid.lower()]) for uid in uids})  # fmt: skip
    for folder, key in (("wug_adj/wug_adj_nominalization", "wug_adj"), ("wug_past/wug_past_tense", "wug_past")):
        entries = [{"id": f"{key}_{i}", "pred": "blickness", "prob": 0.1 * i} for i in range(COUNTS.full[key])]
        _json(zero_shot / folder / "predictions.json", {key: {"predictions": entries}})
    _json(zero_shot / "reading" / "predictions.json", _reading_predictions(random.Random(1)))
    words = [{"step": r, "word": w, "surprisal": 3.5} for r in REVISIONS for w in ("cat", "dog", "ball")]
    _json(zero_shot / "AoA_word" / "surprisal.json", {"results": words})
    for task in GLUE:
        _json(model / "main" / "finetune" / task / "predictions.json",
              {task: _pred_entries(task, COUNTS.full[task], lambda i: i % 2)})  # fmt: skip

    for index, revision in enumerate(REVISIONS):
        zero_shot = model / revision / "zero_shot" / BACKEND
        for key, folder, data_folder, field in (
            ("blimp", "blimp/blimp_fast", "blimp_fast", ("sentence_good", "sentence_bad")),
            ("blimp_supplement", "blimp/supplement_fast", "supplement_fast", ("sentence_good", "sentence_bad")),
            ("ewok", "ewok/ewok_fast", "ewok_fast", ("Target1", "Target2")),
        ):
            out = {}
            for uid in FAST_UIDS[key]:
                records = [json.loads(line) for line in (data / "fast_eval" / data_folder / f"{uid}.jsonl").open()]
                preds = [r[field[0]] if _right(index, i) else r[field[1]] for i, r in enumerate(records)]
                preds = [" " + p if key == "ewok" else p for p in preds]  # our EWoK completions start with a space
                out[uid] = {"predictions": [{"id": f"{uid}_{i}", "pred": p} for i, p in enumerate(preds)]}
            _json(zero_shot / folder / "predictions.json", out)
        records = [json.loads(line) for line in (data / "fast_eval" / "entity_tracking_fast" / "regular.jsonl").open()]
        out = {}
        for record in records:  # in file order within each UID
            uid = f"regular_{record['numops']}_ops"
            entries = out.setdefault(uid, {"predictions": []})["predictions"]
            option = record["options"][0 if _right(index, len(entries)) else 1]
            entries.append({"id": f"{uid}_{len(entries)}", "pred": option})
        _json(zero_shot / "entity_tracking" / "entity_tracking_fast" / "predictions.json", out)
        rng = random.Random(10 + index)
        for key, folder in (("wug_adj", "wug_adj/wug_adj_nominalization"), ("wug_past", "wug_past/wug_past_tense")):
            entries = [{"id": f"{key}_{i}", "pred": "x", "prob": rng.random()} for i in range(COUNTS.fast[key])]
            _json(zero_shot / folder / "predictions.json", {key: {"predictions": entries}})
        _json(zero_shot / "reading" / "predictions.json", _reading_predictions(rng))
    return root / "results"


def _reading_predictions(rng) -> dict:
    """The pipeline's reading predictions: "pred" a word's surprisal, "prev_pred" the previous word's (NaN for a
    sentence's first word, which json writes as NaN)."""
    entries = [{"id": i, "pred": rng.uniform(1, 12), "prev_pred": math.nan if i % 9 == 0 else rng.uniform(1, 12)}
               for i in range(READING_ROWS)]  # fmt: skip
    return {"reading": {"predictions": entries}}


@pytest.fixture
def tree(tmp_path):
    data = make_fast_data(tmp_path)
    return make_tree(tmp_path, data), data


def run(tree, **options) -> Path:
    results, data = tree
    return collate(results, MODEL, "strict-small", data=data, up_to=REVISIONS[-1], counts=COUNTS, **options)


# ------------------------------------------------------------------------- the pipeline's behaviour, written down
def naive_r_squared(y, columns) -> float:
    """R² of OLS with an intercept, by least squares in float64 (statsmodels' rsquared with a constant)."""
    design = np.column_stack([np.ones(len(y)), *columns])
    residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return 1 - residual @ residual / ((y - y.mean()) @ (y - y.mean()))


def naive_reading(data: Path, predictions: list[dict]) -> dict:
    """collate_preds.py's _calculate_reading_results: for each eye-tracking time, OLS of `dv ~ Subtlex_log10 +
    length + context_length + their pairwise products` with and without `+ pred`, over the rows where the formula's
    columns are all present; the gain (R2_model - R2_baseline) / (1 - R2_baseline), averaged ("rt"); the same for
    self_paced_reading_time with prev_length and prev_pred added to the baseline ("spr")."""
    with gzip.open(data / "full_eval" / "reading" / "reading_data.csv.gz", "rt", encoding="utf-8") as handle:
        rows = list(csv.DictReader(io.StringIO(handle.read())))
    column = {name: np.array([float(row[name]) if row[name] else np.nan for row in rows]) for name in rows[0]
              if name not in ("", "item", "word", "prev_word", "prev_item")}  # fmt: skip
    column["pred"] = np.array([p["pred"] for p in predictions], dtype=float)
    column["prev_pred"] = np.array([p["prev_pred"] for p in predictions], dtype=float)

    def gain(dv, baseline):
        def r2(names):
            keep = ~np.isnan(np.column_stack([column[n] for n in [dv, *names]])).any(axis=1)
            mains = [column[n][keep] for n in names]
            pairs = [column[a][keep] * column[b][keep] for i, a in enumerate(baseline) for b in baseline[i + 1 :]]
            return naive_r_squared(column[dv][keep], mains + pairs)

        before = r2(baseline)
        return (r2([*baseline, "pred"]) - before) / (1 - before)

    rt = [gain(dv, ["Subtlex_log10", "length", "context_length"]) for dv in
          ("RTfirstfix", "RTfirstpass", "RTgopast", "RTrightbound")]  # fmt: skip
    spr = gain("self_paced_reading_time", ["Subtlex_log10", "length", "context_length", "prev_length", "prev_pred"])
    return {"spr": spr, "rt": sum(rt) / len(rt)}


def expected_submission(results: Path, data: Path) -> dict:
    """What collate_preds.py (--fast) writes for the tree: collate_full_eval_preds's dict, its keys in this order,
    each full file's JSON as it is (the seven fine-tuning files merged under "glue", AoA's surprisal.json under
    "aoa"), then "fast_eval_results" from get_fast_eval_metrics: for each fast key a list over the revisions in
    order, of {UID: accuracy as a fraction} (_calculate_target_results, _calculate_target_et_results), {UID:
    Spearman's rho of "prob" against the human "ratio"} (_calculate_wugs_results), and {"spr", "rt"} for reading."""
    model = results / MODEL
    main = model / "main" / "zero_shot" / BACKEND
    load = lambda path: json.loads(path.read_text())  # noqa: E731
    out = {
        "blimp": load(main / "blimp" / "blimp_filtered" / "predictions.json"),
        "blimp_supplement": load(main / "blimp" / "supplement_filtered" / "predictions.json"),
        "ewok": load(main / "ewok" / "ewok_filtered" / "predictions.json"),
        "entity_tracking": load(main / "entity_tracking" / "entity_tracking" / "predictions.json"),
        "wug_adj": load(main / "wug_adj" / "wug_adj_nominalization" / "predictions.json"),
        "wug_past": load(main / "wug_past" / "wug_past_tense" / "predictions.json"),
        "comps": load(main / "comps" / "comps" / "predictions.json"),
        "reading": load(main / "reading" / "predictions.json"),
        "aoa": load(main / "AoA_word" / "surprisal.json"),
        "glue": {task: load(model / "main" / "finetune" / task / "predictions.json")[task] for task in GLUE},
    }
    fast = {key: [] for key in ("blimp", "blimp_supplement", "ewok", "entity_tracking", "wug_adj", "wug_past",
                                "reading")}  # fmt: skip
    for index, revision in enumerate(REVISIONS):
        fast["blimp"].append({uid: sum(_right(index, i) for i in range(2)) / 2 for uid in FAST_UIDS["blimp"]})
        fast["blimp_supplement"].append({uid: float(_right(index, 0)) for uid in FAST_UIDS["blimp_supplement"]})
        fast["ewok"].append({"agent-properties": sum(_right(index, i) for i in range(2)) / 2})
        fast["entity_tracking"].append({"regular_0_ops": sum(_right(index, i) for i in range(2)) / 2,
                                        "regular_1_ops": float(_right(index, 0))})  # fmt: skip
        zero_shot = model / revision / "zero_shot" / BACKEND
        for key, name in (("wug_adj", "wug_adj_nominalization"), ("wug_past", "wug_past_tense")):
            probs = [p["prob"] for p in load(zero_shot / key / name / "predictions.json")[key]["predictions"]]
            ratios = [json.loads(line)["ratio"] for line in (data / "full_eval" / name / f"{name}.jsonl").open()]
            fast[key].append({key: spearmanr(probs, ratios)[0]})
        predictions = load(zero_shot / "reading" / "predictions.json")["reading"]["predictions"]
        fast["reading"].append(naive_reading(data, predictions))
    out["fast_eval_results"] = fast
    return out


# ----------------------------------------------------------------------------------------------------- the tests
def test_the_revisions_are_the_pipelines():
    # collate_preds.py's STRICT_SMALL_FAST_REVISIONS and OTHER_FAST_REVISIONS (all tracks but strict-small)
    small = [f"chck_{i}M" for i in range(1, 10)] + [f"chck_{i * 10}M" for i in range(1, 11)]
    other = [f"chck_{i}M" for i in range(1, 10)] + [f"chck_{i * 10}M" for i in range(1, 10)]
    other += [f"chck_{i * 100}M" for i in range(1, 11)]
    assert track_revisions("strict-small") == small and len(small) == 19
    assert track_revisions("strict") == other == track_revisions("interaction") and len(other) == 28
    assert track_revisions("strict", up_to="chck_20M") == small[:11]  # "up until the one you trained" (the README)
    with pytest.raises(InputError, match="chck_200M"):
        track_revisions("strict-small", up_to="chck_200M")
    with pytest.raises(InputError, match="multimodal.*vision"):
        track_revisions("multimodal")


def test_a_complete_tree_collates_to_the_pipelines_file(tree):
    results, data = tree
    written = run(tree)
    assert written == results / MODEL / "all_full_preds_and_fast_scores_mlm.json"  # the pipeline's output_path
    text = written.read_text()
    got, expected = json.loads(text), expected_submission(results, data)
    assert text == json.dumps(got)  # json.dump with its defaults: one line, ", " and ": ", NaN as NaN
    assert list(got) == list(expected)
    assert list(got["fast_eval_results"]) == list(expected["fast_eval_results"])
    for key in expected:
        if key != "fast_eval_results":
            assert json.dumps(got[key]) == json.dumps(expected[key]), key  # as read, in order (NaN included)
    for key, per_revision in expected["fast_eval_results"].items():
        assert len(got["fast_eval_results"][key]) == len(REVISIONS)
        for have, want in zip(got["fast_eval_results"][key], per_revision):
            assert list(have) == list(want), key
            if key == "reading":
                assert have == pytest.approx(want, rel=1e-9, abs=1e-12)
            else:
                assert have == want, key  # the same float: the same counts, the same scipy call
    assert 0 < got["fast_eval_results"]["blimp"][0]["adjunct_island"] < 1  # a mix of right and wrong predictions


# The pipeline's _calculate_reading_results, run once on this tree with its requirements.txt's statsmodels 0.14.4,
# patsy 1.0.1, pandas 2.2.3 and numpy 2.2.5: its floats, per revision.
STATSMODELS_READING = [
    {"spr": float.fromhex("0x1.186e4ac486603p-4"), "rt": float.fromhex("0x1.1c143ed5e4aeep-6")},
    {"spr": float.fromhex("0x1.8e8f6701a7559p-22"), "rt": float.fromhex("0x1.13acfed0eb6fep-8")},
]


def test_the_reading_scores_are_the_pipelines_on_the_same_inputs(tree):
    # to 1e-9 relative: BLAS's last bits differ across CPU makes (test_reading.py states the noise seen)
    got = json.loads(run(tree).read_text())["fast_eval_results"]["reading"]
    assert got == [pytest.approx(revision, rel=1e-9, abs=1e-12) for revision in STATSMODELS_READING]


def test_the_fast_scores_of_our_own_predictions_are_eval_babylms(tree, tmp_path):
    # predictions written by eval-babylm's writer go in as they are, and the collation's fast BLiMP accuracy is
    # eval-babylm's own accuracy of them (a fraction here, percent there)
    results, data = tree
    items = babylm.read_task("blimp", data / "fast_eval" / "blimp_fast")
    scores = [[-1.0, -2.0] if i % 3 else [-3.0, -2.5] for i in range(len(items))]
    path = results / MODEL / "chck_1M" / "zero_shot" / BACKEND / "blimp" / "blimp_fast" / "predictions.json"
    path.write_text(json.dumps(babylm.TASKS["blimp"].predictions(items, scores)))
    got = json.loads(run(tree).read_text())["fast_eval_results"]["blimp"][0]
    ours = babylm.TASKS["blimp"].evaluate(items, scores)["by"]["UID"]
    assert got == pytest.approx({uid: accuracy / 100 for uid, accuracy in ours.items()}, abs=1e-12)


def test_the_fast_copies_come_before_the_full_twins(tree):
    # a fast_eval/ copy of a set the fast evaluation shares with the full one is the one read
    results, data = tree
    ratios_file = data / "full_eval" / "wug_past_tense" / "wug_past_tense.jsonl"
    fast_copy = data / "fast_eval" / "wug_past_tense" / "wug_past_tense.jsonl"
    fast_copy.parent.mkdir()
    records = [json.loads(line) for line in ratios_file.open()]
    _jsonl(fast_copy, [{**r, "ratio": 1 - r["ratio"]} for r in records])
    rho = json.loads(run(tree).read_text())["fast_eval_results"]["wug_past"][1]["wug_past"]
    assert rho == pytest.approx(-expected_submission(results, data)["fast_eval_results"]["wug_past"][1]["wug_past"])


MISSING = [  # (a file or folder of the tree, the words the refusal names it by)
    ("chck_2M", ["revision chck_2M"]),
    ("main/zero_shot/mlm/comps/comps/predictions.json", ["comps/comps/predictions.json", "comps, revision main"]),
    ("main/zero_shot/mlm/reading/predictions.json", ["reading/predictions.json", "reading, revision main"]),
    ("main/zero_shot/mlm/AoA_word/surprisal.json", ["AoA_word/surprisal.json", "aoa, revision main"]),
    ("main/finetune/wsc", ["finetune/wsc/predictions.json", "wsc, revision main"]),
    ("main/finetune/multirc/predictions.json", ["multirc, revision main"]),
    ("chck_1M/zero_shot/mlm/entity_tracking/entity_tracking_fast/predictions.json",
     ["entity_tracking_fast/predictions.json", "entity_tracking fast, revision chck_1M"]),
    ("chck_2M/zero_shot/mlm/reading/predictions.json", ["reading fast, revision chck_2M"]),
    ("chck_2M/zero_shot/mlm/wug_adj/wug_adj_nominalization/predictions.json", ["wug_adj fast, revision chck_2M"]),
]  # fmt: skip


@pytest.mark.parametrize(("piece", "named"), MISSING, ids=[piece for piece, _ in MISSING])
def test_each_missing_piece_is_named_and_nothing_is_written(tree, piece, named):
    results, _ = tree
    out = results / MODEL / "all_full_preds_and_fast_scores_mlm.json"
    out.write_text("an earlier submission")
    target = results / MODEL / piece
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(InputError) as error:
        run(tree)
    for words in named:
        assert words in str(error.value)
    assert "\n" not in str(error.value) and out.read_text() == "an earlier submission"


def test_every_missing_piece_is_named_at_once(tree):
    results, _ = tree
    (results / MODEL / "main" / "finetune" / "rte" / "predictions.json").unlink()
    shutil.rmtree(results / MODEL / "chck_1M")
    with pytest.raises(
        InputError,
        match=r"2 problem\(s\): \S*/main/finetune/rte/predictions.json: missing.*revision chck_1M: no folder",
    ):
        run(tree)


def _edit(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


WRONG = [  # (a predictions file, a change to it, the words the refusal names it by)
    ("main/zero_shot/mlm/blimp/blimp_filtered/predictions.json",
     lambda v: v["adjunct_island"]["predictions"].append({"id": "extra", "pred": "x"}),
     "UID adjunct_island has 4 predictions, the pipeline requires 3"),
    ("main/zero_shot/mlm/blimp/blimp_filtered/predictions.json", lambda v: v.pop("principle_A_c_command"),
     "no predictions for UID principle_a_c_command"),
    ("main/zero_shot/mlm/entity_tracking/entity_tracking/predictions.json",
     lambda v: v.update(regular_7_ops=v.pop("ambiref_0_ops")), "UID regular_7_ops is not one of the task's UIDs"),
    ("main/zero_shot/mlm/reading/predictions.json", lambda v: v["reading"]["predictions"].pop(),
     f"UID reading has {READING_ROWS - 1} predictions, the pipeline requires {READING_ROWS}"),
    ("main/finetune/qqp/predictions.json", lambda v: v["qqp"]["predictions"].pop(),
     "(qqp): UID qqp has 1 predictions, the pipeline requires 2"),
    ("main/finetune/rte/predictions.json", lambda v: v.update(wsc=v.pop("rte")), "UID wsc is also"),
    ("main/zero_shot/mlm/AoA_word/surprisal.json", lambda v: v["results"].pop(), "revision chck_2M has 2 words"),
    ("main/zero_shot/mlm/AoA_word/surprisal.json", lambda v: v["results"].append({"step": "chck_3M"}),
     "results for revision chck_3M"),
    ("chck_2M/zero_shot/mlm/blimp/blimp_fast/predictions.json", lambda v: v.pop("adjunct_island"),
     "no predictions for UID adjunct_island"),
    ("chck_1M/zero_shot/mlm/ewok/ewok_fast/predictions.json",
     lambda v: v["agent-properties"]["predictions"].pop(), "(ewok fast, revision chck_1M): UID agent-properties has 1"),
    ("chck_1M/zero_shot/mlm/entity_tracking/entity_tracking_fast/predictions.json",
     lambda v: v.update(ambiref_0_ops=v.pop("regular_1_ops")), "UID ambiref_0_ops is not one of the task's UIDs"),
    ("chck_2M/zero_shot/mlm/wug_past/wug_past_tense/predictions.json",
     lambda v: v["wug_past"]["predictions"][2].pop("prob"), 'UID wug_past, prediction 2 has no "prob"'),
    ("chck_2M/zero_shot/mlm/reading/predictions.json", lambda v: v.update(other=v.pop("reading")),
     'no UID "reading"'),
    # spearmanr would rank "0.3" as text, statsmodels fit "4.2" as a category, an infinite surprisal give NaN scores
    ("chck_2M/zero_shot/mlm/wug_past/wug_past_tense/predictions.json",
     lambda v: v["wug_past"]["predictions"][1].update(prob="0.3"),
     """UID wug_past, prediction 1 (id 'wug_past_1') has "prob" '0.3', not a number"""),
    ("chck_1M/zero_shot/mlm/wug_adj/wug_adj_nominalization/predictions.json",
     lambda v: v["wug_adj"]["predictions"][0].update(prob=math.nan), 'prediction 0 (id \'wug_adj_0\') has "prob" nan'),
    ("chck_1M/zero_shot/mlm/reading/predictions.json", lambda v: v["reading"]["predictions"][2].update(pred="4.2"),
     """UID reading, prediction 2 (id 2) has "pred" '4.2', not a number"""),
    ("chck_2M/zero_shot/mlm/reading/predictions.json",
     lambda v: v["reading"]["predictions"][3].update(prev_pred=math.inf), 'prediction 3 (id 3) has "prev_pred" inf'),
    ("chck_1M/zero_shot/mlm/reading/predictions.json",
     lambda v: [entry.update(pred=None) for entry in v["reading"]["predictions"]],
     "reading/predictions.json: too few rows for the reading regressions: RTfirstfix, RTfirstpass, RTgopast, "
     "RTrightbound (predictive_power): 0 rows left after dropping missing values, 8 parameters to fit; "
     "self_paced_reading_time (spillover): 0 rows left after dropping missing values, 17 parameters to fit"),
]  # fmt: skip


@pytest.mark.parametrize(("file", "change", "named"), WRONG, ids=[named[:40] for _, _, named in WRONG])
def test_a_wrong_item_count_or_shape_is_named(tree, file, change, named):
    results, _ = tree
    _edit(results / MODEL / file, change)
    with pytest.raises(InputError) as error:
        run(tree)
    assert named in str(error.value) and file.split("/")[0] in str(error.value)
    assert not (results / MODEL / "all_full_preds_and_fast_scores_mlm.json").exists()


def test_bad_reading_data_is_named_with_the_other_problems(tree):
    # an infinite reading time, and too few rows for the submission's fits, in the one list, before anything is written
    results, data = tree
    path = data / "full_eval" / "reading" / "reading_data.csv.gz"
    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    header = next(csv.reader(lines[:1]))
    cells = next(csv.reader(lines[4:5]))
    cells[header.index("RTgopast")] = "inf"
    edited = io.StringIO()
    csv.writer(edited).writerow(cells)
    path.write_bytes(gzip.compress("".join([*lines[:4], edited.getvalue(), *lines[5:]]).encode()))
    _edit(results / MODEL / "chck_1M/zero_shot/mlm/ewok/ewok_fast/predictions.json",
          lambda v: v["agent-properties"]["predictions"].pop())  # fmt: skip
    with pytest.raises(InputError, match=r"2 problem\(s\): .*UID agent-properties has 1 .*reading_data\.csv\.gz:5: "
                       r"column 'RTgopast' must be a finite number .*got 'inf'$"):  # fmt: skip
        run(tree)
    path.write_bytes(gzip.compress("".join(lines[:10]).encode()))  # 9 rows: the spillover fit has 17 parameters
    with pytest.raises(InputError, match=r"csv\.gz: too few rows .*self_paced_reading_time \(spillover\): [0-9] rows"):
        run(tree)
    assert not (results / MODEL / "all_full_preds_and_fast_scores_mlm.json").exists()


def test_fast_data_that_is_not_the_predictions_set_is_named(tree):
    # the pipeline zips predictions with the data file's lines and would score a shorter file silently
    results, data = tree
    path = data / "fast_eval" / "blimp_fast" / "principle_A_c_command.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(InputError, match="UID principle_A_c_command has 2 predictions, its fast data .* 1 items"):
        run(tree)
    path.unlink()
    with pytest.raises(InputError, match=r"1 problem\(s\): \S*principle_A_c_command\.jsonl: missing \(the fast data"):
        run(tree)  # named once, not at each revision


def test_bad_arguments_are_named(tree):
    results, data = tree
    with pytest.raises(InputError, match="no results folder for model other"):
        collate(results, "other", "strict-small", data=data)
    with pytest.raises(InputError, match="backend 'gpt'"):
        collate(results, MODEL, "strict-small", data=data, backend="gpt")
    (results / MODEL / "main" / "zero_shot" / "causal").mkdir()
    with pytest.raises(InputError, match="cannot tell the backend.*causal, mlm"):
        collate(results, MODEL, "strict-small", data=data)
    with pytest.raises(InputError, match="track 'strict_small'"):
        collate(results, MODEL, "strict_small", data=data)


def test_the_full_track_asks_for_every_revision(tree):
    results, data = tree
    with pytest.raises(InputError) as error:
        collate(results, MODEL, "strict", data=data, counts=COUNTS)
    message = str(error.value)
    assert "26 problem(s)" in message and "revision chck_3M" in message and "and 14 more" in message


def test_a_model_path_is_named_by_its_stem_as_the_pipeline_names_it(tree):
    results, data = tree
    out = collate(results, f"/models/{MODEL}.v1", "strict-small", data=data, up_to=REVISIONS[-1], counts=COUNTS)
    assert out.parent == results / MODEL


@needs_shared
def test_the_pipelines_counts_match_the_staged_data():
    # the transcribed tables against the staged 2025 files: the full EWoK, supplement, entity tracking, wug and
    # reading sets, and the fast BLiMP set's UIDs (the full BLiMP set is not staged)
    def lines(path):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    full = SHARED / "full_eval"
    for folder, key in (("ewok_filtered", "ewok"), ("supplement_filtered", "blimp_supplement")):
        counts = {}
        for path in (full / folder).iterdir():
            for record in lines(path):
                uid = record["Domain"] if key == "ewok" else path.name.split(".")[0]
                counts[uid] = counts.get(uid, 0) + 1
        assert counts == PIPELINE_COUNTS.full[key]
    entity = {}
    for path in (full / "entity_tracking").iterdir():
        for record in lines(path):
            uid = f"{path.name.split('.')[0]}_{record['numops']}_ops"
            entity[uid] = entity.get(uid, 0) + 1
    assert entity == PIPELINE_COUNTS.full["entity_tracking"]
    assert len(lines(full / "wug_adj_nominalization" / "wug_adj_nominalization.jsonl.gz")) == 200
    assert len(lines(full / "wug_past_tense" / "wug_past_tense.jsonl.gz")) == 50
    with gzip.open(full / "reading" / "reading_data.csv.gz", "rt", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == PIPELINE_COUNTS.full["reading"] == 1726
    fast = {
        path.name.split(".")[0].lower(): len(lines(path)) for path in (SHARED / "fast_eval" / "blimp_fast").iterdir()
    }
    assert set(fast) == set(PIPELINE_COUNTS.full["blimp"]) and set(fast.values()) == {PIPELINE_COUNTS.fast["blimp"]}
