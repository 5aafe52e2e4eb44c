"""ElcBertConfig: presets, validation, serialisation and Auto registration; the job configs: YAML + key=value into
typed dataclasses, every bad key or value refused by name."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, TrainingArguments

import elc_bert
from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError, LtgBertConfig, runs
from elc_bert.job_configs import (
    CONFIG_CLASSES,
    FinetuneGlueConfig,
    FinetuneNerConfig,
    MlmConfig,
    PretrainConfig,
    describe_config,
    load_config,
    save_config,
    saved_config,
)
from elc_bert.job_configs.conversion import bounds_text
from elc_bert.job_configs.fields import TRAINING_BOUNDS

# The paper's sizes (docs/elc-bert.md, "Sizes"): L, D, H, I, V.
PAPER_SIZES = {
    "strict": (12, 768, 12, 2048, 16384),
    "strict-small": (12, 384, 6, 1024, 6144),
}


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_paper_presets_sizes(name):
    config = ElcBertConfig.from_preset(name)
    layers, hidden, heads, inner, vocab = PAPER_SIZES[name]
    assert config.num_hidden_layers == layers
    assert config.hidden_size == hidden
    assert config.num_attention_heads == heads
    assert config.intermediate_size == inner
    assert config.vocab_size == vocab
    # The recipe's shared values.
    assert config.hidden_dropout_prob == pytest.approx(0.1)
    assert config.attention_probs_dropout_prob == pytest.approx(0.1)
    assert config.layer_norm_eps == pytest.approx(1e-7)
    assert config.position_bucket_size == 32
    assert config.max_position_embeddings == 512
    assert config.layer_combination == "elc" and config.elc_variant == "base"
    assert config.positional_split == "halves"
    assert config.pad_token_id == 3
    assert config.tie_word_embeddings is True


def test_presets_dict_and_tiny():
    assert {"strict", "strict-small", "tiny"} <= set(elc_bert.PRESETS)
    tiny = ElcBertConfig.from_preset("tiny")
    for field, value in elc_bert.PRESETS["tiny"].items():
        assert getattr(tiny, field) == value
    assert tiny.hidden_size % tiny.num_attention_heads == 0
    assert tiny.hidden_size <= 128 and tiny.num_hidden_layers <= 4


def test_preset_overrides():
    config = ElcBertConfig.from_preset("strict-small", layer_combination="residual", vocab_size=1000)
    assert config.layer_combination == "residual"
    assert config.vocab_size == 1000
    assert config.hidden_size == 384


def test_unknown_preset_raises():
    with pytest.raises(ValueError):
        ElcBertConfig.from_preset("no-such-preset")


def _expected_parameter_count(L, D, H, inner, V, P=32, elc=True):
    """Trainable parameters of the MLM model from the spec's shapes (tied decoder counted once)."""
    embedding = V * D + (2 * P - 1) * D + 2 * D  # E, R, relative LN
    attention = (2 * D * D + 2 * D) + (D * D + D) + (D * D + D) + 2 * D  # qk, v, out, post LN
    ffn = 2 * inner * D + D * inner
    head = D * D + D + V  # dense + decoder bias
    elc_weights = L * (L + 1) // 2 if elc else 0
    return embedding + L * (attention + ffn) + head + elc_weights


@pytest.mark.parametrize("name, millions", [("strict", 98.23), ("strict-small", 23.80)], ids=["strict", "strict-small"])
@pytest.mark.parametrize("combination", ["elc", "residual"])
def test_preset_parameter_count(name, millions, combination):
    config = ElcBertConfig.from_preset(name, layer_combination=combination)
    with torch.device("meta"):
        model = ElcBertForMaskedLM(config)
    count = sum(p.numel() for p in model.parameters())  # shared (tied) parameters are yielded once
    expected = _expected_parameter_count(*PAPER_SIZES[name], elc=combination == "elc")
    assert count == expected
    if combination == "elc":
        assert count / 1e6 == pytest.approx(millions, abs=0.01)
        residual = _expected_parameter_count(*PAPER_SIZES[name], elc=False)
        assert count - residual == 78  # sum n for L = 12


INVALID = [
    ("hidden_size", dict(hidden_size=30, num_attention_heads=4)),  # not divisible
    ("elc_variant", dict(elc_variant="bogus")),
    ("layer_combination", dict(layer_combination="dense")),
    ("positional_split", dict(positional_split="diagonal")),
    ("vocab_size", dict(vocab_size=0)),
    ("hidden_size", dict(hidden_size=-32)),
    ("num_hidden_layers", dict(num_hidden_layers=0)),
    ("num_attention_heads", dict(num_attention_heads=0)),
    ("intermediate_size", dict(intermediate_size=0)),
    ("max_position_embeddings", dict(max_position_embeddings=-1)),
    ("hidden_dropout_prob", dict(hidden_dropout_prob=1.0)),
    ("hidden_dropout_prob", dict(hidden_dropout_prob=-0.1)),
    ("attention_probs_dropout_prob", dict(attention_probs_dropout_prob=1.5)),
    ("classifier_dropout", dict(classifier_dropout=1.0)),
    ("layer_norm_eps", dict(layer_norm_eps=0.0)),
    ("position_bucket_size", dict(position_bucket_size=7)),
]


@pytest.mark.parametrize("field, overrides", INVALID, ids=[f"{f}-{list(o.values())[0]}" for f, o in INVALID])
def test_invalid_value_raises_naming_field(field, overrides):
    base = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    ElcBertConfig(**base)  # the base itself is valid
    with pytest.raises(ValueError, match=field):
        ElcBertConfig(**{**base, **overrides})


def test_invalid_override_through_preset_raises():
    with pytest.raises(ValueError, match="elc_variant"):
        ElcBertConfig.from_preset("tiny", elc_variant="nope")


def test_valid_edge_values_accepted():
    config = ElcBertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=32,
        intermediate_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.999,
        classifier_dropout=None,
    )
    assert config.classifier_dropout is None
    assert config.attention_probs_dropout_prob == pytest.approx(0.999)


def test_save_and_load_round_trip(tmp_path):
    config = ElcBertConfig(
        vocab_size=123,
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=6,
        intermediate_size=80,
        max_position_embeddings=256,
        position_bucket_size=16,
        layer_norm_eps=1e-6,
        hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.15,
        classifier_dropout=0.25,
        layer_combination="elc",
        elc_variant="weighted_output",
        positional_split="interleaved",
        num_labels=5,
    )
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "elc_bert"
    for loader in (ElcBertConfig.from_pretrained, AutoConfig.from_pretrained):
        loaded = loader(tmp_path)
        assert type(loaded) is ElcBertConfig
        for field in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "position_bucket_size",
            "layer_norm_eps",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "classifier_dropout",
            "layer_combination",
            "elc_variant",
            "positional_split",
            "pad_token_id",
            "tie_word_embeddings",
            "num_labels",
        ):
            assert getattr(loaded, field) == getattr(config, field), field
        strip = lambda d: {k: v for k, v in d.items() if k != "_name_or_path"}  # noqa: E731
        assert strip(loaded.to_dict()) == strip(config.to_dict())


def test_auto_config_for_model():
    config = AutoConfig.for_model("elc_bert", hidden_size=64, num_attention_heads=4, layer_combination="residual")
    assert isinstance(config, ElcBertConfig)
    assert config.model_type == "elc_bert"
    assert config.hidden_size == 64 and config.layer_combination == "residual"
    reference = AutoConfig.for_model("ltgbert")
    assert isinstance(reference, LtgBertConfig)
    assert reference.model_type == "ltgbert"


# ------------------------------------------------------------------------------------------------------- job configs
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# Each job: its config class, its folder of shipped configs and the smallest valid YAML.
JOBS = {
    "pretrain": (PretrainConfig, "pretrain", "output_dir: run\ntrain_files: [a]\n"),
    "ner": (FinetuneNerConfig, "ner", "output_dir: run\nmodel: m\ndata_dir: d\n"),
    "mlm": (MlmConfig, "mlm", "output_dir: run\nmodel: m\ndata_dir: d\n"),
    "glue": (FinetuneGlueConfig, "glue", "model: m\ndata_dir: d\n"),
}


def _load(tmp_path, job, overrides=(), extra=""):
    config_class, _, text = JOBS[job]
    path = tmp_path / f"{job}.yaml"
    path.write_text(text + extra)
    return load_config(config_class, path, list(overrides))


@pytest.mark.parametrize("job, folder", [(job, folder) for job, (_, folder, _) in JOBS.items()])
def test_every_shipped_config_loads(job, folder):
    """Guards the shipped YAML files against typos and values of the wrong type."""
    paths = sorted((CONFIGS / folder).glob("*.yaml"))
    assert paths
    for path in paths:
        config = load_config(JOBS[job][0], path, [])
        assert isinstance(config.learning_rate, float), path


@pytest.mark.parametrize("job, folder", [(job, folder) for job, (_, folder, _) in JOBS.items()])
def test_a_saved_config_reads_back_as_the_config_the_job_ran_with(tmp_path, job, folder):
    """What a job saves into its run folder, `job_configs.saved_config` (the model card's and export's reader) gives
    back as the same typed config, for every shipped config of every job."""
    command = {"ner": "finetune-ner", "glue": "finetune-glue"}.get(job, job)
    for path in sorted((CONFIGS / folder).glob("*.yaml")):
        config = load_config(CONFIG_CLASSES[command], path, [])
        run = tmp_path / path.stem
        run.mkdir()
        save_config(config, runs.config_file(run, command))
        assert saved_config(run, command) == config, path


def test_values_take_their_declared_types(tmp_path):
    """YAML reads 2e-4 (no dot) as a string, 3.0 as a float; `key=value` gives whatever YAML makes of the value."""
    extra = 'learning_rate: 2e-4\nmax_steps: 3.0\nbatch_size: "8"\ntraining: {save_steps: 5}\n'
    config = _load(tmp_path, "pretrain", ["torch_compile=no", "max_eval_samples=null", "model.hidden_size=64"], extra)
    assert config.learning_rate == pytest.approx(2e-4) and type(config.learning_rate) is float
    assert config.max_steps == 3 and type(config.max_steps) is int
    assert config.batch_size == 8 and type(config.batch_size) is int
    assert config.torch_compile is False and config.max_eval_samples is None
    assert config.model == {"hidden_size": 64} and config.training == {"save_steps": 5.0}  # TrainingArguments' float
    config = _load(tmp_path, "pretrain", ["learning_rate=2e-4", "weight_decay=0"])
    assert type(config.learning_rate) is float and type(config.weight_decay) is float
    ner = _load(tmp_path, "ner", ["shots=[8, 16]", "trials=2.0", "fusion=null", "fusion_options.bottleneck_ratio=1e-1"])
    assert ner.shots == [8, 16] and ner.trials == 2 and ner.fusion is None
    assert ner.fusion_options == {"bottleneck_ratio": pytest.approx(0.1)}
    assert _load(tmp_path, "ner", ["shots=8"]).shots == [8]  # a single value for a list of one
    mlm = _load(tmp_path, "mlm", ["epochs=2", "max_train_blocks=10"])
    assert type(mlm.epochs) is float and mlm.max_train_blocks == 10
    glue = _load(tmp_path, "glue", ["eval_steps=200", "output_dir=2024", "training.max_grad_norm=1e2"])
    assert glue.eval_steps == 200 and glue.output_dir == "2024" and glue.training == {"max_grad_norm": 100.0}


BAD_VALUES = [
    ("pretrain", "learning_rate=fast", r"learning_rate must be a number, got 'fast'"),
    ("pretrain", "max_steps=3.5", r"max_steps must be an integer, got 3.5"),
    ("pretrain", "torch_compile=maybe", r"torch_compile must be true or false, got 'maybe'"),
    ("pretrain", "training.save_steps=often", r"training.save_steps must be a number, got 'often'"),
    ("pretrain", "model.hidden_size=wide", r"model.hidden_size must be an integer, got 'wide'"),
    ("pretrain", "train_files=[{path: 3, split: [a]}]", r"train_files\[0\].split must be a string, got \['a'\]"),
    ("pretrain", "preset=huge", r"preset must be one of \[.*'tiny'.*\] or null, got 'huge'"),
    ("ner", "shots=[8, many]", r"shots\[1\] must be an integer, got 'many'"),
    ("ner", "fusion=dwat", r"fusion must be one of \[.*'dwatt'.*\] or null, got 'dwat'"),
    ("ner", "fusion_options.num_extra_layers=two", r"fusion_options.num_extra_layers must be an integer"),
    ("mlm", "epochs=[1]", r"epochs must be a number, got \[1\]"),
    ("glue", "training=5", r"training must be a mapping"),
]


@pytest.mark.parametrize("job, override, message", BAD_VALUES, ids=[o for _, o, _ in BAD_VALUES])
def test_a_value_of_the_wrong_type_names_file_key_type_and_value(tmp_path, job, override, message):
    with pytest.raises(ValueError, match=rf"{job}\.yaml.*{message}"):
        _load(tmp_path, job, [override])


def test_empty_values_name_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"learning_rate has no value: it must be a number"):
        _load(tmp_path, "pretrain", ["learning_rate="])
    with pytest.raises(ValueError, match=r"pretrain\.yaml: max_steps has no value"):
        _load(tmp_path, "pretrain", extra="max_steps:\n")
    with pytest.raises(ValueError, match=r"model has no value"):
        _load(tmp_path, "ner", ["model="])
    assert _load(tmp_path, "pretrain", ["max_eval_samples="]).max_eval_samples is None  # Optional: null


def test_missing_required_keys_are_named(tmp_path):
    path = tmp_path / "mlm.yaml"
    path.write_text("model: m\ndata_dir: d\n")
    with pytest.raises(ValueError, match=r"mlm\.yaml: missing required keys \['output_dir'\]"):
        load_config(MlmConfig, path, [])
    with pytest.raises(ValueError, match=r"missing required keys \['train_files\[0\].path'\]"):
        _load(tmp_path, "pretrain", ["train_files=[{split: train}]"])


UNKNOWN_KEYS = [
    ("pretrain", "max_step=7", "max_step", "max_steps"),
    ("pretrain", "model.layer_combinaton=residual", "model.layer_combinaton", "model.layer_combination"),
    ("pretrain", "training.save_stepz=3", "training.save_stepz", "training.save_steps"),
    ("pretrain", "train_files=[{path: x, splt: train}]", r"train_files\[0\].splt", r"train_files\[0\].split"),
    ("ner", "fusion_options.num_extra_layer=2", "fusion_options.num_extra_layer", "fusion_options.num_extra_layers"),
    ("ner", "training.num_train_epoch=2", "training.num_train_epoch", "training.num_train_epochs"),
    ("mlm", "training.weight_decai=0.1", "training.weight_decai", "training.weight_decay"),
    ("glue", "large_task=[mnli]", "large_task", "large_tasks"),
]


@pytest.mark.parametrize("job, override, key, nearest", UNKNOWN_KEYS, ids=[o for _, o, _, _ in UNKNOWN_KEYS])
def test_unknown_keys_at_any_depth_suggest_the_nearest(tmp_path, job, override, key, nearest):
    with pytest.raises(ValueError, match=rf"{job}\.yaml.*unknown keys \['{key}'\].*did you mean {nearest}\?"):
        _load(tmp_path, job, [override])


def test_keys_the_job_sets_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"model.vocab_size is set by the job.*use vocab_size"):
        _load(tmp_path, "pretrain", ["model.vocab_size=100"])
    with pytest.raises(ValueError, match=r"fusion_options.fusion is set by the job"):
        _load(tmp_path, "ner", ["fusion_options.fusion=concat"])
    assert _load(tmp_path, "ner", ["fusion_options.attn_implementation=eager"]).fusion_options  # from_backbone's


OUT_OF_BOUNDS = [
    ("pretrain", "learning_rate=0", "learning_rate must be > 0"),
    ("pretrain", "warmup_ratio=1.5", r"warmup_ratio must be in \[0, 1\]"),
    ("pretrain", "final_lr_ratio=-0.1", r"final_lr_ratio must be in \[0, 1\]"),
    ("pretrain", "long_after=1", r"long_after must be in \(0, 1\)"),
    ("pretrain", "weight_decay=-1", "weight_decay must be >= 0"),
    ("pretrain", "shuffle_buffer=0", "shuffle_buffer must be >= 1"),
    ("ner", "epochs=0", "epochs must be >= 1"),
    ("ner", "batch_size=-2", "batch_size must be >= 1"),
    ("ner", "learning_rate=-1e-3", "learning_rate must be > 0"),
    ("ner", "max_eval_sentences=0", "max_eval_sentences must be >= 1"),
    ("ner", "max_test_sentences=-1", "max_test_sentences must be >= 1"),
    ("ner", "shots=[8, 0]", r"shots must be >= 1, got \[8, 0\]"),
    ("mlm", "epochs=0", "epochs must be > 0"),
    ("mlm", "batch_size=0", "batch_size must be >= 1"),
    ("mlm", "mask_p=1.5", r"mask_p must be in \(0, 1\)"),
    ("mlm", "block_size=2", "block_size must be >= 3"),
    ("mlm", "max_eval_blocks=0", "max_eval_blocks must be >= 1"),
    ("glue", "epochs=-1", "epochs must be > 0"),
    ("glue", "learning_rate=0", "learning_rate must be > 0"),
    ("glue", "batch_size=0", "batch_size must be >= 1"),
    ("glue", "eval_batch_size=0", "eval_batch_size must be >= 1"),
    ("glue", "eval_steps=0", "eval_steps must be >= 1"),
    ("glue", "warmup=-0.5", "warmup must be >= 0"),
    ("glue", "large_tasks=[mnlii]", r"large_tasks: unknown \['mnlii'\]"),
]


@pytest.mark.parametrize("job, override, message", OUT_OF_BOUNDS, ids=[f"{j}-{o}" for j, o, _ in OUT_OF_BOUNDS])
def test_numbers_out_of_bounds_are_refused_by_name(tmp_path, job, override, message):
    with pytest.raises(ValueError, match=rf"{job}\.yaml.*{message}"):
        _load(tmp_path, job, [override])


def test_typed_config_resumes_with_the_config_it_saved(tmp_path):
    """save_config's resume check compares the typed values: a run restarted with the same file resumes, and the
    saved file loads back to the same config."""
    extra = (
        "learning_rate: 2e-4\nmax_steps: 6.0\ntraining: {save_steps: 3, max_grad_norm: 1.0}\nmodel: {hidden_size: 64}\n"
    )
    config = _load(tmp_path, "pretrain", ["batch_size=8"], extra)
    run = tmp_path / "run"
    run.mkdir()
    save_config(config, run / "pretrain_config.yaml")
    (run / "checkpoint-3").mkdir()
    save_config(_load(tmp_path, "pretrain", ["batch_size=8"], extra), run / "pretrain_config.yaml")  # resumes
    assert load_config(PretrainConfig, run / "pretrain_config.yaml", []) == config
    with pytest.raises(ValueError, match=r"learning_rate: 0.0002 -> 0.001"):
        save_config(dataclasses.replace(config, learning_rate=1e-3), run / "pretrain_config.yaml")


def test_a_key_added_since_a_run_was_saved_reads_as_its_default(tmp_path):
    """A run saved before a key existed resumes when the key keeps its default (the run was made with it), and is
    refused, naming the key, when the key is set to something else."""
    import yaml

    config = _load(tmp_path, "pretrain", ["batch_size=8"], "")
    run = tmp_path / "run"
    run.mkdir()
    save_config(config, run / "pretrain_config.yaml")
    (run / "checkpoint-3").mkdir()
    saved = yaml.safe_load((run / "pretrain_config.yaml").read_text())
    del saved["prepare_corpus"]  # as written before the key existed
    (run / "pretrain_config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    save_config(config, run / "pretrain_config.yaml")  # resumes
    (run / "pretrain_config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    with pytest.raises(ValueError, match=r"prepare_corpus: False -> True"):
        save_config(dataclasses.replace(config, prepare_corpus=True), run / "pretrain_config.yaml")


def test_a_resumed_pretraining_run_may_change_how_it_checkpoints_but_not_what_it_trains(tmp_path):
    """Checkpoint cadence, logging and the progress bar do not change what a run learns: a resume may change them
    (e.g. checkpoints more often, so that an interrupted session loses less). Any other TrainingArguments field
    inside `training` is named by its dotted key."""
    extra = "training: {save_steps: 600, eval_steps: 300, logging_first_step: true}\nmodel: {layer_combination: elc}\n"
    config = _load(tmp_path, "pretrain", [], extra)
    run = tmp_path / "run"
    run.mkdir()
    saved = run / "pretrain_config.yaml"
    save_config(config, saved)
    (run / "checkpoint-600").mkdir()
    bookkeeping = ["training.save_steps=200", "training.logging_steps=7", "training.disable_tqdm=true"]
    save_config(_load(tmp_path, "pretrain", bookkeeping, extra), saved)
    with pytest.raises(ValueError, match=r"training\.max_grad_norm: None -> 5"):
        save_config(_load(tmp_path, "pretrain", ["training.max_grad_norm=5"], extra), saved)
    with pytest.raises(ValueError, match=r"model\.layer_combination: 'elc' -> 'residual'"):
        save_config(_load(tmp_path, "pretrain", ["model.layer_combination=residual"], extra), saved)


def test_a_few_shot_or_glue_run_with_finished_work_refuses_another_config(tmp_path):
    """finetune-ner keeps its checkpoints and results in n<N>/trial<t>/, finetune-glue in <task>/: a rerun of such a
    folder with another recipe would reuse the finished trials or tasks under the new config, so it is refused;
    more trials, more N or more tasks are fine (they add to the run)."""
    ner = FinetuneNerConfig(output_dir=str(tmp_path / "ner"), model="m", data_dir="d", shots=[8], trials=2)
    path = tmp_path / "ner" / "finetune_ner_config.yaml"
    path.parent.mkdir()
    save_config(ner, path)
    (tmp_path / "ner" / "n8" / "trial0").mkdir(parents=True)
    (tmp_path / "ner" / "n8" / "trial0" / "result.json").write_text("{}")
    with pytest.raises(
        ValueError, match=r"learning_rate: 0.001 -> 0.5.*fusion: 'dwatt' -> 'concat'|fusion.*learning_rate"
    ):
        save_config(dataclasses.replace(ner, learning_rate=0.5, fusion="concat"), path)
    save_config(dataclasses.replace(ner, shots=[8, 32], trials=5), path)  # adds trials
    glue = FinetuneGlueConfig(model="m", data_dir="d", output_dir=str(tmp_path / "glue"), tasks=["rte"])
    path = tmp_path / "glue" / "finetune_glue_config.yaml"
    (tmp_path / "glue" / "rte" / "checkpoint-4").mkdir(parents=True)
    save_config(glue, path)
    with pytest.raises(ValueError, match=r"learning_rate"):
        save_config(dataclasses.replace(glue, learning_rate=1e-3), path)
    save_config(dataclasses.replace(glue, tasks=["rte", "mrpc"]), path)


def test_training_arguments_have_one_owner(tmp_path):
    """Every job's TrainingArguments come from `training_arguments`: the shared settings, then the job's defaults,
    then the user's `training.*` keys, which win over both, then the fields the job owns (set from its own keys)."""
    from elc_bert.training.arguments import training_arguments

    accelerator = torch.accelerator.current_accelerator() is not None
    config = MlmConfig(output_dir="o", model="m", data_dir="d")
    args = training_arguments(config, tmp_path / "run", {"seed": 7}, logging_steps=5, save_strategy="no")
    assert (args.output_dir, args.seed, args.logging_steps) == (str(tmp_path / "run"), 7, 5)
    assert args.report_to == [] and args.dataloader_pin_memory == accelerator
    config.training = {"logging_steps": 2, "dataloader_pin_memory": not accelerator}
    args = training_arguments(config, tmp_path / "run", {"seed": 7}, logging_steps=5, save_strategy="no")
    assert (args.logging_steps, args.seed, args.dataloader_pin_memory) == (2, 7, not accelerator)
    with pytest.raises(RuntimeError, match=r"training_owned does not name \['logging_steps'\]"):
        training_arguments(config, tmp_path / "run", {"logging_steps": 3})
    training = Path(elc_bert.__file__).parent / "training"
    builders = [path.name for path in training.glob("*.py") if "TrainingArguments(" in path.read_text()]
    assert builders == ["arguments.py"]


def test_yes_and_no_are_strings_unless_the_field_is_a_bool(tmp_path):
    """YAML 1.1 reads `no` as False: WikiAnn's Norwegian (`language: no`) would be refused as a bool. Config files and
    overrides read only true/false as booleans; a bool field still takes yes/no."""
    assert _load(tmp_path, "ner", ["language=no"]).language == "no"
    assert _load(tmp_path, "ner", [], extra="language: no\n").language == "no"
    assert _load(tmp_path, "ner", ["freeze_backbone=no"]).freeze_backbone is False
    assert _load(tmp_path, "ner", ["freeze_backbone=yes"]).freeze_backbone is True


def test_a_malformed_override_names_the_config_file(tmp_path):
    with pytest.raises(ValueError, match=r"ner\.yaml \+ overrides: override 'model\.x=1': model is not a mapping"):
        _load(tmp_path, "ner", ["model.x=1"])
    with pytest.raises(ValueError, match=r"ner\.yaml \+ overrides: override 'epochs' is not key=value"):
        _load(tmp_path, "ner", ["epochs"])


TRAINING_FIELDS = {field.name for field in dataclasses.fields(TrainingArguments)}
# a value of the field's type for each owned field (1 for the numbers)
OWNED_VALUES = {
    "eval_strategy": "steps",
    "save_strategy": "steps",
    "lr_scheduler_type": "constant",
    "lr_scheduler_kwargs": "{}",
    "optim": "adamw_torch",
    "optim_args": "x",
    "metric_for_best_model": "loss",
    "train_sampling_strategy": "random",
    "load_best_model_at_end": "true",
    "greater_is_better": "true",
    "remove_unused_columns": "true",
    "torch_compile": "true",
}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_training_field_a_job_sets_has_one_source(tmp_path, job):
    """A `training.*` key for a TrainingArguments field the job sets from its own keys is refused, naming the job's
    key: `elc-bert pretrain training.learning_rate=0.5 training.lr_scheduler_type=constant training.seed=7` trained
    with the job's own learning rate, schedule and masking seed. Every field any job passes as its own is declared
    (`training_arguments` raises otherwise, and the job tests run every job through it)."""
    config_class = JOBS[job][0]
    for field, key in config_class.training_owned.items():
        assert field in TRAINING_FIELDS, field
        with pytest.raises(ValueError, match=rf"training\.{field} is set by the job: use {re.escape(key)}"):
            _load(tmp_path, job, [f"training.{field}={OWNED_VALUES.get(field, 1)}"])
    # the defaults a job sets stay the user's to change
    assert _load(tmp_path, job, ["training.logging_steps=3"]).training == {"logging_steps": 3}


def test_the_settings_the_issue_named_are_refused(tmp_path):
    overrides = ["training.learning_rate=0.5", "training.lr_scheduler_type=constant", "training.seed=7"]
    with pytest.raises(ValueError) as refused:
        _load(tmp_path, "pretrain", overrides)
    message = str(refused.value)
    assert "training.learning_rate is set by the job: use learning_rate" in message
    assert "training.lr_scheduler_type is set by the job: use warmup_ratio and final_lr_ratio" in message
    assert "training.seed is set by the job: use seed" in message


def test_report_to_is_a_job_key_and_tensorboard_logs_a_run(tmp_path):
    """No tracker by default; `report_to: [tensorboard]` logs the run's losses where TensorBoard reads them (offline),
    and a mistyped tracker is named at config time."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from elc_bert.training.pretrain import pretrain

    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"
    fields = dict(
        output_dir=str(tmp_path / "run"),
        data_dir=str(sample.parent),
        train_files=[sample.name],
        vocab_size=300,
        min_frequency=2,
        seq_length=32,
        max_steps=3,
        batch_size=8,
        training={"save_steps": 100, "logging_steps": 1, "disable_tqdm": True},
    )
    assert PretrainConfig(**fields).report_to == []
    with pytest.raises(ValueError, match=r"report_to\[0\] must be one of \[.*'tensorboard'.*\], got 'tensorbord'"):
        PretrainConfig(**fields, report_to=["tensorbord"])
    pretrain(PretrainConfig(**fields, report_to=["tensorboard"]))
    [events] = list((tmp_path / "run").rglob("events.out.tfevents.*"))
    accumulator = EventAccumulator(str(events.parent))
    accumulator.Reload()
    losses = [event.value for event in accumulator.Scalars("train/loss")]
    logged = json.loads((tmp_path / "run" / "metrics.json").read_text())["log_history"]
    assert losses == pytest.approx([entry["loss"] for entry in logged if "loss" in entry], rel=1e-6)


def test_a_key_given_twice_is_refused_naming_the_file_key_and_lines(tmp_path):
    """YAML keeps the last of two equal keys without a word: `max_steps: 2` ... `max_steps: 6` trained 6 steps."""
    with pytest.raises(InputError, match=r"pretrain\.yaml: max_steps is given twice \(lines 3 and 5\)"):
        _load(tmp_path, "pretrain", extra="max_steps: 2\nseed: 1\nmax_steps: 6\n")
    nested = "training:\n  save_steps: 5\n  logging_steps: 1\n  save_steps: 7\n"
    with pytest.raises(InputError, match=r"ner\.yaml: training\.save_steps is given twice \(lines 5 and 7\)"):
        _load(tmp_path, "ner", extra=nested)
    with pytest.raises(InputError, match=r"train_files\[1\]\.path is given twice"):
        _load(tmp_path, "pretrain", ["train_files=[a, {path: b, path: c}]"])
    # the same key in two mappings is two keys
    assert len(_load(tmp_path, "pretrain", ["train_files=[{path: a}, {path: b}]"]).train_files) == 2


def test_negative_training_numbers_are_refused_by_name(tmp_path):
    """`training.max_grad_norm: -1` (no clipping) and `training.weight_decay: -3` trained finetune-ner and stood in
    its results table; each bounded TrainingArguments number is refused where a job leaves it to `training.*`."""
    with pytest.raises(InputError, match=r"ner\.yaml.*training\.max_grad_norm must be >= 0, got -1\.0"):
        _load(tmp_path, "ner", ["training.max_grad_norm=-1"])
    with pytest.raises(InputError, match=r"ner\.yaml.*training\.weight_decay must be >= 0, got -3\.0"):
        _load(tmp_path, "ner", ["training.weight_decay=-3"])
    outside = {">= 0": -1, "> 0": 0, ">= 1": 0, "[0, 1)": 1}
    for name, bounds in TRAINING_BOUNDS.items():
        assert name in TRAINING_FIELDS, name
        free = [job for job, (config_class, _, _) in JOBS.items() if name not in config_class.training_owned]
        for job in free:
            with pytest.raises(InputError, match=rf"training\.{name} must be {re.escape(bounds_text(bounds))}"):
                _load(tmp_path, job, [f"training.{name}={outside[bounds]}"])
    assert _load(tmp_path, "ner", ["training.max_grad_norm=0", "training.label_smoothing_factor=0"]).training
    assert "max_grad_norm >= 0" in " ".join(describe_config(FinetuneNerConfig).split())  # in --help
