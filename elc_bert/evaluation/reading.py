"""The BabyLM 2025 reading task, computed as the official pipeline computes it (`babylm/evaluation-pipeline-2025`,
`evaluation_pipeline/reading/run.py` and `reading/evaluation_functions.py`; De Varda et al., 2023).

Each row of `reading_data.csv` is a word of a sentence with human measures of reading it (eye tracking: RTfirstfix,
RTfirstpass, RTgopast, RTrightbound; self-paced reading time; the ERP components ELAN, LAN, N400, P600, EPNP, PNP)
and its context (`item`, the words before it), as well as the previous word and its context (`prev_word`,
`prev_item`). The model gives one word-level quantity: the surprisal of the word after its context, -log p(word |
item) in nats (`pred`), and the same for the previous word (`prev_pred`, the spillover predictor). The word's
probability is the pipeline's:

    the word's tokens t_1..t_k (tokenized alone, no special tokens);
    p(t_1 | item), then for each later token the text of the tokens so far is appended to the context and the next
    target is the first token of that token's text tokenized again; p(word) = the product.
    A causal LM: p(t | context) from the logits at the last token of the context (tokenized with its special tokens).
    A masked LM: the context followed by three mask tokens (tokenized with its special tokens), the logits at the
    first of them.

The regression, per measure, is ordinary least squares (the pipeline fits it with statsmodels' formula API; `ols`
does statsmodels' arithmetic step by step, so it gives its floats to about 1e-12 relative on the same inputs (the
last bits follow the machine's BLAS; tested at 1e-9) and the task needs nothing beyond the `eval` extra's scipy, for
the p-values). Beside the pipeline run on the same model, the surprisals agree within float32 noise (<= 1.3e-6 nats
seen over the 1,726 words), not bit for bit:

    baseline:   measure ~ Subtlex_log10 + length + context_length + their pairwise products
    model:      baseline + pred
    spillover:  measure ~ Subtlex_log10 + length + context_length + prev_length + prev_pred + their pairwise
                products, and the same + pred

each on the rows where every variable of its fit is known. The gain of a measure is (R^2_model - R^2_baseline) /
(1 - R^2_baseline), the share of what the baseline left unexplained that the surprisal explains (`gain`). Reported
by the task (reading/run.py): the coefficient of `pred`, its t value and p-value, R^2 and AIC of the model and their
change from the baseline, for every measure and both designs, and the scores in percent, the gain x 100 averaged over
the four eye-tracking measures ("eye tracking score", first design) and for the self-paced reading time (second
design). In a submission (collate_preds.py): the same two as fractions, "rt" and "spr" (`submission_scores`).
"""

import csv
import io
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np

from ..data.text import read_text
from ..extras import needs
from ..models.errors import InputError
from ..scoring import DEFAULT_BATCH_TOKENS, next_token_log_probs, token_pseudo_log_likelihoods

logger = logging.getLogger(__name__)

EYE_TRACKING = ("RTfirstfix", "RTfirstpass", "RTgopast", "RTrightbound")
SELF_PACED = "self_paced_reading_time"
MEASURES = (*EYE_TRACKING, SELF_PACED, "ELAN", "LAN", "N400", "P600", "EPNP", "PNP")
PREDICTORS = ("Subtlex_log10", "length", "context_length")
SPILLOVER_PREDICTORS = (*PREDICTORS, "prev_length", "prev_pred")
TEXT_COLUMNS = ("item", "word", "prev_item", "prev_word")
NUMBER_COLUMNS = (*PREDICTORS, "prev_length", *MEASURES)
COLUMNS = (*TEXT_COLUMNS, *NUMBER_COLUMNS)  # what the task reads; a file must have them all
DESIGNS = {"predictive_power": PREDICTORS, "spillover": SPILLOVER_PREDICTORS}
# The (design, measure) regressions fitted: every measure of both designs by the task (reading/run.py), the
# eye-tracking times' first design and the self-paced reading time's spillover design in a submission
# (collate_preds.py).
TASK_FITS = tuple((design, measure) for design in DESIGNS for measure in MEASURES)
SUBMISSION_FITS = (*(("predictive_power", measure) for measure in EYE_TRACKING), ("spillover", SELF_PACED))
MASKS_APPENDED = 3  # the pipeline's --number_of_mask_tokens_to_append
UID = "reading"  # the one UID of its predictions.json
# The strings pandas' read_csv reads as missing (the pipeline reads the file with it): an `item` that is one of them
# becomes "None" (the pipeline's fillna), a `prev_item` means there is no previous word, a number is unknown.
MISSING = frozenset(
    ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
     "NULL", "NaN", "None", "n/a", "nan", "null"]
)  # fmt: skip


@dataclass
class ReadingWord:
    """One row of the reading data: a word after its context, the previous word after its own (None: the first word
    of its sentence), the row's numbers (NaN where the file has none) and where it came from."""

    context: str
    word: str
    prev_context: str | None
    prev_word: str | None
    where: str  # file:line
    values: dict[str, float] = field(default_factory=dict)


def read_reading(path: Path, fits: Sequence[tuple[str, str]] = TASK_FITS) -> list[ReadingWord]:
    """The rows of a reading_data.csv (plain or .gz), as the pipeline reads them; a missing column, an empty word, a
    value that is not a finite number (a missing one is empty) or too few rows for one of the regressions `fits`
    (`too_few_rows`, every surprisal taken as known) raise InputError naming the file (line) and column or measure,
    before any model loads."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = next(reader, None) or []
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        names = ", ".join(repr(column) for column in missing)
        what = f"column {names} is" if len(missing) == 1 else f"columns {names} are"
        raise InputError(f"{path}: {what} missing (the reading task reads {', '.join(COLUMNS)})")
    index = {column: header.index(column) for column in COLUMNS}
    words = []
    for row in reader:
        if not row:  # a blank line, which pandas skips
            continue
        where = f"{path}:{reader.line_num}"
        if len(row) != len(header):
            raise InputError(f"{where}: {len(row)} fields, the header has {len(header)}")
        text = {column: row[index[column]] for column in TEXT_COLUMNS}
        if text["word"] in MISSING:
            raise InputError(f"{where}: column 'word' is empty ({text['word']!r})")
        values = {}
        for column in NUMBER_COLUMNS:
            cell = row[index[column]].strip()
            try:
                values[column] = math.nan if cell in MISSING else float(cell)
            except ValueError:
                raise InputError(f"{where}: column {column!r} must be a number, got {cell!r}") from None
            # pandas reads inf, 1e999 ... as infinite (the pipeline's fits then give NaN scores) and NaN spelled
            # otherwise than MISSING (NAN, +nan) as text (its fits fail): neither is a number to regress on.
            if cell not in MISSING and not math.isfinite(values[column]):
                raise InputError(
                    f"{where}: column {column!r} must be a finite number (an empty cell where unknown), got {cell!r}"
                )
        has_prev = text["prev_item"] not in MISSING  # the pipeline's test for a previous word
        if has_prev and text["prev_word"] in MISSING:
            raise InputError(f"{where}: column 'prev_word' is empty where 'prev_item' is not")
        words.append(
            ReadingWord(
                context="None" if text["item"] in MISSING else text["item"],  # the pipeline's fillna("None")
                word=text["word"],
                prev_context=text["prev_item"] if has_prev else None,
                prev_word=text["prev_word"] if has_prev else None,
                where=where,
                values=values,
            )
        )
    if not words:
        raise InputError(f"{path}: no rows")
    _refuse_too_few_rows(words, None, None, fits, f"{path}: ")
    return words


# ------------------------------------------------------------------------------------------ word-level quantities
def word_steps(tokenizer, context: str, word: str) -> list[tuple[str, int | None]]:
    """The (context, target token id) of each factor of the pipeline's p(word | context) (the module says how);
    None where a target tokenizes to nothing."""
    tokens = tokenizer(word, add_special_tokens=False)["input_ids"]
    if not tokens:
        return [(context, None)]
    steps = [(context, tokens[0])]
    context += tokenizer.decode(tokens[0])
    for token in tokens[1:]:
        piece = tokenizer.decode(token)
        retokenized = tokenizer(piece, add_special_tokens=False)["input_ids"]  # its first token is the target
        steps.append((context, retokenized[0] if retokenized else None))
        context += piece
    return steps


def _query_ids(tokenizer, context: str, causal: bool) -> tuple[list[int], int]:
    """The input ids of one factor and the position whose logits predict the target (the module says which)."""
    if causal:
        ids = tokenizer(context)["input_ids"]
        return ids, len(ids) - 1
    ids = tokenizer(context + tokenizer.mask_token * MASKS_APPENDED)["input_ids"]
    last_is_mask = bool(ids) and ids[-1] == tokenizer.mask_token_id
    return ids, len(ids) - (MASKS_APPENDED if last_is_mask else MASKS_APPENDED + 1)


def _pairs(words: Sequence[ReadingWord]) -> list[tuple[str, str, str]]:
    """(context, word, where) of every word whose surprisal is needed: each row's word, and its previous word."""
    pairs = [(w.context, w.word, w.where) for w in words]
    pairs += [(w.prev_context, w.prev_word, f"{w.where} (previous word)") for w in words if w.prev_word is not None]
    return pairs


def check_words(tokenizer, words: Sequence[ReadingWord], causal: bool) -> None:
    """Refuses (InputError) a word, or a piece of one, that tokenizes to no token (the pipeline fails on it with an
    IndexError), and a context with no token to predict from, naming the file, line and word; call it before
    scoring."""
    if not causal and tokenizer.mask_token_id is None:
        raise InputError("the reading task needs a masked LM's tokenizer to have a mask token")
    for context, word, where in _pairs(words):
        for step_context, target in word_steps(tokenizer, context, word):
            if target is None:
                raise InputError(f"{where}: the word {word!r} (or a piece of it) tokenizes to no token to score")
            ids, position = _query_ids(tokenizer, step_context, causal)
            if position < 0 or (not causal and ids[position] != tokenizer.mask_token_id):
                raise InputError(
                    f"{where}: the context {step_context!r} gives no position to predict {word!r} from"
                    + ("" if causal else " (the tokenizer splits its mask token)")
                )


def surprisals(
    model,
    tokenizer,
    words: Sequence[ReadingWord],
    causal: bool,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
) -> tuple[list[float], list[float]]:
    """(pred, prev_pred): the surprisal in nats of each row's word after its context and of its previous word
    (NaN where it has none). Every factor of every word is one query; the distinct queries are scored in batches,
    causal LMs through `scoring.next_token_log_probs`, masked LMs through `scoring.token_pseudo_log_likelihoods` (one
    scored position, the first appended mask)."""
    check_words(tokenizer, words, causal)
    pairs = _pairs(words)
    steps = [word_steps(tokenizer, context, word) for context, word, _ in pairs]
    queries = list(dict.fromkeys(step for word in steps for step in word))
    encoded = [_query_ids(tokenizer, context, causal) for context, _ in queries]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if causal:
        sequences = [ids for ids, _ in encoded]
        targets = [target for _, target in queries]
        log_probs = next_token_log_probs(model, sequences, targets, pad_id, batch_tokens, progress)
    else:  # the target at the first mask: masked there again and scored, the only scored position
        sequences, not_scored = [], []
        for (ids, position), (_, target) in zip(encoded, queries):
            sequences.append([*ids[:position], target, *ids[position + 1 :]])
            not_scored.append([int(i != position) for i in range(len(ids))])
        log_probs = token_pseudo_log_likelihoods(
            model, sequences, not_scored, tokenizer.mask_token_id, pad_id, batch_tokens, progress
        )
    by_query = dict(zip(queries, log_probs.tolist()))
    surprisal = [-sum(by_query[step] for step in word) for word in steps]
    pred = surprisal[: len(words)]
    following = iter(surprisal[len(words) :])
    prev_pred = [next(following) if w.prev_word is not None else math.nan for w in words]
    return pred, prev_pred


# ---------------------------------------------------------------------------------------------------- regression
@dataclass(frozen=True)
class Fit:
    """What the task reads of one OLS fit: the last predictor's coefficient, t value and two-sided p-value; R^2, AIC."""

    coefficient: float
    t: float
    p: float
    r2: float
    aic: float


def ols(y: np.ndarray, x: np.ndarray) -> Fit:
    """Ordinary least squares of y (N) on x (N x K: the constant first, the predictor of interest last), computed as
    statsmodels 0.14's `OLS(y, x).fit()` computes it, operation by operation, so the floats are its own: the
    parameters by its SVD pseudo-inverse (singular values under 1e-15 x the largest dropped); R^2 = 1 - SSR / TSS, SSR
    the residuals' dot product and TSS centred as OLS's unit weights centre it; AIC = -2 log L + 2 rank, log L the
    profile Gaussian likelihood of sum(residual^2); t over sqrt of (x^+ x^+')_KK x SSR / (N - rank); p from
    Student's t with N - rank degrees of freedom."""
    with needs("eval", "the reading task's p-values"):
        from scipy.stats import t as student_t

    # C order, as the pipeline's pinned patsy + pandas 2.2.3 hand x to statsmodels: the BLAS products' last bits
    # follow the layout (a pandas 3 frame gives Fortran order, and other floats).
    x = np.ascontiguousarray(x, dtype=np.float64)
    u, singular, vt = np.linalg.svd(x, full_matrices=False)
    kept = singular > 1e-15 * np.max(singular)
    inverse = np.divide(1.0, singular, out=np.zeros_like(singular), where=kept)
    pinv = np.dot(np.transpose(vt), np.multiply(inverse[:, np.newaxis], np.transpose(u)))
    rank = np.linalg.matrix_rank(np.diag(singular))
    beta = np.dot(pinv, y)
    residual = y - np.dot(x, beta)
    ssr = np.dot(residual, residual)
    weights = np.ones(len(y))
    centred_tss = np.sum(weights * (y - np.average(y, weights=weights)) ** 2)
    nobs = float(len(y))
    df_resid = nobs - rank
    half = nobs / 2.0
    log_likelihood = -half * np.log(2 * np.pi) - half * np.log(np.sum(residual**2) / nobs) - half
    t_value = beta[-1] / np.sqrt(np.dot(pinv, np.transpose(pinv))[-1, -1] * (ssr / df_resid))
    return Fit(
        coefficient=float(beta[-1]),
        t=float(t_value),
        p=float(student_t.sf(np.abs(t_value), df_resid) * 2),
        r2=float(1 - ssr / centred_tss),
        aic=float(-2 * log_likelihood + 2 * float(rank)),
    )


def gain(baseline: Fit, model: Fit) -> float:
    """(R^2_model - R^2_baseline) / (1 - R^2_baseline), a fraction, in the pipeline's order of operations."""
    return (model.r2 - baseline.r2) / (1 - baseline.r2)


def _columns(words: Sequence[ReadingWord], pred: Sequence[float], prev_pred: Sequence[float]) -> dict[str, np.ndarray]:
    columns = {name: np.array([w.values[name] for w in words], dtype=np.float64) for name in NUMBER_COLUMNS}
    columns.update(pred=np.asarray(pred, dtype=np.float64), prev_pred=np.asarray(prev_pred, dtype=np.float64))
    return columns


def _known_rows(columns: dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """The rows where every one of `names` is known (run.py's dropna)."""
    return np.flatnonzero(~np.isnan(np.column_stack([columns[name] for name in names])).any(axis=1))


def _parameters(predictors: Sequence[str]) -> int:
    """How many parameters the model fit has: the constant, each predictor, each pairwise product and `pred`."""
    return 2 + len(predictors) + math.comb(len(predictors), 2)


def too_few_rows(
    words: Sequence[ReadingWord],
    pred: Sequence[float] | None = None,
    prev_pred: Sequence[float] | None = None,
    fits: Sequence[tuple[str, str]] = TASK_FITS,
) -> list[str]:
    """A line for the measures of `fits` (design, measure) whose model fit keeps no more rows than it has parameters
    once the rows with a missing value are dropped (one line per design and count): with none left the SVD has
    nothing to factor, with no more than the parameters the fit is exact and the gain divides by zero. `pred`,
    `prev_pred` None: as a model gives them (every word's surprisal, the previous word's where there is one), to check
    a file before any model loads."""
    if pred is None:
        pred = [0.0] * len(words)
    if prev_pred is None:
        prev_pred = [math.nan if w.prev_word is None else 0.0 for w in words]
    columns = _columns(words, pred, prev_pred)
    short = {}
    for design, measure in fits:
        rows = len(_known_rows(columns, [measure, *DESIGNS[design], "pred"]))
        if rows <= _parameters(DESIGNS[design]):
            short.setdefault((design, rows), []).append(measure)
    return [
        f"{', '.join(measures)} ({design}): {rows} rows left after dropping missing values, "
        f"{_parameters(DESIGNS[design])} parameters to fit"
        for (design, rows), measures in short.items()
    ]


def _refuse_too_few_rows(words, pred, prev_pred, fits, prefix: str = "") -> None:
    short = too_few_rows(words, pred, prev_pred, fits)
    if short:
        raise InputError(f"{prefix}too few rows for the reading regressions: {'; '.join(short)}")


def _fits(columns: dict[str, np.ndarray], measure: str, predictors: Sequence[str]) -> tuple[Fit, Fit]:
    """The baseline and the model fit of `measure` (the module says which), each on the rows where all of its
    variables are known (run.py's dropna), its design the formula's columns in the formula's order: the constant,
    each predictor, each pairwise product (a:b) and, in the model, `pred`."""
    products = [columns[a] * columns[b] for a, b in combinations(predictors, 2)]
    terms = [columns[name] for name in predictors] + products

    def fit(extra: list[str]) -> Fit:
        rows = _known_rows(columns, [measure, *predictors, *extra])
        x = np.column_stack([np.ones(len(rows)), *[term[rows] for term in terms + [columns[n] for n in extra]]])
        return ols(columns[measure][rows], x)

    return fit([]), fit(["pred"])


def predictive_power(words: Sequence[ReadingWord], pred: Sequence[float], prev_pred: Sequence[float]) -> dict:
    """The task's regressions, as reading/run.py reports them: {"predictive_power": [...], "spillover": [...]}, a
    record per measure with its keys, and the scores {"eye_tracking", "self_paced_reading"} in percent. Too few rows
    for a fit raise InputError (`too_few_rows`)."""
    _refuse_too_few_rows(words, pred, prev_pred, TASK_FITS)
    columns = _columns(words, pred, prev_pred)
    out, percent = {}, {}
    for design, predictors in DESIGNS.items():
        records = []
        for measure in MEASURES:
            baseline, model = _fits(columns, measure, predictors)
            records.append(
                {
                    "Predicted variable": measure,
                    "Coefficient": model.coefficient,
                    "Number of standard deviations": model.t,
                    "P-value": model.p,
                    "R2": model.r2,
                    "Change in R2 from baseline": model.r2 - baseline.r2,
                    "AIC": model.aic,
                    "Change in AIC from baseline": model.aic - baseline.aic,
                }
            )
            percent[design, measure] = gain(baseline, model) * 100
        out[design] = records
    eye_tracking = [percent["predictive_power", measure] for measure in EYE_TRACKING]
    out["scores"] = {
        "eye_tracking": sum(eye_tracking) / len(eye_tracking),
        "self_paced_reading": percent["spillover", SELF_PACED],
    }
    return out


def submission_scores(words: Sequence[ReadingWord], pred: Sequence[float], prev_pred: Sequence[float]) -> dict:
    """A revision's reading scores in a submission, as collate_preds.py computes them (fractions, not percent):
    {"spr": the gain for the self-paced reading time (spillover design), "rt": the mean gain over the eye-tracking
    measures (first design)}. Too few rows for a fit raise InputError (`too_few_rows`)."""
    _refuse_too_few_rows(words, pred, prev_pred, SUBMISSION_FITS)
    columns = _columns(words, pred, prev_pred)
    eye_tracking = [gain(*_fits(columns, measure, PREDICTORS)) for measure in EYE_TRACKING]
    return {
        "spr": gain(*_fits(columns, SELF_PACED, SPILLOVER_PREDICTORS)),
        "rt": sum(eye_tracking) / len(eye_tracking),
    }


# ------------------------------------------------------------------------------------------------------- outputs
def evaluate(words: Sequence[ReadingWord], pred: Sequence[float], prev_pred: Sequence[float]) -> dict:
    """The task's result: {"metric": "reading", "average": the eye-tracking score, "by": {"score": both scores},
    "predictive_power": [...], "spillover": [...]}."""
    power = predictive_power(words, pred, prev_pred)
    return {
        "metric": "reading",
        "average": power["scores"]["eye_tracking"],
        "by": {"score": power["scores"]},
        "predictive_power": power["predictive_power"],
        "spillover": power["spillover"],
    }


def predictions(pred: Sequence[float], prev_pred: Sequence[float]) -> dict:
    """The pipeline's reading/predictions.json: {"reading": {"predictions": [{"id": row, "pred": surprisal,
    "prev_pred": the previous word's (NaN where none, written as the pipeline writes it)}]}}."""
    entries = [{"id": i, "pred": p, "prev_pred": q} for i, (p, q) in enumerate(zip(pred, prev_pred))]
    return {UID: {"predictions": entries}}


def write_reports(folder: Path, result: dict) -> None:
    """The pipeline's report.txt, predictive_power.jsonl and predictive_power_spillover.jsonl in `folder`."""
    scores = result["by"]["score"]
    (folder / "report.txt").write_text(
        f"EYE TRACKING SCORE: {scores['eye_tracking']:.2f}\nSELF-PACED READING SCORE: "
        f"{scores['self_paced_reading']:.2f}\n",
        encoding="utf-8",
    )
    for name, key in (("predictive_power", "predictive_power"), ("predictive_power_spillover", "spillover")):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in result[key]), encoding="utf-8")


__all__ = [
    "COLUMNS",
    "MEASURES",
    "NUMBER_COLUMNS",
    "SUBMISSION_FITS",
    "TASK_FITS",
    "Fit",
    "ReadingWord",
    "check_words",
    "evaluate",
    "gain",
    "ols",
    "predictions",
    "predictive_power",
    "read_reading",
    "submission_scores",
    "surprisals",
    "too_few_rows",
    "word_steps",
]
