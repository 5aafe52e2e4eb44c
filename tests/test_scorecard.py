"""`elc-bert scorecard`: the BabyLM 2023 aggregate (0.5 BLiMP + 0.3 GLUE + 0.2 MSGS) on hand-made run directories,
complete and with missing parts, against arithmetic written out here."""

import json
from pathlib import Path

import pytest

from elc_bert import plots
from elc_bert.cli import main
from elc_bert.evaluation.scorecard import GLUE_ENTRIES, PAPER_STRICT_SMALL, build_scorecard, scorecard

# Hand-made scores (fractions, as the result files store them).
GLUE_SCORES = dict(zip(GLUE_ENTRIES, [0.30, 0.85, 0.80, 0.75, 0.70, 0.71, 0.80, 0.60, 0.65, 0.55, 0.62]))


def write(path: Path, value: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def make_run(run: Path, blimp=0.78, supplement=0.62, msgs=0.25, glue=GLUE_SCORES):
    if blimp is not None:
        write(run / "blimp.json", {"overall": blimp, "per_field": {"syntax": 0.8}})
    if supplement is not None:
        write(run / "supplement.json", {"overall": supplement})
    if msgs is not None:
        write(run / "msgs.json", {"overall": msgs})
    for entry, score in glue.items():
        result = {"task": entry, "metric_name": "accuracy", "metric": score, "all_metrics": {"accuracy": score}}
        write(run / "glue" / entry / "result.json", result | {"num_train": 10, "num_eval": 5, "epochs_run": 1.0})
    return run


def test_full_scorecard_aggregate(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    card = scorecard(run)
    glue_mean = 100 * sum(GLUE_SCORES.values()) / 11
    ours = card["ours"]
    assert ours["glue"] == pytest.approx(glue_mean) and ours["glue_num_tasks"] == 11
    assert (ours["blimp"], ours["supplement"], ours["msgs"]) == pytest.approx((78.0, 62.0, 25.0))
    assert ours["aggregate"] == pytest.approx(0.5 * 78.0 + 0.3 * glue_mean + 0.2 * 25.0)
    assert ours["partial_aggregate"] is None and card["missing"] == []
    assert ours["glue_tasks"]["mnli-mm"] == pytest.approx(71.0)
    table = (run / "scorecard.md").read_text()
    assert f"| {0.5 * 78.0 + 0.3 * glue_mean + 0.2 * 25.0:.1f} |" in table
    assert "| ELC-BERT strict-small (paper) | 75.8 | n/a | 73.7 | 29.4 | 65.9 |" in table
    assert capsys.readouterr().out == ""  # the library prints nothing: `elc-bert scorecard` prints the table
    main(["scorecard", str(run)])
    assert table in capsys.readouterr().out
    assert json.loads((run / "scorecard.json").read_text())["ours"]["aggregate"] == pytest.approx(ours["aggregate"])
    assert (run / "scorecard.png").stat().st_size > 1000


def test_paper_row_is_consistent_with_the_formula():
    paper = PAPER_STRICT_SMALL
    assert round(0.5 * paper["blimp"] + 0.3 * paper["glue"] + 0.2 * paper["msgs"], 1) == paper["aggregate"] == 65.9
    assert paper["supplement"] is None and all(value is None for value in paper["glue_tasks"].values())


def test_missing_msgs_and_glue_tasks_give_a_labelled_partial_aggregate(tmp_path):
    present = {entry: GLUE_SCORES[entry] for entry in ("cola", "mrpc", "rte", "wsc")}
    run = make_run(tmp_path / "run", msgs=None, supplement=None, glue=present)
    card = scorecard(run)
    ours = card["ours"]
    glue_mean = 100 * sum(present.values()) / 4
    assert ours["aggregate"] is None
    assert ours["partial_aggregate"] == pytest.approx((0.5 * 78.0 + 0.3 * glue_mean) / 0.8)
    assert "MSGS" in ours["partial_label"] and "some GLUE tasks" in ours["partial_label"]
    assert ours["glue_num_tasks"] == 4 and ours["glue_tasks"]["qqp"] is None
    assert {"Supplement", "MSGS", "GLUE qqp", "GLUE mnli-mm"} <= set(card["missing"])
    table = (run / "scorecard.md").read_text()
    assert "(4/11 tasks)" in table and f"n/a; {ours['partial_aggregate']:.1f} (partial:" in table


def test_all_glue_but_no_msgs_is_still_partial(tmp_path):
    ours = build_scorecard(make_run(tmp_path / "run", msgs=None))["ours"]
    glue_mean = 100 * sum(GLUE_SCORES.values()) / 11
    assert ours["aggregate"] is None
    assert ours["partial_aggregate"] == pytest.approx((0.5 * 78.0 + 0.3 * glue_mean) / 0.8)
    assert "some GLUE tasks" not in ours["partial_label"]


def test_empty_run_and_the_eval_folder_and_bad_files(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    ours = build_scorecard(empty)["ours"]
    assert [ours[key] for key in ("blimp", "glue", "msgs", "aggregate", "partial_aggregate")] == [None] * 5
    main(["scorecard", str(empty)])
    assert "| n/a | n/a | n/a | n/a | n/a |" in capsys.readouterr().out
    # `elc-bert eval-blimp` wrote to MODEL/eval/ by default before: found there too (older runs).
    write(tmp_path / "other" / "eval" / "blimp.json", {"overall": 0.5})
    assert build_scorecard(tmp_path / "other")["ours"]["blimp"] == pytest.approx(50.0)
    write(tmp_path / "bad" / "blimp.json", {"overall": 78.0})  # a percentage where a fraction belongs
    with pytest.raises(ValueError, match=r"blimp\.json: 'overall' must be a number in \[-1, 1\]"):
        build_scorecard(tmp_path / "bad")
    write(tmp_path / "bad2" / "msgs.json", {"mean": 0.3})
    with pytest.raises(ValueError, match=r"msgs\.json: no 'overall' key"):
        build_scorecard(tmp_path / "bad2")
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        build_scorecard(tmp_path / "nowhere")


def test_blimp_results_in_eval_blimps_default_folder_are_read_and_named(tmp_path, monkeypatch, capsys):
    """`elc-bert eval-blimp RUN` writes to outputs/eval-blimp/<RUN's folder name>/ (in the working folder): the
    scorecard reads BLiMP and the supplement there after RUN and RUN/eval/, only when the file records RUN as its
    model (another run of the same name shares the folder), and says which file it read and which it passed over."""
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "experiments" / "elc" / "seed42", blimp=None, supplement=None)
    shared = tmp_path / "outputs" / "eval-blimp" / "seed42"
    write(shared / "blimp_filtered.json", {"overall": 0.61, "model": "experiments/elc/seed42"})  # relative, as typed
    write(shared / "supplement_filtered.json", {"overall": 0.55, "model": str(tmp_path / "experiments/ltg/seed42")})
    card = build_scorecard(run)
    assert card["ours"]["blimp"] == pytest.approx(61.0) and card["ours"]["supplement"] is None
    assert card["sources"]["blimp"] == str(Path("outputs/eval-blimp/seed42/blimp_filtered.json"))
    [passed_over] = card["passed_over"]
    assert "supplement_filtered.json" in passed_over and "ltg/seed42" in passed_over
    main(["scorecard", str(run)])
    table = capsys.readouterr().out
    assert "- BLiMP: `outputs/eval-blimp/seed42/blimp_filtered.json`" in table
    assert "- Supplement: none found" in table and "- MSGS: `" in table
    assert f"- GLUE: `{run / 'glue' / '<task>' / 'result.json'}`" in table
    assert "Passed over, another model's: `outputs/eval-blimp/seed42/supplement_filtered.json`" in table
    # The run's own file comes first.
    write(run / "blimp.json", {"overall": 0.7})
    assert build_scorecard(run)["ours"]["blimp"] == pytest.approx(70.0)


def test_a_capped_blimp_is_labelled_and_never_drawn_or_aggregated_as_the_full_one(tmp_path, monkeypatch):
    """BLiMP scored on the first 20 pairs of each set (`eval-blimp --max-pairs-per-set 20`) is a sample, not the
    paper's measurement: its cell says so, the aggregate is not given (the partial one names the cap), and the chart
    draws that bar hatched and no partial aggregate beside the paper's."""
    run = make_run(tmp_path / "run")
    write(run / "blimp.json", {"overall": 0.78, "max_pairs_per_set": 20})
    drawn = []
    monkeypatch.setattr(plots, "save", lambda figure, path: drawn.append(figure))
    card = scorecard(run)
    ours = card["ours"]
    assert ours["capped"] == {"blimp": 20} and ours["aggregate"] is None
    assert (
        "0.5 BLiMP (first 20 pairs per set)" in ours["partial_label"]
        and "missing the full BLiMP" in ours["partial_label"]
    )
    # A capped supplement is not part of the aggregate: it does not withhold it.
    write(run / "blimp.json", {"overall": 0.78})
    write(run / "supplement.json", {"overall": 0.62, "max_pairs_per_set": 20})
    assert build_scorecard(run)["ours"]["aggregate"] is not None
    table = (run / "scorecard.md").read_text()
    assert "| 78.0 (first 20 pairs per set: not the full test) |" in table
    [axes] = drawn[0].axes
    ours_bars, paper_bars = axes.containers
    assert [bar.get_height() for bar in ours_bars] == pytest.approx([78.0, 62.0, ours["glue"], 25.0])  # no aggregate
    assert [bar.get_hatch() for bar in ours_bars] == ["//", None, None, None]
    assert [bar.get_height() for bar in paper_bars] == pytest.approx([75.8, 73.7, 29.4, 65.9])
    assert "first 20 pairs per set only" in axes.get_xlabel() and "not drawn" in axes.get_xlabel()
