"""`elc-bert scorecard RUN_DIR`: BLiMP, the BLiMP supplement, (Super)GLUE and MSGS of one run in one table, with the
BabyLM 2023 aggregate, beside the paper's ELC-BERT strict-small row.

    aggregate = 0.5 BLiMP + 0.3 GLUE + 0.2 MSGS          (all in %, as in the BabyLM 2023 scoring)

BLiMP is the mean accuracy over the BLiMP sets (the supplement is shown in its own column and is not part of the
aggregate, following the docs' formula); GLUE is the mean of the 11 BabyLM (Super)GLUE entries (CoLA MCC, MRPC and QQP
F1, the others accuracy; MNLI and MNLI-mm count separately); MSGS is whatever `RUN_DIR/msgs.json` reports as
"overall".

Missing parts: the aggregate is given only when BLiMP, MSGS and all 11 GLUE entries are present; otherwise it is
"n/a" and a *partial* aggregate is shown beside it, labelled with what it lacks: the weights renormalised over the
parts present (e.g. (0.5 BLiMP + 0.3 GLUE) / 0.8 without MSGS), GLUE averaged over the entries present. It is not
comparable to the paper's aggregate.

Inputs (each optional): `blimp.json` and `supplement.json` (`elc-bert eval-blimp RUN_DIR --name blimp` / `--name
supplement`; the data-folder names blimp_filtered.json / supplement_filtered.json too) and `msgs.json`, looked for in
RUN_DIR, then RUN_DIR/eval/ (where eval-blimp wrote before), then eval-blimp's default output folder for the run,
`outputs/eval-blimp/<RUN_DIR's folder name>/` in the working folder (`runs.pipeline_model_dir` of `blimp.OUTPUTS`);
the first found is read. eval-blimp refuses to write there for another run of the same folder name
(`runs.check_pipeline_model_dir`), and a file there is read only when the model it records is RUN_DIR itself (one
written before that rule is passed over, and the scorecard says so). GLUE: `RUN_DIR/glue/<task>/result.json`
(`elc-bert finetune-glue`). Outputs: `RUN_DIR/scorecard.json`, `scorecard.md` (which names every file read) and
`scorecard.png`; all scores in %.
"""

import json
import math
from pathlib import Path

from .. import plots, runs
from ..data.glue import BABYLM_ENTRIES as GLUE_ENTRIES
from ..data.jsonl import read_json
from ..job_configs.glue_results import GlueResult
from ..models.errors import InputError, InputNotFoundError
from .blimp import OUTPUTS

WEIGHTS = {"blimp": 0.5, "glue": 0.3, "msgs": 0.2}
COLUMNS = ["blimp", "supplement", "glue", "msgs"]
TITLES = {"blimp": "BLiMP", "supplement": "Supplement", "glue": "GLUE", "msgs": "MSGS", "aggregate": "Aggregate"}
# ELC-BERT, BabyLM 2023 strict-small, paper Table 1 (arXiv 2311.02265).
# The docs give no BLiMP-supplement score and no per-task GLUE scores: those stay None (shown as "n/a").
PAPER_STRICT_SMALL = {
    "name": "ELC-BERT strict-small (paper)",
    "blimp": 75.8,
    "supplement": None,
    "glue": 73.7,
    "msgs": 29.4,
    "aggregate": 65.9,
    "glue_tasks": {entry: None for entry in GLUE_ENTRIES},
}
# The files each part may be in; the folders they are looked for in: `result_folders`.
FILE_NAMES = {
    "blimp": ["blimp.json", "blimp_filtered.json"],
    "supplement": ["supplement.json", "supplement_filtered.json"],
    "msgs": ["msgs.json"],
}


def _fraction(path: Path, value, key: str) -> float:
    """A score read from a result file: a number in [0, 1] (the files store fractions); MCC may be negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not -1 <= value <= 1:
        raise InputError(f"{path}: '{key}' must be a number in [-1, 1] (a fraction, not a percentage), got {value!r}")
    return float(value)


def result_folders(run_dir: Path) -> list[Path]:
    """Where a run's BLiMP-style results are looked for, in order: the run folder, its eval/ (eval-blimp's default
    output folder before), and eval-blimp's default output folder for it (its folder in `blimp.OUTPUTS`)."""
    return [run_dir, run_dir / runs.EVAL, runs.pipeline_model_dir(OUTPUTS, run_dir)]


def _is_of_run(results: dict, run_dir: Path) -> bool:
    """Whether a result file records `run_dir` as its model (`model`: the folder it was loaded from)."""
    model = results.get("model")
    return isinstance(model, str) and Path(model).expanduser().resolve() == run_dir.resolve()


def read_overall(
    run_dir: Path, part: str, passed_over: list[str] | None = None
) -> tuple[float | None, str | None, int | None]:
    """(score in %, file, its pairs-per-set cap) of a BLiMP-style part, or (None, None, None) when no file holds it: the
    first file found in `result_folders`. The cap is the `max_pairs_per_set` the evaluation was run with (None: every
    pair). A file in the shared outputs folder that records another model is not read; a line saying so is appended
    to `passed_over`."""
    shared = runs.pipeline_model_dir(OUTPUTS, run_dir)
    for folder in result_folders(run_dir):
        for name in FILE_NAMES[part]:
            path = folder / name
            if not path.is_file():
                continue
            results = read_json(path, "a BLiMP-style or MSGS result (a JSON object)")
            if folder == shared and not _is_of_run(results, run_dir):
                if passed_over is not None:
                    passed_over.append(f"`{path}` (its model is {results.get('model')!r}, not {run_dir})")
                continue
            if "overall" not in results:
                raise InputError(f"{path}: no 'overall' key (the mean accuracy, a fraction in [0, 1])")
            cap = results.get("max_pairs_per_set")
            return 100 * _fraction(path, results["overall"], "overall"), str(path), cap
    return None, None, None


def read_glue(run_dir: Path) -> dict[str, float | None]:
    """{entry: score in %, or None} for the 11 BabyLM entries, from RUN_DIR/glue/<entry>/result.json."""
    paths = {entry: runs.glue_dir(run_dir) / entry / runs.RESULT for entry in GLUE_ENTRIES}
    return {entry: 100 * GlueResult.read(path).metric if path.is_file() else None for entry, path in paths.items()}


def aggregate(parts: dict[str, float | None], glue_complete: bool, capped: dict | None = None) -> dict:
    """The BabyLM 2023 aggregate of `parts` ({blimp, glue, msgs}: % or None): `aggregate` when everything is present
    and whole (GLUE with all its entries, no part scored on the first pairs of each set only: `capped`), else None
    with `partial_aggregate` = sum_i w_i x_i / sum_i w_i over the parts present and `partial_label` naming what is
    missing or capped."""
    present = {part: parts[part] for part in WEIGHTS if parts.get(part) is not None}
    missing = [TITLES[part] for part in WEIGHTS if part not in present]
    if not glue_complete and "glue" in present:
        missing.append("some GLUE tasks")
    capped = {part: cap for part, cap in (capped or {}).items() if part in WEIGHTS}  # parts of the aggregate only
    missing += [f"the full {TITLES[part]}" for part in capped]
    weighted = sum(WEIGHTS[part] * value for part, value in present.items())
    if not missing:
        return {"aggregate": weighted, "partial_aggregate": None, "partial_label": None}
    if not present:
        return {"aggregate": None, "partial_aggregate": None, "partial_label": None}
    weight = sum(WEIGHTS[part] for part in present)
    terms = " + ".join(
        f"{WEIGHTS[part]} {TITLES[part]}" + (f" (first {capped[part]} pairs per set)" if part in capped else "")
        for part in present
    )
    label = f"partial: ({terms}) / {weight:.1f}; missing {', '.join(missing)}"
    return {"aggregate": None, "partial_aggregate": weighted / weight, "partial_label": label}


def build_scorecard(run_dir: str | Path) -> dict:
    """Reads every available part of `run_dir` and returns the scorecard (scores in %, None where missing)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputNotFoundError(f"run directory not found: {run_dir}")
    ours = {"name": f"ours ({run_dir.name})"}
    sources, passed_over, capped = {}, [], {}
    for part in ("blimp", "supplement", "msgs"):
        ours[part], sources[part], cap = read_overall(run_dir, part, passed_over)
        if cap is not None:
            capped[part] = cap
    ours["capped"] = capped  # part -> pairs per set: a sample of each set, not the paper's measurement
    glue_tasks = read_glue(run_dir)
    present = [value for value in glue_tasks.values() if value is not None]
    sources["glue"] = str(runs.glue_dir(run_dir) / "<task>" / runs.RESULT) if present else None
    ours["glue"] = sum(present) / len(present) if present else None
    ours["glue_tasks"] = glue_tasks
    ours["glue_num_tasks"] = len(present)
    ours.update(aggregate(ours, glue_complete=len(present) == len(GLUE_ENTRIES), capped=capped))
    missing = [TITLES[part] for part in COLUMNS if ours[part] is None]
    missing += [f"GLUE {entry}" for entry, value in glue_tasks.items() if value is None and present]
    return {
        "run_dir": str(run_dir),
        "units": "percent",
        "weights": WEIGHTS,
        "ours": ours,
        "paper": PAPER_STRICT_SMALL,
        "sources": sources,
        "searched": [str(folder) for folder in result_folders(run_dir)],
        "passed_over": passed_over,
        "missing": missing,
        "paper_missing": ["Supplement", "GLUE per task"],
    }


def _cell(value, cap: int | None = None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f}" if cap is None else f"{value:.1f} (first {cap} pairs per set: not the full test)"


def markdown(card: dict) -> str:
    ours, paper = card["ours"], card["paper"]
    capped = ours.get("capped", {})
    glue_note = "" if ours["glue"] is None else f" ({ours['glue_num_tasks']}/{len(GLUE_ENTRIES)} tasks)"
    header = "| model | BLiMP | Supplement | GLUE | MSGS | Aggregate (0.5 BLiMP + 0.3 GLUE + 0.2 MSGS) |"
    our_aggregate = _cell(ours["aggregate"])
    if ours["aggregate"] is None and ours["partial_aggregate"] is not None:
        our_aggregate = f"n/a; {ours['partial_aggregate']:.1f} ({ours['partial_label']})"
    lines = [
        f"# Scorecard: {card['run_dir']}",
        "",
        "Scores in %. The aggregate is the BabyLM 2023 one; it is given only when BLiMP, MSGS and all 11 GLUE entries",
        "are present, otherwise a partial aggregate is shown, labelled, and is not comparable to the paper's.",
        "",
        header,
        "|---|---|---|---|---|---|",
        f"| {ours['name']} | {_cell(ours['blimp'], capped.get('blimp'))} "
        f"| {_cell(ours['supplement'], capped.get('supplement'))} | {_cell(ours['glue'])}{glue_note} "
        f"| {_cell(ours['msgs'], capped.get('msgs'))} | {our_aggregate} |",
        f"| {paper['name']} | {_cell(paper['blimp'])} | {_cell(paper['supplement'])} | {_cell(paper['glue'])} "
        f"| {_cell(paper['msgs'])} | {_cell(paper['aggregate'])} |",
        "",
        "(Super)GLUE per task (CoLA: MCC; MRPC, QQP: F1; others: accuracy):",
        "",
        "| model | " + " | ".join(GLUE_ENTRIES) + " |",
        "|---|" + "---|" * len(GLUE_ENTRIES),
        "| ours | " + " | ".join(_cell(ours["glue_tasks"][entry]) for entry in GLUE_ENTRIES) + " |",
        "| paper | " + " | ".join(_cell(paper["glue_tasks"][entry]) for entry in GLUE_ENTRIES) + " |",
        "",
        f"Missing here: {', '.join(card['missing']) or 'nothing'}. "
        f"Not in the docs for the paper row: {', '.join(card['paper_missing'])}.",
        "",
        *_files_read(card),
        "",
        "The paper's row is the BabyLM 2023 leaderboard (2023 filtered evaluation data, full GLUE training sets);",
        "scores on other versions of the data (e.g. the BabyLM 2024 files) or capped training sets are not the same",
        "measurement.",
    ]
    return "\n".join(lines) + "\n"


def _files_read(card: dict) -> list[str]:
    """The lines that name the file each score was read from, where the others were looked for, and the files passed
    over."""
    lines = ["Files read:", ""]
    for part in (*FILE_NAMES, "glue"):
        source = card["sources"].get(part)
        lines.append(f"- {TITLES[part]}: " + (f"`{source}`" if source else "none found"))
    lines += ["", f"BLiMP, the supplement and MSGS are looked for in {', '.join(f'`{f}`' for f in card['searched'])}."]
    lines += [f"Passed over, another model's: {entry}." for entry in card.get("passed_over", [])]
    return lines


def bar_chart(card: dict, path: Path) -> None:
    """Grouped bars, ours beside the paper, per column. Only like is drawn beside like: a missing value and a partial
    aggregate get no bar, and a part scored on the first pairs of each set only is drawn hatched and says so."""
    columns = [*COLUMNS, "aggregate"]
    capped = card["ours"].get("capped", {})
    figure = plots.new_figure(7, 4)
    axes = figure.subplots()
    for offset, (row, label) in enumerate([(card["ours"], "ours"), (card["paper"], "paper")]):
        drawn = [(i, row[c]) for i, c in enumerate(columns) if row[c] is not None]
        bars = axes.bar([i + (offset - 0.5) * 0.38 for i, _ in drawn], [v for _, v in drawn], width=0.38, label=label)
        for bar, (i, _) in zip(bars, drawn):
            if offset == 0 and columns[i] in capped:
                bar.set_hatch("//")
    axes.set_xticks(range(len(columns)), [TITLES[c] for c in columns])
    notes = [f"{TITLES[part]}: first {cap} pairs per set only (hatched)" for part, cap in capped.items()]
    if card["ours"]["aggregate"] is None and card["ours"]["partial_aggregate"] is not None:
        notes.append("ours' aggregate is partial, not drawn (see scorecard.md)")
    if notes:
        axes.set_xlabel("; ".join(notes))
    axes.set_ylabel("score (%)")
    axes.set_ylim(0, 100)
    axes.set_title("BabyLM scorecard")
    axes.grid(axis="y", alpha=0.3)
    axes.legend()
    plots.save(figure, path)


def scorecard(run_dir: str | Path) -> dict:
    """Builds the scorecard of `run_dir`, writes scorecard.json / .md (the tables, `markdown`) / .png there; returns
    it."""
    card = build_scorecard(run_dir)
    run_dir = Path(run_dir)
    (run_dir / "scorecard.json").write_text(json.dumps(card, indent=2) + "\n")
    (run_dir / "scorecard.md").write_text(markdown(card))
    bar_chart(card, run_dir / "scorecard.png")
    return card
