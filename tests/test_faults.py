"""Faults (issue 34): runs that diverge, values that are not finite, weights that are NaN."""

from pathlib import Path

import pytest
import torch
from conftest import TINY

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.tokenizer import save_tokenizer, train_tokenizer
from elc_bert.hub.export import export
from elc_bert.training.config import load_config
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
        assert finetune_ner.build_model(allowed, labels) is not None
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
    assert finetune_ner.build_model(config, labels).classifier is not None


def test_an_empty_stream_is_an_error_and_a_huge_sentence_packs_in_linear_time():
    import datasets

    from elc_bert.data.pretraining import pack_sentences
    from elc_bert.training.pretrain import StreamedRows

    empty = datasets.Dataset.from_dict({"input_ids": [[1, 2]]}).to_iterable_dataset().filter(lambda row: False)
    with pytest.raises(ValueError, match="yielded no sample in a whole pass"):
        next(iter(StreamedRows(empty, batch_size=2, parts=1, num_steps=3, max_length=8)))
    # One sentence of 3 M tokens (a 10 MB line): cut once into pieces (a quadratic cut takes minutes here).
    sentence = list(range(3_000_000))
    segments = pack_sentences([[sentence, [7, 8]]], 126)
    assert [token for segment in segments[:-1] for token in segment] == sentence[: 126 * (len(segments) - 1)]
    assert segments[-1] == sentence[126 * (len(segments) - 1) :] + [7, 8] or segments[-1] == [7, 8]


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
