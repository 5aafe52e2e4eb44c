"""The BabyLM 2025 reading task (issue 63) against a naive implementation written here from the official pipeline's
description (`babylm/evaluation-pipeline-2025`, `evaluation_pipeline/reading/run.py` and `evaluation_functions.py`):
one forward pass per word piece, the regressions' formulas parsed from the pipeline's formula strings and solved by
the normal equations.

The reading rows are made up here; the staged data in ../shared/data is only read.
"""

import csv
import gzip
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    READING_HEADER,
    READING_MEASURES,
    SHARED,
    write_reading_csv,
)

from elc_bert import InputError
from elc_bert.evaluation import babylm, reading
from elc_bert.evaluation.babylm import evaluate_babylm

STAGED = SHARED / "babylm_eval_2025" / "full_eval" / "reading" / "reading_data.csv.gz"
needs_shared = pytest.mark.skipif(not STAGED.is_file(), reason="../shared/data is not beside the repository")

# The pipeline's regressions, as its run.py writes them (statsmodels formulas: a:b is the product of a and b).
FORMULA = (
    "Subtlex_log10 + length + context_length + Subtlex_log10:length + Subtlex_log10:context_length + "
    "length:context_length"
)
SPILLOVER_FORMULA = (
    "Subtlex_log10 + length + context_length + prev_length + prev_pred + Subtlex_log10:length + "
    "Subtlex_log10:context_length + Subtlex_log10:prev_length + Subtlex_log10:prev_pred + length:context_length + "
    "length:prev_length + length:prev_pred + context_length:prev_length + context_length:prev_pred + "
    "prev_length:prev_pred"
)


# ----------------------------------------------------------------------------- naive word-level quantities
@torch.no_grad()
def naive_p(model, tokenizer, sentence: str, target: int, causal: bool) -> float:
    """The pipeline's get_p / get_p_mlm: the softmax at the last token (causal), or at the first of three mask
    tokens appended to the sentence (masked), one forward pass."""
    text = sentence if causal else sentence + tokenizer.mask_token * 3
    encoding = tokenizer(text, return_tensors="pt")
    ids = encoding["input_ids"]
    position = -1 if causal else (-3 if ids[0, -1] == tokenizer.mask_token_id else -4)
    logits = model(input_ids=ids, attention_mask=encoding["attention_mask"]).logits[0, position]
    return torch.softmax(logits, dim=-1)[target].item()


def naive_surprisal(model, tokenizer, sentence: str, word: str, causal: bool) -> float:
    """The pipeline's get_p2 / get_p2_mlm, then -log: the word's first token after the sentence; each later token
    decoded, appended to the sentence step by step, and predicted as the first token of its decoded text."""
    tokens = tokenizer(word, add_special_tokens=False)["input_ids"]
    probabilities = [naive_p(model, tokenizer, sentence, tokens[0], causal)]
    sentence = sentence + tokenizer.decode(tokens[0])
    for token in tokens[1:]:
        piece = tokenizer.decode(token)
        target = tokenizer(piece, add_special_tokens=False)["input_ids"][0]
        probabilities.append(naive_p(model, tokenizer, sentence, target, causal))
        sentence = sentence + piece
    return -math.log(np.prod(probabilities))


# ------------------------------------------------------------------------------------------ naive regression
def naive_rows(path: Path) -> list[dict]:
    """The rows as the pipeline's pandas reads them: empty cells missing, an empty item "None"."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["item"] = row["item"] or "None"
    return rows


def naive_fit(rows: list[dict], measure: str, formula: str) -> dict:
    """OLS of `measure` on an intercept and the formula's terms, over the rows where all of them are known: normal
    equations in float64, R^2, Gaussian AIC with one parameter per column, t and two-sided p of the last term."""
    from scipy.stats import t as student_t

    def value(row, name) -> float:  # a cell of the CSV, or pandas' number (NaN where missing)
        return math.nan if row[name] == "" else float(row[name])

    terms = [term.strip().split(":") for term in formula.split("+")]
    names = sorted({name for term in terms for name in term} | {measure})
    known = [row for row in rows if not any(math.isnan(value(row, name)) for name in names)]
    x = np.array([[1.0] + [math.prod(value(row, name) for name in term) for term in terms] for row in known])
    y = np.array([value(row, measure) for row in known])
    inverse = np.linalg.inv(x.T @ x)
    beta = inverse @ x.T @ y
    ssr = float(((y - x @ beta) ** 2).sum())
    n, k = x.shape
    t = beta[-1] / math.sqrt(ssr / (n - k) * inverse[-1, -1])
    return {
        "r2": 1 - ssr / float(((y - y.mean()) ** 2).sum()),
        "aic": n * math.log(2 * math.pi * ssr / n) + n + 2 * k,
        "coefficient": beta[-1],
        "t": t,
        "p": 2 * student_t.sf(abs(t), n - k),
    }


def naive_predictive_power(rows: list[dict], pred: list[float], prev_pred: list[float]) -> dict:
    """Every measure's record of both designs and the two scores, as run.py computes and reports them."""
    rows = [{**row, "pred": p, "prev_pred": q} for row, p, q in zip(rows, pred, prev_pred)]
    out, gain = {}, {}
    for design, formula in (("predictive_power", FORMULA), ("spillover", SPILLOVER_FORMULA)):
        out[design] = []
        for measure in READING_MEASURES:
            base, model = naive_fit(rows, measure, formula), naive_fit(rows, measure, formula + " + pred")
            out[design].append(
                {"Predicted variable": measure, "Coefficient": model["coefficient"],
                 "Number of standard deviations": model["t"], "P-value": model["p"], "R2": model["r2"],
                 "Change in R2 from baseline": model["r2"] - base["r2"], "AIC": model["aic"],
                 "Change in AIC from baseline": model["aic"] - base["aic"]}
            )  # fmt: skip
            gain[design, measure] = (model["r2"] - base["r2"]) / (1 - base["r2"]) * 100
    eye = [gain["predictive_power", m] for m in READING_MEASURES if "RT" in m]  # run.py's rule
    out["scores"] = {"eye_tracking": sum(eye) / len(eye), "self_paced_reading": gain["spillover", READING_MEASURES[4]]}
    return out


def assert_records_equal(ours: list[dict], naive: list[dict]) -> None:
    for mine, theirs in zip(ours, naive, strict=True):
        assert mine["Predicted variable"] == theirs["Predicted variable"]
        for key, value in theirs.items():
            if key != "Predicted variable":
                assert mine[key] == pytest.approx(value, rel=1e-7, abs=1e-9), (theirs["Predicted variable"], key)


# ------------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("causal", [False, True], ids=["mlm", "causal"])
def test_surprisals_equal_the_pipelines_word_by_word_procedure(causal, tokenizer, mlm, gpt, tmp_path):
    model = gpt if causal else mlm
    words = reading.read_reading(write_reading_csv(tmp_path / "reading_data.csv"))
    pred, prev_pred = reading.surprisals(model, tokenizer, words, causal, batch_tokens=256, progress=False)
    lengths = {len(tokenizer(w.word, add_special_tokens=False)["input_ids"]) for w in words}
    assert {1, 2} <= lengths and max(lengths) >= 3  # single and multi-token words (the decode-and-retokenize steps)
    for word, ours, ours_prev in zip(words, pred, prev_pred):
        assert ours == pytest.approx(naive_surprisal(model, tokenizer, word.context, word.word, causal), abs=1e-4)
        if word.prev_word is None:
            assert math.isnan(ours_prev)
        else:
            naive = naive_surprisal(model, tokenizer, word.prev_context, word.prev_word, causal)
            assert ours_prev == pytest.approx(naive, abs=1e-4)
    assert words[5].context == "None"  # the pipeline's fillna("None") of an empty item
    assert sum(math.isnan(value) for value in prev_pred) == 9  # each sentence's second word


def made_up_surprisals(path: Path, seed: int = 3) -> tuple[list, list, list]:
    """The rows of `path` and random surprisals for them (NaN for a missing previous word)."""
    words = reading.read_reading(path)
    rng = random.Random(seed)
    pred = [rng.uniform(1, 12) for _ in words]
    prev_pred = [math.nan if w.prev_word is None else rng.uniform(1, 12) for w in words]
    return words, pred, prev_pred


def test_regression_equals_the_naive_least_squares_of_the_pipelines_formulas(tmp_path):
    path = write_reading_csv(tmp_path / "reading_data.csv", sentences=12)
    words, pred, prev_pred = made_up_surprisals(path)
    ours = reading.predictive_power(words, pred, prev_pred)
    naive = naive_predictive_power(naive_rows(path), pred, prev_pred)
    assert_records_equal(ours["predictive_power"], naive["predictive_power"])
    assert_records_equal(ours["spillover"], naive["spillover"])
    assert ours["scores"] == pytest.approx(naive["scores"], rel=1e-7)
    result = reading.evaluate(words, pred, prev_pred)
    assert result["average"] == ours["scores"]["eye_tracking"] and result["by"]["score"] == ours["scores"]


# reading/run.py's records and scores and collate_preds.py's reading scores of `made_up_surprisals(seed)` on
# write_reading_csv(sentences=12), computed once as they compute them, with the pipeline's pins (statsmodels 0.14.4,
# patsy 1.0.1, pandas 2.2.3, numpy 2.2.5), on the same numbers (the CSV read with float_precision="round_trip"). The
# seeds are ones where rounding in another order (100 x (m - b) / (1 - b), a mean-centred TSS, ...) is seen.
STATSMODELS = {
    0: {
        "records": {
            ("predictive_power", "RTgopast"): {
                "Coefficient": "0x1.147aed824f538p-2", "Number of standard deviations": "0x1.e2470e533491ap-5",
                "P-value": "0x1.e80f26636d803p-1", "R2": "0x1.3f11958e46288p-4",
                "Change in R2 from baseline": "0x1.a98ad2e2a4000p-15", "AIC": "0x1.ae89971369e8bp+9",
                "Change in AIC from baseline": "0x1.ff00060767600p+0",
            },
            ("spillover", "self_paced_reading_time"): {
                "Coefficient": "-0x1.20834f6663dfep+3", "Number of standard deviations": "-0x1.d9668814a1b14p+0",
                "P-value": "0x1.24c001cc4bd62p-4", "R2": "0x1.7b832731abbfcp-2",
                "Change in R2 from baseline": "0x1.a3ca6ce697e40p-5", "AIC": "0x1.679a55870e9e3p+9",
                "Change in AIC from baseline": "-0x1.4f21053b2fd00p+1",
            },
        },
        "scores": {"eye_tracking": "0x1.c37172523799ap-2", "self_paced_reading": "0x1.e1da368d47a0dp+2"},
        "submission": {"spr": "0x1.3462b245f066fp-4", "rt": "0x1.20ec722023958p-8"},
    },
    2: {
        "records": {
            ("predictive_power", "RTgopast"): {
                "Coefficient": "0x1.9a3e23c995e0ep+1", "Number of standard deviations": "0x1.a6287376c9009p-1",
                "P-value": "0x1.a6a82c463685fp-2", "R2": "0x1.672f83a327ef8p-4",
                "Change in R2 from baseline": "0x1.4298fb79f0dc0p-7", "AIC": "0x1.ae288b89df8c7p+9",
                "Change in AIC from baseline": "0x1.3ce8f2f2aee00p+0",
            },
            ("spillover", "self_paced_reading_time"): {
                "Coefficient": "0x1.3869a75a120f9p+1", "Number of standard deviations": "0x1.eca05b94705a2p-2",
                "P-value": "0x1.4412d57fd9835p-1", "R2": "0x1.b55fd8f6f9c28p-3",
                "Change in R2 from baseline": "0x1.1c021306db100p-8", "AIC": "0x1.6e2cbb38fd9bfp+9",
                "Change in AIC from baseline": "0x1.acffb250edc00p+0",
            },
        },
        "scores": {"eye_tracking": "0x1.dc72ba383534cp+0", "self_paced_reading": "0x1.189699cbf500dp-1"},
        "submission": {"spr": "0x1.67272b428148bp-8", "rt": "0x1.30ed43fb0354fp-6"},
    },
}  # fmt: skip


# BLAS and libm differ in their last bits across CPU makes, so the floats held above are matched to a stated
# tolerance: relative 1e-9 is far above that noise (1e-16 to 1e-13 relative seen; 2e-12 for a difference of two R2s
# near each other) and far below any change of formula (a mean-centred TSS or another rounding order moves the sixth
# digit).
HELD_REL, HELD_ABS = 1e-9, 1e-12


def approx_held(held: dict) -> dict:
    return pytest.approx({key: float.fromhex(value) for key, value in held.items()}, rel=HELD_REL, abs=HELD_ABS)


@pytest.mark.parametrize("seed", sorted(STATSMODELS))
def test_the_regression_is_statsmodels_on_the_same_inputs(seed, tmp_path):
    """The records, the task's scores in percent (run.py: ((m - b) / (1 - b)) * 100, averaged) and a submission's
    fractions (collate_preds.py) are statsmodels' floats to 1e-9 relative (machine noise, not formula changes)."""
    path = write_reading_csv(tmp_path / "reading_data.csv", sentences=12)
    words, pred, prev_pred = made_up_surprisals(path, seed)
    ours, expected = reading.predictive_power(words, pred, prev_pred), STATSMODELS[seed]
    for (design, measure), fields in expected["records"].items():
        (record,) = [r for r in ours[design] if r["Predicted variable"] == measure]
        assert {key: record[key] for key in fields} == approx_held(fields), (design, measure)
    assert ours["scores"] == approx_held(expected["scores"])
    assert reading.submission_scores(words, pred, prev_pred) == approx_held(expected["submission"])


@needs_shared
def test_the_staged_reading_data_reads_and_regresses_as_the_pipeline_does():
    """The staged file read as run.py reads it (pandas' read_csv, whose missing values include the strings "None"
    and "NA"; the empty item filled with "None"): 1,726 rows, 206 without a previous word (one of them a prev_item
    "None"), 30 unknown frequencies dropped from the fits; the regressions equal the naive ones with made-up
    surprisals."""
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(STAGED, dtype={"item": str})
    frame["item"] = frame["item"].fillna("None")
    rows = frame.to_dict("records")
    words = reading.read_reading(STAGED)
    assert len(words) == len(rows) == 1726
    assert [w.context for w in words] == [row["item"] for row in rows]
    assert [w.prev_word is None for w in words] == [not isinstance(row["prev_item"], str) for row in rows]
    assert sum(w.prev_word is None for w in words) == 206
    for name in reading.NUMBER_COLUMNS:
        assert np.array_equal([w.values[name] for w in words], frame[name].to_numpy(float), equal_nan=True), name
    pred = [len(w.word) + 0.1 * (i % 7) for i, w in enumerate(words)]
    prev_pred = [math.nan if w.prev_word is None else len(w.prev_word) + 0.2 * (i % 5) for i, w in enumerate(words)]
    ours, naive = reading.predictive_power(words, pred, prev_pred), naive_predictive_power(rows, pred, prev_pred)
    assert_records_equal(ours["predictive_power"], naive["predictive_power"])
    assert_records_equal(ours["spillover"], naive["spillover"])


def test_eval_babylm_writes_the_pipelines_reading_predictions(tokenizer, mlm, tmp_path, monkeypatch):
    """`eval-babylm --tasks reading` writes <model>/main/zero_shot/mlm/reading/predictions.json as reading/run.py
    writes it ({"reading": {"predictions": [{"id": row, "pred", "prev_pred"}]}}, NaN where no previous word) and its
    report, with the two scores as summary columns; a rerun keeps the result."""
    data = tmp_path / "data"
    write_reading_csv(data / "full_eval" / "reading" / "reading_data.csv")
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: (mlm, tokenizer, "masked"))
    summary = evaluate_babylm("org/tiny-model", data, tmp_path / "out", ["reading"], progress=False)
    folder = tmp_path / "out" / "tiny-model" / "main" / "zero_shot" / "mlm" / "reading"
    written = json.loads((folder / "predictions.json").read_text())
    assert list(written) == ["reading"] and list(written["reading"]) == ["predictions"]
    entries = written["reading"]["predictions"]
    words = reading.read_reading(data / "full_eval" / "reading" / "reading_data.csv")
    assert [entry["id"] for entry in entries] == list(range(len(words)))
    assert all(set(entry) == {"id", "pred", "prev_pred"} for entry in entries)
    first = naive_surprisal(mlm, tokenizer, words[0].context, words[0].word, False)
    assert entries[0]["pred"] == pytest.approx(first, abs=1e-4) and math.isnan(entries[0]["prev_pred"])
    report = (folder / "report.txt").read_text().splitlines()
    row = summary["rows"]["main"]
    assert report == [
        f"EYE TRACKING SCORE: {row['reading']:.2f}",
        f"SELF-PACED READING SCORE: {row['reading_spr']:.2f}",
    ]
    assert len((folder / "predictive_power_spillover.jsonl").read_text().splitlines()) == len(READING_MEASURES)
    table = (tmp_path / "out" / "tiny-model" / "summary.md").read_text()
    assert "Reading (Eye Tracking) | Reading (Self-Paced Reading Time)" in table
    monkeypatch.setattr(reading, "surprisals", lambda *a, **k: pytest.fail("scored again"))
    assert evaluate_babylm("org/tiny-model", data, tmp_path / "out", ["reading"], progress=False) == summary


@pytest.mark.parametrize("column", ["prev_item", "RTgopast", "Subtlex_log10"])
def test_a_reading_file_without_a_column_is_refused_before_the_model_loads(column, tmp_path, monkeypatch):
    path = write_reading_csv(tmp_path / "data" / "reading" / "reading_data.csv")
    with path.open(newline="") as handle:
        rows = [[cell for name, cell in zip(READING_HEADER, row) if name != column] for row in csv.reader(handle)]
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(InputError, match=rf"reading_data\.csv: column '{column}' is missing"):
        evaluate_babylm("no-model-here", tmp_path / "data", tmp_path / "out", ["reading"], progress=False)
    assert not (tmp_path / "out").exists()


def test_bad_reading_rows_name_the_file_line_and_column(tmp_path):
    path = write_reading_csv(tmp_path / "reading_data.csv")
    lines = path.read_text().splitlines()
    cells = next(csv.reader([lines[3]]))
    cells[READING_HEADER.index("length")] = "long"
    lines[3] = ",".join(f'"{cell}"' for cell in cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"reading_data\.csv:4: column 'length' must be a number, got 'long'"):
        babylm.read_task("reading", tmp_path)


def _set_cells(path: Path, column: str, value: str, rows=None) -> None:
    """Writes `value` in `column` of the data rows `rows` (indices from 0; all when None)."""
    with path.open(newline="") as handle:
        lines = list(csv.reader(handle))
    for number, cells in enumerate(lines[1:]):
        if rows is None or number in rows:
            cells[READING_HEADER.index(column)] = value
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(lines)


@pytest.mark.parametrize("cell", ["inf", "-inf", "Infinity", "1e999", "NAN", "+nan"])
def test_a_reading_value_that_is_not_finite_is_refused(cell, tmp_path):
    # pandas reads the first four as infinite (the pipeline's scores come out NaN) and NAN, +nan as text, not missing
    path = write_reading_csv(tmp_path / "reading_data.csv")
    _set_cells(path, "RTfirstpass", cell, rows=[2])
    match = rf"reading_data\.csv:4: column 'RTfirstpass' must be a finite number .*got '{re.escape(cell)}'"
    with pytest.raises(InputError, match=match):
        babylm.read_task("reading", tmp_path)


@pytest.mark.parametrize("cell", ["", "NaN", "nan", "NA", "null"])
def test_a_missing_reading_value_stays_missing(cell, tmp_path):
    # pandas' missing values, which the pipeline's dropna leaves out of each fit
    path = write_reading_csv(tmp_path / "reading_data.csv")
    _set_cells(path, "RTfirstpass", cell, rows=[2])
    assert math.isnan(reading.read_reading(path)[2].values["RTfirstpass"])


def test_an_empty_measure_is_refused_naming_the_file_and_why(tmp_path):
    path = write_reading_csv(tmp_path / "reading_data.csv")
    _set_cells(path, "RTgopast", "")
    match = (
        r"reading_data\.csv: too few rows for the reading regressions: RTgopast \(predictive_power\): 0 rows left "
        r"after dropping missing values, 8 parameters to fit; RTgopast \(spillover\): 0 rows left .* 17 parameters"
    )
    with pytest.raises(InputError, match=match):
        reading.read_reading(path)
    # a submission fits no ERP measure (collate_preds.py): an empty one is no reason to refuse the file there
    _set_cells(path, "RTgopast", "250")
    _set_cells(path, "N400", "")
    with pytest.raises(InputError, match=r"N400 \(predictive_power\): 0 rows"):
        reading.read_reading(path)
    assert len(reading.read_reading(path, reading.SUBMISSION_FITS)) == 54


def test_a_file_with_fewer_rows_than_parameters_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    path = write_reading_csv(tmp_path / "data" / "reading" / "reading_data.csv")
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:6]))  # 5 rows, one frequency unknown
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    match = (
        r"reading_data\.csv: too few rows .*RTfirstfix, RTfirstpass, .*, PNP \(predictive_power\): 4 rows left after "
        r"dropping missing values, 8 parameters to fit; .*\(spillover\): 3 rows left .*17 parameters to fit$"
    )
    with pytest.raises(InputError, match=match):
        evaluate_babylm("no-model-here", tmp_path / "data", tmp_path / "out", ["reading"], progress=False)
    assert not (tmp_path / "out").exists()


def test_the_regressions_need_one_row_more_than_their_parameters(tmp_path):
    words, pred, prev_pred = made_up_surprisals(write_reading_csv(tmp_path / "reading_data.csv"))
    fit = [("predictive_power", "RTfirstfix")]  # 8 parameters: the constant, 3 predictors, 3 products, pred
    known = [i for i, w in enumerate(words) if not math.isnan(w.values["Subtlex_log10"])]
    for kept, refused in ((8, True), (9, False)):
        some = [p if i in known[:kept] else math.nan for i, p in enumerate(pred)]
        short = reading.too_few_rows(words, some, prev_pred, fit)
        assert short == ([f"RTfirstfix (predictive_power): {kept} rows left after dropping missing values, 8 "
                          "parameters to fit"] if refused else [])  # fmt: skip
    # called directly, with surprisals missing everywhere: the same refusal, not numpy's ValueError
    for scores in (reading.predictive_power, reading.submission_scores):
        with pytest.raises(InputError, match=r"too few rows .*\(predictive_power\): 0 rows left"):
            scores(words, [math.nan] * len(words), prev_pred)
