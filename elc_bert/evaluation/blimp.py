"""eval-blimp: BLiMP-style minimal pairs, zero-shot, reported per set (paradigm), linguistic field and term with 95%
Wilson intervals: a view over the BabyLM engine's per-pair scores.

A pair is read, checked, scored and decided by the engine of `eval-babylm` (`babylm.read_task`, `check_items`,
`score_items`, `chosen`: right when the good sentence scores at least as high as the bad one), kept scores are keyed
by its rule (`babylm.result_key`); this module groups the pairs by file and writes the report. Masked LMs are scored
by pseudo-log-likelihood, causal LMs by their log-likelihood (`scoring.py`), of every token but the special ones (the
ELC-BERT protocol; the BabyLM pipeline's rule leaves out a zero-width first token, `score_items`). Data: the original
BLiMP folder (one `<paradigm>.jsonl` per set) or the BabyLM 2024 `blimp_filtered/` / `supplement_filtered/` folders,
gzip or not, or a single file.
"""

import hashlib
import json
import logging
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import plots
from ..extras import require
from ..intervals import percent_interval, wilson_interval
from ..models.errors import InputError, InputNotFoundError
from ..pretrained import is_causal_lm
from ..scoring import DEFAULT_BATCH_TOKENS
from .babylm import (
    SUPPLEMENT,
    TASKS,
    Item,
    check_items,
    chosen,
    keep_result,
    kept_result,
    read_task,
    result_key,
    score_items,
    task_files,
)

logger = logging.getLogger(__name__)

CHANCE = 0.5
OUTPUTS = Path("outputs") / "eval-blimp"  # eval-blimp's default results root, relative to the working folder
# The ELC-BERT / BabyLM protocol: the original PLL of every token but the special ones, the logits as they are.
PLL, TEMPERATURE, EVERY_TOKEN = "original", 1.0, True
# BLiMP spells one field two ways (principle_A_c_command.jsonl says "syntax/semantics", the other binding, control /
# raising and NPI files "syntax_semantics"); the paper has a single syntax-semantics field.
FIELD_ALIASES = {"syntax/semantics": "syntax_semantics"}


# ------------------------------------------------------------------------------------------------------------ data
def _set_name(path: Path) -> str:
    """The set (paradigm) name of a data file: its name without `.jsonl(.gz)` (another file given alone: its stem)."""
    name = path.name
    return name.removesuffix(".gz").removesuffix(".jsonl") if name.endswith(TASKS["blimp"].suffixes) else path.stem


def _set_files(data: Path) -> dict[str, Path]:
    """{set name: file} of a folder of `<set>.jsonl(.gz)` files (sorted by name), or of a single such file."""
    if data.is_file():
        return {_set_name(data): data}
    if not data.is_dir():
        raise InputNotFoundError(f"minimal-pair data not found: {data} (expected a folder of .jsonl(.gz) files or one)")
    files = {}
    for path in task_files(data, "blimp"):
        name = _set_name(path)
        if name in files:
            raise InputError(f"{data}: set '{name}' appears twice (both {name}.jsonl and {name}.jsonl.gz?)")
        files[name] = path
    if not files:
        raise InputNotFoundError(f"{data}: no .jsonl or .jsonl.gz files in this folder")
    return files


def load_minimal_pairs(data: str | Path) -> dict[str, list[Item]]:
    """{set name: its minimal pairs as the engine reads them (`babylm.read_task`: candidate 0 the good sentence, the
    pair's field and term in `metadata`, `where` its file and line)} for a folder of `<set>.jsonl(.gz)` files or one
    such file. A bad line names the file, the line and the field; a file without pairs is refused (a set of none has
    no accuracy)."""
    sets = {}
    for name, path in _set_files(Path(data)).items():
        sets[name] = read_task("blimp", path)
        if not sets[name]:
            raise InputError(f"{path}: no minimal pairs in the file")
    return sets


def report_name(data: str | Path) -> str:
    """The default name of the report on `data`: a single file's set name, else the folder's name."""
    data = Path(data)
    return _set_name(data) if data.is_file() else data.resolve().name


def check_report_name(name: str, argument: str = "name") -> str:
    """`name` when it is a plain file name, which keeps the report in its output folder; else an InputError naming
    `argument` (a path such as `../../x` or `/tmp/x` would write it elsewhere)."""
    if name in ("", ".", "..") or Path(name).name != name:
        raise InputError(f"{argument} must be a plain file name (no folder), got {name!r}")
    return name


# ------------------------------------------------------------------------------------------------------ report
def _group(per_set: dict[str, dict], names: list[str]) -> dict:
    """A field's or term's sets together: the mean of their accuracies, and their pairs pooled with its interval."""
    correct = sum(per_set[name]["correct"] for name in names)
    total = sum(per_set[name]["total"] for name in names)
    return {
        "accuracy": sum(per_set[name]["accuracy"] for name in names) / len(names),
        "sets": len(names),
        "correct": correct,
        "total": total,
        "pooled": correct / total,
        "wilson95": list(wilson_interval(correct, total)),
    }


def summarise(sets: dict[str, list[Item]], scores: dict[str, list[list[float]]]) -> dict:
    """Accuracy per set, per linguistic field and term (mean over their sets) and overall (mean over sets, as BabyLM
    reports BLiMP; `overall_pairs` pools the pairs), from each set's pairs and the engine's [good, bad] scores of
    each. A pair is right when the good sentence is the one chosen (`babylm.chosen`: a tie counts as right, as the
    official BabyLM pipeline decides; `ties` counts them). Files without a `field` (the BabyLM supplement) are their
    own field and term; `FIELD_ALIASES` merges spellings of one field.

    Intervals: each set's accuracy, and each pooled accuracy (correct / total of a field's, term's or all pairs:
    `pooled`, `overall_pairs`), has its 95% Wilson score interval as [low, high] fractions (`wilson95`,
    `overall_pairs_wilson95`). The means over sets (`overall`, `fields`, `terms`, a group's `accuracy`) have none:
    they weigh every set alike whatever its number of pairs, so a binomial interval over pairs is not theirs (with
    equal-sized sets, as in BLiMP, mean and pooled accuracy are the same number)."""
    per_set = {}
    for name, items in sets.items():
        pairs = scores[name]
        correct = sum(chosen(pair) == 0 for pair in pairs)
        field, term = (str(items[0].metadata[key]) for key in ("field", "linguistics_term"))
        if field == SUPPLEMENT:
            field = term = name
        per_set[name] = {
            "accuracy": correct / len(pairs),
            "wilson95": list(wilson_interval(correct, len(pairs))),
            "correct": correct,
            "total": len(pairs),
            "ties": sum(pair[0] == pair[1] for pair in pairs),
            "field": FIELD_ALIASES.get(field, field),
            "linguistics_term": term,
        }
    groups = {}
    for key in ("field", "linguistics_term"):
        grouped = {}
        for name, row in per_set.items():
            grouped.setdefault(row[key], []).append(name)
        groups[key] = {group: _group(per_set, names) for group, names in sorted(grouped.items())}
    all_sets = _group(per_set, list(per_set))
    return {
        "overall": all_sets["accuracy"],
        "overall_pairs": all_sets["pooled"],
        "overall_pairs_wilson95": all_sets["wilson95"],
        "correct": all_sets["correct"],
        "total": all_sets["total"],
        "ties": sum(row["ties"] for row in per_set.values()),
        "num_sets": len(per_set),
        "fields": {field: row["accuracy"] for field, row in groups["field"].items()},
        "terms": {term: row["accuracy"] for term, row in groups["linguistics_term"].items()},
        "field_counts": groups["field"],
        "term_counts": groups["linguistics_term"],
        "sets": per_set,
    }


def _markdown(results: dict) -> str:
    lines = [
        f"# {results['name']}: {results['method']} on {results['data']}",
        "",
        f"Model `{results['model']}`. Overall accuracy (mean over {results['num_sets']} sets): "
        f"**{100 * results['overall']:.1f}%**; pooled over {results['total']} pairs: "
        f"{100 * results['overall_pairs']:.1f}% {percent_interval(*results['overall_pairs_wilson95'])} "
        f"(chance 50%; ties, counted right: {results['ties']}).",
        "",
        "Intervals: 95% Wilson score intervals over the pairs of a set, or of a field's pairs pooled. A mean over sets"
        " has none (it weighs sets alike, not pairs).",
        "",
        "| field | sets | pairs | accuracy (%, mean over sets) | pooled accuracy (%) | 95% Wilson interval of pooled |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for field, row in results["field_counts"].items():
        lines.append(
            f"| {field} | {row['sets']} | {row['total']} | {100 * row['accuracy']:.1f} | {100 * row['pooled']:.1f} "
            f"| {percent_interval(*row['wilson95'])} |"
        )
    lines += [
        "",
        "| set | field | term | pairs | accuracy (%) | 95% Wilson interval |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name, row in results["sets"].items():
        lines.append(
            f"| {name} | {row['field']} | {row['linguistics_term']} | {row['total']} | {100 * row['accuracy']:.1f} "
            f"| {percent_interval(*row['wilson95'])} |"
        )
    return "\n".join(lines) + "\n"


def _bar_chart(results: dict, path: Path):
    """Per field, a bar at the mean over its sets and, on it, a point at its pairs' pooled accuracy with that
    accuracy's 95% Wilson interval as error bar (the interval belongs to the pooled accuracy, not to the mean)."""
    fields = list(results["fields"])
    values = [100 * results["fields"][field] for field in fields]
    groups = [results["field_counts"][field] for field in fields]
    pooled = [100 * group["pooled"] for group in groups]
    below = [point - 100 * group["wilson95"][0] for point, group in zip(pooled, groups)]
    above = [100 * group["wilson95"][1] - point for point, group in zip(pooled, groups)]
    figure = plots.new_figure(max(4.0, 0.9 * len(fields) + 2), 4)
    axes = figure.subplots()
    axes.bar(range(len(fields)), values, color="tab:blue", label="mean over sets")
    axes.errorbar(
        range(len(fields)),
        pooled,
        yerr=[below, above],
        fmt="o",
        color="black",
        markersize=4,
        capsize=3,
        label="pooled over pairs, 95% Wilson interval",
    )
    axes.axhline(100 * CHANCE, color="grey", linestyle="--", linewidth=1, label="chance")
    overall = 100 * results["overall"]
    axes.axhline(overall, color="tab:red", linewidth=1, label=f"overall {overall:.1f} (mean over sets)")
    axes.set_xticks(range(len(fields)), fields, rotation=30, ha="right")
    axes.set_ylim(0, 100)
    axes.set_ylabel("accuracy (%)")
    axes.set_title(f"{results['name']}: accuracy per field ({results['method']})")
    axes.legend(fontsize=8, loc="lower right")
    plots.save(figure, path)


def write_report(results: dict, out_dir: str | Path, name: str) -> None:
    """`{name}.json`, `{name}.md` (Markdown tables) and `{name}.png` (bar chart per field) in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / f"{name}.md").write_text(_markdown(results))
    _bar_chart(results, out_dir / f"{name}.png")


def _weights_fingerprint(model, causal: bool) -> str:
    """The `model` of the engine's key (`babylm.result_key`) for a model held in memory, which has no folder to hash:
    its class, the scorer, and the sum and sum of squares of every parameter (cheap on any device)."""
    digest = hashlib.sha1(f"{type(model).__name__} causal={causal}".encode())
    with torch.no_grad():
        named = list(model.named_parameters())
        stats = torch.stack(
            [torch.stack([p.detach().double().sum(), p.detach().double().square().sum()]) for _, p in named]
        )
    for (parameter_name, parameter), (total, squares) in zip(named, stats.tolist()):
        digest.update(f"{parameter_name}{tuple(parameter.shape)}{total:.10e}{squares:.10e}".encode())
    return digest.hexdigest()


def evaluate_blimp(
    model,
    tokenizer,
    data: str | Path,
    out_dir: str | Path | None = None,
    name: str = "blimp",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    max_pairs_per_set: int | None = None,
    causal: bool | None = None,
    progress: bool = True,
) -> dict:
    """Zero-shot minimal-pair accuracy of `model` on `data` (a folder of `<set>.jsonl(.gz)` files, or one file).

    causal None picks the scorer from the model (`is_causal_lm`): pseudo-log-likelihood for masked LMs, left-to-right
    log-likelihood for decoders. max_pairs_per_set keeps the first pairs of each set. Returns the `summarise` dict plus
    what was run (name, data, model, method, sentences, seconds); with out_dir, also writes it as `{name}.json`,
    `{name}.md` and `{name}.png`. Sets are scored one after another; with out_dir each finished set's scores are kept
    in `{name}.sets/<set>.json` under eval-babylm's key (`babylm.kept_result`: the weights, the set's file, the
    protocol and the pairs kept per set), so that an interrupted or repeated run scores only the sets not kept."""
    check_report_name(name)
    if batch_tokens < 1:
        raise InputError(f"batch_tokens must be positive, got {batch_tokens}")
    require("eval", what="BLiMP's 95% intervals")  # said now, not after the scoring
    sets = load_minimal_pairs(data)
    if max_pairs_per_set is not None:
        if max_pairs_per_set < 1:
            raise InputError(f"max_pairs_per_set must be positive, got {max_pairs_per_set}")
        if all(len(items) <= max_pairs_per_set for items in sets.values()):
            max_pairs_per_set = None  # a cap that cuts no set: every pair is scored, and the report says so
        sets = {set_name: items[:max_pairs_per_set] for set_name, items in sets.items()}
    causal = is_causal_lm(model) if causal is None else causal
    all_pairs = [item for items in sets.values() for item in items]
    check_items(tokenizer, all_pairs, causal, EVERY_TOKEN)  # every set, before the first is scored
    sentences = [sentence for item in all_pairs for sentence in item.sentences]
    files = _set_files(Path(data))
    weights = _weights_fingerprint(model, causal) if out_dir is not None else None
    scores, seconds, reused = {}, 0.0, 0
    bar = tqdm(total=len(sentences), desc=name, unit="sentence", disable=not progress)
    with bar:
        for set_name, items in sets.items():
            done = kept = None
            if out_dir is not None:
                kept = Path(out_dir) / f"{name}.sets" / f"{set_name}.json"
                key = result_key(weights, [files[set_name]], PLL, TEMPERATURE)
                key.update(every_token=EVERY_TOKEN, max_pairs_per_set=max_pairs_per_set)
                done = kept_result(kept, key)
                reused += done is not None
            if done is None:
                start = time.perf_counter()
                pairs = score_items(
                    model,
                    tokenizer,
                    items,
                    causal,
                    PLL,
                    TEMPERATURE,
                    batch_tokens,
                    progress=False,
                    every_token=EVERY_TOKEN,
                )
                done = {"scores": pairs, "seconds": time.perf_counter() - start}
                if kept is not None:
                    keep_result(kept, key, done)
            scores[set_name] = done["scores"]
            seconds += done["seconds"]
            bar.set_postfix_str(set_name, refresh=False)
            bar.update(2 * len(items))
    if reused:
        logger.info("%s: %d of %d sets' scores kept from before, not scored again", out_dir, reused, len(sets))
    config = getattr(model, "config", None)
    unique = len(set(sentences))
    results = {
        "name": name,
        "data": str(data),
        "model": str(getattr(config, "_name_or_path", "") or type(model).__name__),
        "model_class": type(model).__name__,
        "method": "log-likelihood (causal)" if causal else "pseudo-log-likelihood",
        "max_pairs_per_set": max_pairs_per_set,
        "sentences": unique,
        "seconds": seconds,
        "sentences_per_second": unique / seconds if seconds > 0 else None,
        **summarise(sets, scores),
    }
    if out_dir is not None:
        write_report(results, out_dir, name)
    return results
