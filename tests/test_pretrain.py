"""The pretraining job end to end on the bundled WikiText-2 sample: runs, writes its run directory, resumes."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from elc_bert.training.config import load_config, save_config
from elc_bert.training.pretrain import PretrainConfig, evenly_spaced, pretrain

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"


def _config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "run"),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        preset="tiny",
        vocab_size=600,
        min_frequency=2,
        seq_length=32,
        max_steps=6,
        batch_size=8,
        training={"save_steps": 3, "logging_steps": 1, "dataloader_num_workers": 0},
    )
    values.update(overrides)
    return PretrainConfig(**values)


def test_pretrain_writes_run_directory_and_loss_falls(tmp_path):
    config = _config(tmp_path, max_steps=30, learning_rate=5e-3, training={"save_steps": 100, "logging_steps": 1})
    pretrain(config)
    run = Path(config.output_dir)
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "pretrain_config.yaml",
        "metrics.json",
        "loss.png",
    ):
        assert (run / name).exists(), name
    losses = [
        entry["loss"]
        for entry in __import__("json").loads((run / "metrics.json").read_text())["log_history"]
        if "loss" in entry
    ]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


def _write_config(config, path):
    import yaml

    path.write_text(yaml.safe_dump(config.__dict__))
    return path


def _run(*arguments, torchrun=False):
    command = [str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node", "2", "--master_port", "29517"]
    command = (command if torchrun else [sys.executable]) + [str(Path(__file__).with_name("run_pretrain.py"))]
    return subprocess.run(command + [str(a) for a in arguments], capture_output=True, text=True, timeout=300)


def test_killed_run_resumes_to_the_same_weights(tmp_path):
    """A process killed right after its step-3 checkpoint, then the same command again: the final weights equal
    those of an uninterrupted run with the same seed, bit for bit."""
    uninterrupted = _config(tmp_path / "a")
    assert _run(_write_config(uninterrupted, tmp_path / "a.yaml")).returncode == 0
    interrupted = _config(tmp_path / "b")
    path = _write_config(interrupted, tmp_path / "b.yaml")
    killed = _run(path, "--die-after-checkpoint", 3)
    assert killed.returncode == 17, killed.stderr[-2000:]
    run = Path(interrupted.output_dir)
    assert (run / "checkpoint-3").is_dir() and not (run / "model.safetensors").exists()
    resumed = _run(path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = load_file(Path(uninterrupted.output_dir) / "model.safetensors")
    final = load_file(run / "model.safetensors")
    assert expected.keys() == final.keys()
    for key in expected:
        assert torch.equal(expected[key], final[key]), key


def test_config_file_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: out\ntrain_files: [a]\nmodel: {layer_combination: elc}\n")
    config = load_config(PretrainConfig, path, ["model.layer_combination=residual", "max_steps=7"])
    assert config.model == {"layer_combination": "residual"} and config.max_steps == 7
    with pytest.raises(ValueError, match="unknown keys \\['max_step'\\]"):
        load_config(PretrainConfig, path, ["max_step=7"])
    with pytest.raises(ValueError, match="optimizer"):
        load_config(PretrainConfig, path, ["optimizer=sgd"])


def test_missing_split_names_the_folder(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.dev").write_text("hello\n")
    with pytest.raises(FileNotFoundError, match="corpus.*train"):
        pretrain(_config(tmp_path, data_dir=str(tmp_path), train_files=["corpus"]))


def test_two_process_ddp_ranks_agree_on_the_weights(tmp_path):
    """`torchrun --nproc_per_node 2` (gloo on CPU) through the Trainer: both ranks end with identical weights."""
    config = _config(tmp_path, max_steps=4, training={"save_steps": 100, "logging_steps": 1})
    completed = _run(_write_config(config, tmp_path / "ddp.yaml"), torchrun=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    digests = [(Path(config.output_dir) / f"rank{r}.sha256").read_text().split() for r in (0, 1)]
    assert digests[0][0] == digests[1][0] == "2", "both processes saw a world of 2"
    assert digests[0][1] == digests[1][1]


def test_long_phase_switches_to_long_samples_with_a_quarter_batch(tmp_path, monkeypatch):
    """The recipe's last 10%: samples up to long_seq_length tokens, batch/4, same run (one schedule, one optimizer)."""
    import elc_bert.training.pretrain as job

    shapes = []
    collate = job.BatchRowCollator.__call__

    def recording(self, rows):
        batch = collate(self, rows)
        shapes.append(tuple(batch["input_ids"].shape))
        return batch

    monkeypatch.setattr(job.BatchRowCollator, "__call__", recording)
    config = _config(tmp_path, max_steps=10, seq_length=32, long_seq_length=128, long_after=0.8, batch_size=8)
    pretrain(config)
    assert len(shapes) == 10
    assert all(b == 8 and t <= 32 for b, t in shapes[:8]), shapes
    assert all(b == 2 and t <= 128 for b, t in shapes[8:]) and max(t for _, t in shapes[8:]) > 32, shapes
    with pytest.raises(ValueError, match="long_seq_length"):
        _config(tmp_path, long_seq_length=16)
    with pytest.raises(ValueError, match="training.per_device_train_batch_size"):
        _config(tmp_path, training={"per_device_train_batch_size": 4})


def test_batches_cover_each_epoch_once():
    from elc_bert.data.pretraining import schedule_batches

    batches = schedule_batches(10, 4, 5, seed=3)  # 20 draws = two epochs of 10
    flat = [i for batch in batches for i in batch]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert batches == schedule_batches(10, 4, 5, seed=3) and batches != schedule_batches(10, 4, 5, seed=4)


def test_capped_validation_set_spans_every_file():
    samples = [("first file", i) for i in range(60)] + [("second file", i) for i in range(40)]
    chosen = evenly_spaced(samples, 10)
    assert len(chosen) == 10 and len(set(chosen)) == 10
    assert {name for name, _ in chosen} == {"first file", "second file"}
    assert sum(name == "first file" for name, _ in chosen) == 6  # in proportion to the files' sizes
    assert evenly_spaced(samples[:5], 10) == samples[:5]
    with pytest.raises(ValueError, match="max_eval_samples"):
        PretrainConfig(output_dir="x", train_files=["a"], max_eval_samples=0)


def test_resuming_with_a_different_config_names_the_fields(tmp_path):
    config = PretrainConfig(output_dir=str(tmp_path), train_files=["a"], max_steps=10)
    path = tmp_path / "pretrain_config.yaml"
    save_config(config, path)
    save_config(dataclasses.replace(config, max_steps=20), path)  # no checkpoint yet: a fresh start, overwritten
    (tmp_path / "checkpoint-5").mkdir()
    save_config(dataclasses.replace(config, max_steps=20), path)  # the config it was started with: resumes
    expected = r"pretrain_config.yaml.*max_steps: 20 -> 10.*model: \{\} -> \{'layer_combination'"
    with pytest.raises(ValueError, match=expected):
        save_config(dataclasses.replace(config, model={"layer_combination": "residual"}), path)
