"""The BabyLM 2025 zero-shot evaluation (issue 33) against naive scorers written here from the task definitions.

Items are made up here (EWoK's text must never be committed); the staged data in ../shared/data is only read.
"""

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import naive_spearman, write_reading_csv
from hub_server import local_hub, put_branch

from elc_bert import InputError
from elc_bert.evaluation import babylm
from elc_bert.evaluation.babylm import chosen, evaluate_babylm, read_task, score_items

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
SHARED = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not beside the repository")


# ----------------------------------------------------------------------------- naive scorers, from the definitions
@torch.no_grad()
def naive_pll(model, tokenizer, sentence: str, completion: str, within_word=False, temperature=1.0) -> float:
    """Mask each token of the completion in turn (a token belongs to it when its character span ends after the
    completion starts), one forward pass per token, sum log p(token) in float64; within_word also masks the later
    tokens of the token's word."""
    encoding = tokenizer(sentence, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, start = encoding["input_ids"], len(sentence) - len(completion)
    words = encoding.word_ids()
    total = 0.0
    for t, ((_, end), special) in enumerate(zip(encoding["offset_mapping"], encoding["special_tokens_mask"])):
        if special or end <= start:
            continue
        masked = list(ids)
        masked[t] = tokenizer.mask_token_id
        if within_word:
            for u in range(t + 1, len(ids)):
                if words[u] is not None and words[u] == words[t]:
                    masked[u] = tokenizer.mask_token_id
        logits = model(torch.tensor([masked])).logits[0, t].double() / temperature
        total += torch.log_softmax(logits, -1)[ids[t]].item()
    return total


@torch.no_grad()
def naive_causal(model, tokenizer, sentence: str, completion: str) -> float:
    """sum over the completion's tokens (after the first token) of log p(token | the tokens before it)."""
    encoding = tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
    ids, start = encoding["input_ids"], len(sentence) - len(completion)
    logits = model(torch.tensor([ids])).logits[0].double()
    total = 0.0
    for t in range(1, len(ids)):
        if encoding["offset_mapping"][t][1] > start:
            total += torch.log_softmax(logits[t - 1], -1)[ids[t]].item()
    return total


# ------------------------------------------------------------------------------------------ made-up task files
def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def made_up_data(root: Path) -> Path:
    """An evaluation_data-like folder with a few items of every task, written here."""
    full = root / "full_eval"
    pair = {"field": "syntax", "linguistics_term": "agreement", "UID": "toy_agreement"}
    write_jsonl(
        full / "blimp_filtered" / "toy_agreement.jsonl",
        [
            {"sentence_good": "The cat is here.", "sentence_bad": "The cat are here.", **pair},
            {"sentence_good": "The dogs were there.", "sentence_bad": "The dogs was there.", **pair},
            {"sentence_good": "Same words here.", "sentence_bad": "Same words here.", **pair},  # a tie: right
        ],
    )
    write_jsonl(
        full / "blimp_filtered" / "toy_island.jsonl",
        [
            {
                "sentence_good": "Who did you see?",
                "sentence_bad": "Who did you see him?",
                **{**pair, "UID": "toy_island"},
            }
        ],
    )
    write_jsonl(
        full / "supplement_filtered" / "toy_turns.jsonl",
        [{"sentence_good": "A: Hi. B: Hello.", "sentence_bad": "A: Hi. A: Hello."}],
    )
    ewok = {"ConceptA": "a", "ConceptB": "b", "ContextType": "t", "ContextDiff": "d", "TargetDiff": "e"}
    write_jsonl(
        full / "ewok_filtered" / "made-up.jsonl",
        [
            {"Domain": "toy-physics", "Context1": "The box is on the table.", "Context2": "The box is under it.",
             "Target1": "The box is up.", "Target2": "The box is down.", **ewok},
            {"Domain": "toy-social", "Context1": "She helped him.", "Context2": "She hit him.",
             "Target1": "He thanked her.", "Target2": "He thanked nobody.", **ewok},
        ],
    )  # fmt: skip
    for name, ops in (("regular", 0), ("regular", 1), ("ambiref", 0), ("move_contents", 2)):
        path = full / "entity_tracking" / f"{name}.jsonl"
        records = json.loads("[" + ",".join(path.read_text().splitlines()) + "]") if path.exists() else []
        records.append(
            {"sample_id": 1, "numops": ops, "input_prefix": "Box 0 contains the map. Box 0 contains ",
             "options": ["the map.", "the hat.", "nothing."], "example_id": len(records)}
        )  # fmt: skip
        write_jsonl(path, records)
    write_jsonl(
        full / "wug_adj_nominalization" / "wug_adj_nominalization.jsonl",
        [
            {"sentences": f"Make a noun of {w}. {w}ity\tMake a noun of {w}. {w}ness", "ratio": r}
            for w, r in (("blick", 0.2), ("tave", 0.9), ("gorp", 0.5), ("snad", 0.7))
        ],
    )
    write_jsonl(
        full / "wug_past_tense" / "wug_past_tense.jsonl",
        [
            {
                "sentences": f"They {w} a lot. They {w}ed\tThey {w} a lot. They {w}t\tThey {w} a lot. They {w}o",
                "ratio": r,
            }
            for w, r in (("blick", 0.6), ("tave", 0.8), ("gorp", 0.55))
        ],
    )
    write_jsonl(
        full / "comps" / "comps_base.jsonl",
        [
            {"prefix_acceptable": "A robin", "prefix_unacceptable": "A stone", "property_phrase": "can fly."},
            {"prefix_acceptable": "A dog", "prefix_unacceptable": "A table", "property_phrase": "can bark."},
        ],
    )
    for name in ("comps_wugs", "comps_wugs_dist-before", "comps_wugs_dist-in_between"):
        write_jsonl(
            full / "comps" / f"{name}.jsonl",
            [{"prefix_acceptable": "A wug", "prefix_unacceptable": "A dax", "property_phrase": "can swim."}],
        )
    return root


def made_up_fast_data(root: Path) -> Path:
    """made_up_data's evaluation_data with a fast_eval/ beside full_eval/ (the fast folders the pipeline's
    eval_zero_shot_fast.sh reads; the wug tests and the reading task come from full_eval/, as the staged data has
    them) and a reading_data.csv."""
    full = made_up_data(root) / "full_eval"
    fast = root / "fast_eval"
    for task, name in (("blimp_filtered", "blimp_fast"), ("supplement_filtered", "supplement_fast"),
                       ("ewok_filtered", "ewok_fast")):  # fmt: skip
        for path in babylm.task_files(full / task):
            write_jsonl(fast / name / path.name, [json.loads(line) for line in path.read_text().splitlines()[:1]])
    regular = (full / "entity_tracking" / "regular.jsonl").read_text()
    (fast / "entity_tracking_fast").mkdir(parents=True)
    (fast / "entity_tracking_fast" / "regular.jsonl").write_text(regular)
    write_reading_csv(full / "reading" / "reading_data.csv")
    return root


def naive_task_scores(model, tokenizer, items, causal=False, within_word=False):
    scorer = naive_causal if causal else naive_pll
    options = {} if causal else {"within_word": within_word}
    return [[scorer(model, tokenizer, s, c, **options) for s, c in zip(i.sentences, i.completions)] for i in items]


@pytest.mark.parametrize("task", [task for task, spec in babylm.TASKS.items() if spec.metric != "reading"])
def test_every_task_equals_naive_scores_and_metric(task, tokenizer, mlm, tmp_path):
    data = made_up_data(tmp_path)
    items = read_task(task, babylm.find_task_folder(task, data))
    scores = score_items(mlm, tokenizer, items, causal=False, progress=False)
    naive = naive_task_scores(mlm, tokenizer, items)
    for ours, theirs in zip(scores, naive):
        assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 1e-4
    result = babylm.TASKS[task].evaluate(items, scores)
    if task in ("wug_adj", "wug_past"):
        probs = [math.exp(s[0]) / sum(math.exp(v) for v in s) for s in naive]
        assert result["average"] == pytest.approx(naive_spearman(probs, [item.ratio for item in items]), abs=1e-9)
        return
    # accuracy per UID, candidate 0 right when no candidate scores strictly higher, averaged over UIDs
    per_uid = {}
    for item, s in zip(items, naive):
        per_uid.setdefault(item.uid, []).append(all(s[0] >= v for v in s[1:]))
    accuracy = {uid: 100.0 * sum(v) / len(v) for uid, v in per_uid.items()}
    assert result["by"]["UID"] == pytest.approx(accuracy)
    if task == "entity_tracking":
        files = {}
        for uid, value in accuracy.items():
            files.setdefault(uid.rsplit("_", 2)[0], []).append(value)
        expected = sum(sum(v) / len(v) for v in files.values()) / len(files)
        assert set(result["by"]["file"]) == {"regular", "ambiref", "move_contents"}
    else:
        expected = sum(accuracy.values()) / len(accuracy)
    assert result["average"] == pytest.approx(expected)


def test_ties_count_as_right_and_completions_only_are_scored(tokenizer, mlm, tmp_path):
    data = made_up_data(tmp_path)
    items = read_task("blimp", babylm.find_task_folder("blimp", data))
    tie = next(item for item in items if item.sentences[0] == item.sentences[1])
    (scores,) = score_items(mlm, tokenizer, [tie], causal=False, progress=False)
    assert scores[0] == scores[1] and chosen(scores) == 0
    assert chosen([1.0, 2.0, 2.0]) == 1 and chosen([2.0, 2.0]) == 0
    # EWoK: the context's tokens are not scored: the same target after another context scores differently, but the
    # score equals the naive completion-only one, not the whole sentence's
    ewok = read_task("ewok", babylm.find_task_folder("ewok", data))[0]
    (scores,) = score_items(mlm, tokenizer, [ewok], causal=False, progress=False)
    whole = naive_pll(mlm, tokenizer, ewok.sentences[0], ewok.sentences[0])
    assert scores[0] == pytest.approx(naive_pll(mlm, tokenizer, ewok.sentences[0], ewok.completions[0]), abs=1e-4)
    assert abs(scores[0] - whole) > 1e-3


def test_causal_backend_equals_naive(tokenizer, gpt, tmp_path):
    data = made_up_data(tmp_path)
    for task in ("blimp", "ewok", "entity_tracking"):
        items = read_task(task, babylm.find_task_folder(task, data))
        scores = score_items(gpt, tokenizer, items, causal=True, progress=False)
        for ours, theirs in zip(scores, naive_task_scores(gpt, tokenizer, items, causal=True)):
            assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 1e-4


def test_within_word_l2r_equals_naive_on_words_of_1_2_3_tokens(tokenizer, mlm):
    by_size = {}
    for word in SAMPLE.read_text(encoding="utf-8").split():
        if word.isalpha():
            by_size.setdefault(len(tokenizer(word, add_special_tokens=False)["input_ids"]), word)
    sentence = f"{by_size[1]} {by_size[2]} {by_size[3]} {by_size[1]}."
    encoding = tokenizer(sentence)
    words = [w for w in encoding.word_ids() if w is not None]
    assert {1, 2, 3} <= {words.count(w) for w in set(words)}  # words of 1, 2 and 3 sub-tokens
    item = babylm.Item([sentence], [sentence], "x", "made-up")
    (scores,) = score_items(mlm, tokenizer, [item], causal=False, pll="within_word_l2r", progress=False)
    assert scores[0] == pytest.approx(naive_pll(mlm, tokenizer, sentence, sentence, within_word=True), abs=1e-4)
    original = naive_pll(mlm, tokenizer, sentence, sentence)
    assert abs(scores[0] - original) > 1e-3  # the variants differ on multi-token words
    (hot,) = score_items(mlm, tokenizer, [item], causal=False, temperature=2.0, progress=False)
    assert hot[0] == pytest.approx(naive_pll(mlm, tokenizer, sentence, sentence, temperature=2.0), abs=1e-4)


# ------------------------------------------------------------------------------------------------ runs and files
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny pretraining run keeping checkpoint-2, checkpoint-4 and its final model."""
    from elc_bert.training.pretrain import PretrainConfig, pretrain

    root = tmp_path_factory.mktemp("babylm-run")
    config = PretrainConfig(
        output_dir=str(root / "run"),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        preset="tiny",
        vocab_size=300,
        min_frequency=2,
        seq_length=32,
        max_steps=4,
        batch_size=8,
        training={"save_steps": 2, "logging_steps": 1, "dataloader_num_workers": 0, "disable_tqdm": True},
    )
    pretrain(config)
    return root / "run"


def test_all_checkpoints_run_writes_official_layout_and_resumes_after_a_kill(run_dir, tmp_path, monkeypatch):
    data = made_up_data(tmp_path / "data")
    tasks = ["blimp", "entity_tracking", "wug_adj"]
    whole = evaluate_babylm(run_dir, data, tmp_path / "whole", tasks, all_checkpoints=True, progress=False)
    assert list(whole["rows"]) == ["checkpoint-2", "checkpoint-4", "main"]
    assert [whole["rows"][r]["step"] for r in whole["rows"]] == [2, 4, 4]
    predictions = tmp_path / "whole" / "run" / "checkpoint-2" / "zero_shot" / "mlm" / "blimp" / "blimp_filtered"
    written = json.loads((predictions / "predictions.json").read_text())
    assert [p["id"] for p in written["toy_agreement"]["predictions"]] == [f"toy_agreement_{k}" for k in range(3)]
    assert "### AVERAGE ACCURACY" in (predictions / "best_temperature_report.txt").read_text()
    assert (tmp_path / "whole" / "run" / "curves" / "blimp.png").is_file()

    calls = []
    real = babylm.score_items

    def killed_after_four(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt  # killed while scoring the fifth task
        return real(*args, **kwargs)

    monkeypatch.setattr(babylm, "score_items", killed_after_four)
    with pytest.raises(KeyboardInterrupt):
        evaluate_babylm(run_dir, data, tmp_path / "killed", tasks, all_checkpoints=True, progress=False)
    calls.clear()
    monkeypatch.setattr(babylm, "score_items", lambda *a, **k: calls.append(1) or real(*a, **k))
    resumed = evaluate_babylm(run_dir, data, tmp_path / "killed", tasks, all_checkpoints=True, progress=False)
    assert len(calls) == 9 - 4  # the four finished tasks were kept
    assert resumed["rows"] == whole["rows"]
    assert (tmp_path / "killed" / "run" / "summary.md").read_text() == (
        tmp_path / "whole" / "run" / "summary.md"
    ).read_text()
    # other settings are scored again, not read back
    calls.clear()
    evaluate_babylm(run_dir, data, tmp_path / "killed", ["blimp"], pll="within_word_l2r", progress=False)
    assert len(calls) == 1


# --------------------------------------------------------------------------------------- revisions of a Hub repository
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def test_all_revisions_score_each_branch_in_words_order_as_its_folder(run_dir, tmp_path, monkeypatch):
    """--all-revisions reads the branches named as BabyLM revisions, in words order (chck_10M after chck_2M, not
    before it as in text order), then main, each at its commit, and scores each as its model folder scores."""
    data = made_up_data(tmp_path / "data")
    held = {"chck_2M": run_dir / "checkpoint-2", "chck_10M": run_dir / "checkpoint-4", "main": run_dir}
    with local_hub(monkeypatch, tmp_path / "hf-cache") as state:
        for branch, folder in {**held, "dev": run_dir / "checkpoint-2"}.items():
            put_branch(state, "test-user/revs", branch, {name: (folder / name).read_bytes() for name in MODEL_FILES})
        hub = evaluate_babylm("test-user/revs", data, tmp_path / "hub", ["blimp"], all_revisions=True, progress=False)
        one = evaluate_babylm("test-user/revs", data, tmp_path / "one", ["blimp"], revision="chck_10M", progress=False)
    assert list(hub["rows"]) == ["chck_2M", "chck_10M", "main"] and list(one["rows"]) == ["chck_10M"]
    for revision, folder in held.items():
        local = evaluate_babylm(folder, data, tmp_path / revision, ["blimp"], progress=False)["rows"]["main"]["blimp"]
        assert hub["rows"][revision]["blimp"] == pytest.approx(local, abs=1e-9)
    assert one["rows"]["chck_10M"]["blimp"] == hub["rows"]["chck_10M"]["blimp"]
    assert (tmp_path / "hub" / "revs" / "chck_10M" / "zero_shot" / "mlm" / "blimp" / "blimp_filtered").is_dir()


def test_revision_names_the_rules_do_not_know_are_refused_before_the_hub_is_asked(run_dir, tmp_path, monkeypatch):
    from elc_bert.cli import main
    from elc_bert.runs.layout import TRACK_CHECKPOINT_WORDS, revision_name, revision_words

    assert [revision_name(w) for w in (10**6, 10**7, 2 * 10**7, 10**8, 2 * 10**8, 10**9)] == [
        "chck_1M", "chck_10M", "chck_20M", "chck_100M", "chck_200M", "chck_1000M"
    ]  # fmt: skip
    assert revision_name(15 * 10**6) is None and revision_name(200) is None and revision_words("chck_30M") == 3 * 10**7
    assert [len(words) for words in TRACK_CHECKPOINT_WORDS.values()] == [19, 28]  # collate_preds.py's revision lists
    data = made_up_data(tmp_path / "data")
    monkeypatch.setattr("elc_bert.pretrained.hub_revisions", lambda repo: pytest.fail("the Hub was asked"))
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    for name in ("chck_15M", "chck_1B", "words-1M"):
        with pytest.raises(InputError, match=f"revision '{name}' is not one the BabyLM 2025 rules name"):
            evaluate_babylm("test-user/revs", data, tmp_path / "out", ["blimp"], revision=name, progress=False)
    with pytest.raises(InputError, match="read the branches of a Hub repository"):
        evaluate_babylm(run_dir, data, tmp_path / "out", ["blimp"], all_revisions=True, progress=False)
    with pytest.raises(SystemExit) as exit_:  # the parser: one way of choosing the models
        main(["eval-babylm", str(run_dir), "--data", str(data), "--all-checkpoints", "--revision", "chck_1M"])
    assert exit_.value.code == 2
    assert not (tmp_path / "out").exists()


def test_a_revision_the_repository_lacks_is_named_with_those_it_has(run_dir, tmp_path, monkeypatch, capsys):
    from elc_bert.cli import main

    data = made_up_data(tmp_path / "data")
    files = {name: (run_dir / name).read_bytes() for name in MODEL_FILES}
    with local_hub(monkeypatch, tmp_path / "hf-cache") as state:
        put_branch(state, "test-user/revs", "main", files)
        put_branch(state, "test-user/revs", "chck_1M", files)
        with pytest.raises(SystemExit) as exit_:
            main(["eval-babylm", "test-user/revs", "--revision", "chck_2M", "--data", str(data), "--tasks", "blimp"])
        assert exit_.value.code == 2
        assert "test-user/revs has no revision chck_2M (its BabyLM revisions: chck_1M, main)" in capsys.readouterr().err
        with pytest.raises(InputError, match="test-user/nothing: no such Hub model repository"):
            evaluate_babylm("test-user/nothing", data, tmp_path / "out", ["blimp"], all_revisions=True)


def test_the_summary_gives_each_hub_revisions_step_and_words_from_its_record(run_dir, tmp_path, monkeypatch):
    """`push --revisions` records each revision's words seen and step (`REVISION_RECORD`); --all-revisions fills the
    summary's step and words columns from it (main, which records neither, leaves them empty)."""
    from elc_bert.runs.layout import REVISION_RECORD

    data = made_up_data(tmp_path / "data")
    files = {name: (run_dir / "checkpoint-2" / name).read_bytes() for name in MODEL_FILES}
    with local_hub(monkeypatch, tmp_path / "hf-cache") as state:
        for branch, words, step in (("chck_1M", 1_000_000, 2), ("chck_2M", 2_000_000, 4)):
            record = {"run": "r", "revision": branch, "words": words + 17, "milestone": words, "step": step}
            put_branch(state, "test-user/revs", branch, {**files, REVISION_RECORD: json.dumps(record).encode()})
        put_branch(state, "test-user/revs", "main", files)
        summary = evaluate_babylm("test-user/revs", data, tmp_path / "out", ["blimp"], all_revisions=True,
                                  progress=False)  # fmt: skip
    rows = summary["rows"]
    assert [(rows[r]["step"], rows[r].get("words")) for r in rows] == [(2, 1_000_017), (4, 2_000_017), (None, None)]
    table = (tmp_path / "out" / "revs" / "summary.md").read_text()
    assert "| chck_1M | 2 | 1,000,017 |" in table and "| chck_2M | 4 | 2,000,017 |" in table
    assert "| main |  |  |" in table


def test_an_empty_main_is_skipped_by_name_before_any_revision_is_scored(run_dir, tmp_path, monkeypatch, caplog):
    """A repository whose main is empty (a new one, the final model not pushed yet): --all-revisions checks every
    revision for a model before scoring any, scores the others and says main was skipped; --revision main is
    refused naming it."""
    data = made_up_data(tmp_path / "data")
    files = {name: (run_dir / "checkpoint-2" / name).read_bytes() for name in MODEL_FILES}
    with local_hub(monkeypatch, tmp_path / "hf-cache") as state:
        put_branch(state, "test-user/revs", "chck_1M", files)
        put_branch(state, "test-user/revs", "main", {"README.md": b"# soon"})
        with caplog.at_level("WARNING", logger="elc_bert"):
            summary = evaluate_babylm("test-user/revs", data, tmp_path / "out", ["blimp"], all_revisions=True,
                                      progress=False)  # fmt: skip
        assert list(summary["rows"]) == ["chck_1M"] and "blimp" in summary["rows"]["chck_1M"]
        assert "test-user/revs: revision(s) main hold no model" in caplog.text
        monkeypatch.setattr(babylm, "score_items", lambda *a, **k: pytest.fail("a task was scored"))
        with pytest.raises(InputError, match="test-user/revs: revision main holds no model"):
            evaluate_babylm("test-user/revs", data, tmp_path / "one", ["blimp"], revision="main", progress=False)


def test_the_summary_of_what_was_scored_is_written_when_a_later_revision_fails(run_dir, tmp_path, monkeypatch):
    data = made_up_data(tmp_path / "data")
    real, calls = babylm.score_items, []

    def failing_at_the_second_revision(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("the second revision's weights did not load")
        return real(*args, **kwargs)

    monkeypatch.setattr(babylm, "score_items", failing_at_the_second_revision)
    with pytest.raises(OSError, match="did not load"):
        evaluate_babylm(run_dir, data, tmp_path / "out", ["blimp"], all_checkpoints=True, progress=False)
    summary = json.loads((tmp_path / "out" / "run" / "summary.json").read_text())
    assert list(summary["rows"]) == ["checkpoint-2", "checkpoint-4"]
    assert "blimp" in summary["rows"]["checkpoint-2"] and "blimp" not in summary["rows"]["checkpoint-4"]


def test_out_is_the_results_root_and_the_model_folder_goes_below_it(run_dir, tmp_path, monkeypatch, capsys):
    """`--out results` (the pipeline's results/) writes everything into results/<model name>/ (here `run`), nothing
    beside it that the pipeline's layout would read as a model (no results/results/); a model's folder given as
    --out is refused, naming the root to give."""
    from elc_bert.cli import main
    from elc_bert.runs.layout import PIPELINE_MODEL_RECORD

    data = made_up_data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    main(["eval-babylm", str(run_dir), "--data", str(data), "--tasks", "blimp", "--out", "results"])
    assert [path.name for path in Path("results").iterdir()] == ["run"]
    model = Path("results", "run")
    assert sorted(path.name for path in model.iterdir()) == [PIPELINE_MODEL_RECORD, "main", "summary.json",
                                                             "summary.md"]  # fmt: skip
    assert sorted(path.name for path in (model / "main").iterdir()) == ["eval-babylm", "zero_shot"]
    assert json.loads((model / "main" / "eval-babylm" / "blimp.json").read_text())["task"] == "blimp"
    assert str(model) in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["eval-babylm", str(run_dir), "--data", str(data), "--tasks", "blimp", "--out", str(model)])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and "--out is the results root" in error and "give --out results" in error


def test_another_model_of_the_same_name_is_refused_before_it_is_scored(tokenizer, mlm, tmp_path, monkeypatch):
    """Two models named alike (org-a/tiny, org-b/tiny) into one results root would share RESULTS/tiny/ and the
    collation would build one submission of both: the folder records its model, another is refused naming both."""
    data = made_up_data(tmp_path / "data")
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: (mlm, tokenizer, "masked"))
    evaluate_babylm("org-a/tiny", data, tmp_path / "results", ["blimp"], progress=False)
    evaluate_babylm("org-a/tiny", data, tmp_path / "results", ["blimp"], progress=False)  # the same model: fine
    monkeypatch.setattr(babylm, "score_items", lambda *a, **k: pytest.fail("a task was scored"))
    with pytest.raises(InputError, match=r"results/tiny holds the results of model org-a/tiny .*; org-b/tiny has"):
        evaluate_babylm("org-b/tiny", data, tmp_path / "results", ["blimp"], progress=False)
    (tmp_path / "results" / "tiny" / "elc_bert_model.json").write_text('{"model": ')  # damaged: named, exit 2
    with pytest.raises(InputError, match=r"elc_bert_model\.json: not the record elc-bert writes there"):
        evaluate_babylm("org-a/tiny", data, tmp_path / "results", ["blimp"], progress=False)


@pytest.mark.parametrize(
    "task, record, message",
    [
        ("blimp", {"sentence_good": "A b.", "field": "x", "linguistics_term": "y", "UID": "z"}, "'sentence_bad' is"),
        ("entity_tracking", {"input_prefix": "Box 0 has ", "options": ["a.", " "], "numops": 0}, "'options' item 1"),
        ("wug_adj", {"sentences": "a\tb", "ratio": 1.5}, "'ratio' must be a number in [0, 1]"),
        ("comps", {"prefix_acceptable": "A", "prefix_unacceptable": "", "property_phrase": "x."}, "'prefix_unaccep"),
    ],
)
def test_bad_task_files_name_file_line_and_field_before_the_model_loads(task, record, message, tmp_path, monkeypatch):
    folder = tmp_path / "data" / babylm.TASKS[task].folders[0]
    good = made_up_data(tmp_path / "good") / "full_eval" / babylm.TASKS[task].folders[0]
    lines = (babylm.task_files(good)[0]).read_text().splitlines()[:1]
    folder.mkdir(parents=True)
    (folder / "bad.jsonl").write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError) as error:
        evaluate_babylm("no-model-here", tmp_path / "data", tmp_path / "out", [task], progress=False)
    assert f"bad.jsonl:2: field {message}" in str(error.value)
    with pytest.raises(ValueError, match="unknown task 'glue'"):
        evaluate_babylm("no-model-here", tmp_path / "data", tmp_path / "out", ["glue"], progress=False)


def test_a_candidate_with_no_token_to_score_is_refused_before_any_task_is_scored(tokenizer, mlm, tmp_path, monkeypatch):
    """An option that tokenizes to nothing scored 0 and won its item; every task is checked once the tokenizer
    loads, before the first is scored, naming the file, line and candidate."""
    from tokenizers import normalizers

    cleaning = copy.deepcopy(tokenizer)  # BERT's text cleaning drops the zero-width space
    cleaning.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    data = made_up_data(tmp_path / "data")
    record = {"input_prefix": "Box 0 contains ", "options": ["the map.", "\u200b"], "numops": 0}
    write_jsonl(data / "full_eval" / "entity_tracking" / "zero_width.jsonl", [record])
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: (mlm, cleaning, "masked"))
    monkeypatch.setattr(babylm, "score_items", lambda *a, **k: pytest.fail("a task was scored"))
    with pytest.raises(InputError, match=r"zero_width\.jsonl:1, candidate 1: .* has no token to score"):
        evaluate_babylm("no-model-here", data, tmp_path / "out", ["blimp", "entity_tracking"], progress=False)
    assert not (tmp_path / "out").exists()


@needs_shared
def test_the_staged_2025_data_reads_as_the_pipeline_reads_it():
    full = SHARED / "babylm_eval_2025" / "full_eval"
    counts = {
        task: len(read_task(task, babylm.find_task_folder(task, full)))
        for task in babylm.TASKS
        if task not in ("blimp", "comps")
    }
    assert counts == {
        "supplement": 5218,
        "ewok": 7618,
        "entity_tracking": 9483,
        "wug_adj": 200,
        "wug_past": 50,
        "reading": 1726,
    }
    blimp = read_task("blimp", SHARED / "babylm_eval_2024" / "blimp_filtered")
    assert len({item.uid for item in blimp}) == 67
    entity = read_task("entity_tracking", full / "entity_tracking")
    assert {item.uid.rsplit("_", 2)[0] for item in entity} == {"regular", "ambiref", "move_contents"}
    assert all(len(item.sentences) == 5 for item in entity)
    with gzip.open(full / "wug_past_tense" / "wug_past_tense.jsonl.gz", "rt") as handle:
        assert (
            json.loads(handle.readline())["sentences"].split("\t")[0]
            == read_task("wug_past", full / "wug_past_tense")[0].sentences[0]
        )


def test_the_command(run_dir, tmp_path, capsys):
    from elc_bert.cli import main

    data = made_up_data(tmp_path / "data")
    out = tmp_path / "out"
    main(["eval-babylm", str(run_dir), "--data", str(data), "--tasks", "blimp", "wug_past", "--out", str(out)])
    printed = capsys.readouterr()
    assert "| main |" in printed.out and "BLiMP" in printed.out and "Wug Past (rho)" in printed.out
    assert str(out / "run") in printed.err  # where the results went: stderr, the table alone on stdout
    # BLiMP's number: the mean over its sets (UIDs) of the % of pairs whose prediction is the good sentence
    official = out / "run" / "main" / "zero_shot" / "mlm" / "blimp" / "blimp_filtered"
    predicted = json.loads((official / "predictions.json").read_text())
    goods = {}
    for item in read_task("blimp", data / "full_eval" / "blimp_filtered"):
        goods.setdefault(item.uid, []).append(item.sentences[0])
    right = {
        uid: [entry["pred"] == good for entry, good in zip(predicted[uid]["predictions"], sentences, strict=True)]
        for uid, sentences in goods.items()
    }
    expected = sum(100 * sum(marks) / len(marks) for marks in right.values()) / len(right)
    assert json.loads((out / "run" / "summary.json").read_text())["rows"]["main"]["blimp"] == pytest.approx(expected)
    with pytest.raises(SystemExit) as exit_:
        main(["eval-babylm", str(run_dir), "--data", str(data), "--tasks", "glue", "--out", str(out)])
    assert exit_.value.code == 2 and "unknown task 'glue'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["eval-babylm", str(run_dir), "--data", str(tmp_path / "nowhere"), "--out", str(out)])
    assert exit_.value.code == 2 and "nowhere" in capsys.readouterr().err


def test_fast_evaluation_folders_and_hub_dataset_ids(tmp_path, monkeypatch):
    data = made_up_data(tmp_path / "evaluation_data")
    fast = data / "fast_eval"
    (fast / "blimp_fast").mkdir(parents=True)
    (fast / "blimp_fast" / "x.jsonl").write_text(
        (data / "full_eval" / "blimp_filtered" / "toy_island.jsonl").read_text()
    )
    assert babylm.find_task_folder("blimp", fast) == fast / "blimp_fast"
    assert babylm.find_task_folder("wug_adj", fast) == data / "full_eval" / "wug_adj_nominalization"
    assert babylm.find_task_folder("blimp", data) == data / "full_eval" / "blimp_filtered"
    calls = []
    monkeypatch.setattr(
        "huggingface_hub.snapshot_download", lambda repo, repo_type: calls.append((repo, repo_type)) or str(data)
    )
    assert babylm.resolve_data("someone/babylm-eval") == data and calls == [("someone/babylm-eval", "dataset")]
    with pytest.raises(FileNotFoundError, match="nor a Hub dataset id"):
        babylm.resolve_data(tmp_path / "missing")


def test_the_wug_tests_name_the_eval_extra_before_anything_is_read(tmp_path, monkeypatch):
    """Spearman's rho needs scipy (the `eval` extra): a missing one is named before any data is read or scored."""
    import importlib.util

    from elc_bert import InputError
    from elc_bert.evaluation.babylm import evaluate_babylm

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "scipy" else found(name, *a))
    with pytest.raises(InputError, match=r'pip install "elc_bert\[eval\]"'):
        evaluate_babylm("no-such-model", tmp_path / "no-data", tmp_path / "out", tasks=["blimp", "wug_adj"])
    assert not (tmp_path / "out").exists()


# The official pipeline's layout and keys (babylm/evaluation-pipeline-2025): sentence_zero_shot/run.py writes
# <results>/<Path(model).stem>/<revision>/zero_shot/<backend>/<its --task>/<Path(data folder).stem>/predictions.json,
# eval_zero_shot.sh and eval_zero_shot_fast.sh naming --task blimp (blimp_* and supplement_* folders), ewok,
# entity_tracking, wug_adj (wug_adj_nominalization), wug_past (wug_past_tense), comps; the keys are the items' UIDs
# (sentence_zero_shot/read_files.py: BLiMP's UID, the supplement's file stem, EWoK's Domain,
# <file stem>_<numops>_ops for entity tracking, the --task for the wug tests, base / wugs / wugs_dist_before /
# wugs_dist_in_between for COMPS); reading/run.py writes reading/predictions.json keyed "reading". collate_preds.py
# reads exactly these paths (_check_validity_of_dir, collate_full_eval_preds, get_revision_fast_eval_metrics).
PIPELINE_FULL_LAYOUT = {
    "blimp/blimp_filtered/predictions.json": {"toy_agreement", "toy_island"},
    "blimp/supplement_filtered/predictions.json": {"toy_turns"},
    "ewok/ewok_filtered/predictions.json": {"toy-physics", "toy-social"},
    "entity_tracking/entity_tracking/predictions.json": {
        "regular_0_ops", "regular_1_ops", "ambiref_0_ops", "move_contents_2_ops"
    },
    "wug_adj/wug_adj_nominalization/predictions.json": {"wug_adj"},
    "wug_past/wug_past_tense/predictions.json": {"wug_past"},
    "comps/comps/predictions.json": {"base", "wugs", "wugs_dist_before", "wugs_dist_in_between"},
    "reading/predictions.json": {"reading"},
}  # fmt: skip
PIPELINE_FAST_LAYOUT = {
    "blimp/blimp_fast/predictions.json": {"toy_agreement", "toy_island"},
    "blimp/supplement_fast/predictions.json": {"toy_turns"},
    "ewok/ewok_fast/predictions.json": {"toy-physics"},
    "entity_tracking/entity_tracking_fast/predictions.json": {"regular_0_ops", "regular_1_ops"},
    "wug_adj/wug_adj_nominalization/predictions.json": {"wug_adj"},
    "wug_past/wug_past_tense/predictions.json": {"wug_past"},
    "reading/predictions.json": {"reading"},
}
FAST_TASKS = ["blimp", "supplement", "ewok", "entity_tracking", "wug_adj", "wug_past", "reading"]


@pytest.mark.parametrize("evaluation", ["full", "fast"])
def test_predictions_are_written_where_and_as_the_pipeline_writes_them(evaluation, tokenizer, mlm, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    """Every task's predictions.json at the pipeline's path with its keys, full and fast, so that collate_preds.py
    reads ours as it reads its own; ids <UID>_<k> (the reading task: the row), the wug tests' "prob"."""
    root = made_up_fast_data(tmp_path / "evaluation_data")
    data, tasks, expected = (
        (root, list(babylm.TASKS), PIPELINE_FULL_LAYOUT)
        if evaluation == "full"
        else (root / "fast_eval", FAST_TASKS, PIPELINE_FAST_LAYOUT)
    )
    monkeypatch.setattr("elc_bert.pretrained.load_model", lambda *a, **k: (mlm, tokenizer, "masked"))
    evaluate_babylm("someone/babylm-model", data, tmp_path / "results", tasks, progress=False)
    base = tmp_path / "results" / "babylm-model" / "main" / "zero_shot" / "mlm"
    written = {
        path.relative_to(base).as_posix(): json.loads(path.read_text()) for path in base.rglob("predictions.json")
    }
    assert {path: set(value) for path, value in written.items()} == expected
    for path, by_uid in written.items():
        for uid, value in by_uid.items():
            assert list(value) == ["predictions"]
            ids = [entry["id"] for entry in value["predictions"]]
            assert ids == (list(range(len(ids))) if uid == "reading" else [f"{uid}_{k}" for k in range(len(ids))])
            if path.startswith("wug_"):
                assert all(0 <= entry["prob"] <= 1 for entry in value["predictions"])
    assert len(written["wug_past/wug_past_tense/predictions.json"]["wug_past"]["predictions"]) == 3
