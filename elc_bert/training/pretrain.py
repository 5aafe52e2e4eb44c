"""`elc-bert pretrain`: ELC-BERT or LTG-BERT from scratch with the Trainer, following the reference recipe."""

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from .. import runs
from ..data.corpus import DatasetSource, document_dataset, packed_samples
from ..data.jsonl import read_json
from ..data.preparation import TAB_MARK
from ..data.pretraining import SpanMaskingCollator
from ..data.pretraining_batches import BatchRowCollator, Phase, coverage, streamed_rows, training_rows, validation_rows
from ..data.text import corpus_files
from ..data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from ..extras import needs, require
from ..job_configs import PretrainConfig, refuse_other_jobs, save_config
from ..job_configs.layer_budget import LayerBudget
from ..job_configs.training_metrics import TrainingMetrics
from ..models import ElcBertConfig, ElcBertForMaskedLM
from ..models.errors import InputError
from ..models.loading import check_weights_loaded, load_pretrained
from ..plots import plot_curves
from ..runs.layout import words_checkpoint
from .arguments import CadenceFromArguments, StopOnNonFiniteLoss, training_arguments
from .layer_budget import FreezeLeastImportantLayers, Importance, measurement_batches
from .optim import Lamb, parameter_groups, warmup_cosine_schedule

with needs("data", "elc-bert pretrain"):
    import datasets

logger = logging.getLogger(__name__)


def corpus(entries: list, data_dir: Path, split: str, cache_dir=None, prepare: bool = False) -> datasets.Dataset:
    """The documents of `entries` (one row each, columns "sentences" and "words"), read (and with `prepare`,
    prepared) once and then from the datasets cache. An entry is a file or BabyLM-style folder relative to
    `data_dir`, or a dict of `DatasetSource` fields (`path`: a Hub dataset name or a local dataset folder; `name`,
    `split`, `text_column`)."""
    parts = [
        document_dataset(
            DatasetSource(**entry) if isinstance(entry, dict) else data_dir / entry, split, cache_dir, prepare
        )
        for entry in entries
    ]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _tokenizer(config: PretrainConfig, tokenizer_dir: Path, documents: datasets.Dataset):
    """The run's tokenizer: the one of `init_from` or `tokenizer` when given, the one this run trained before (a
    resume), or a new one trained on the training files. A tokenizer left in the folder by another config is
    refused rather than reused."""
    if config.init_from is not None:
        return load_tokenizer(config.init_from)
    if config.tokenizer is not None:
        return load_tokenizer(config.tokenizer)
    recipe = {"vocab_size": config.vocab_size, "min_frequency": config.min_frequency, "train_files": config.train_files}
    if config.prepare_corpus:  # (not written when false: the recipes of earlier runs stay valid)
        recipe["prepare_corpus"] = True
    recipe_file = tokenizer_dir / "tokenizer_recipe.json"
    if tokenizer_dir.exists():
        tokenizer = load_tokenizer(tokenizer_dir)
        if recipe_file.exists():
            saved = read_json(recipe_file, "the tokenizer recipe of a pretrain run")
        else:  # a run from before the recipe was recorded: the vocabulary size at least must fit
            saved = {**recipe, "vocab_size": len(tokenizer)} if len(tokenizer) > config.vocab_size else recipe
        changed = sorted(key for key in recipe if saved.get(key) != recipe[key])
        if changed:
            raise InputError(
                f"{tokenizer_dir} holds a tokenizer trained with other settings ({', '.join(changed)}: "
                f"{[saved.get(key) for key in changed]} -> {[recipe[key] for key in changed]}); remove it or "
                "choose a new output_dir"
            )
        return tokenizer
    lines = (line for batch in documents.iter(batch_size=1000) for document in batch["sentences"] for line in document)
    tokenizer = train_tokenizer(lines, config.vocab_size, config.min_frequency)
    save_tokenizer(tokenizer, tokenizer_dir)
    recipe_file.write_text(json.dumps(recipe, indent=2))
    return tokenizer


def _model(config: PretrainConfig, tokenizer) -> ElcBertForMaskedLM:
    # The MLM head runs on the masked positions only while pretraining (the saved model returns B x T x V logits).
    if config.init_from is not None:
        saved = ElcBertConfig.from_pretrained(config.init_from)
        model, info = load_pretrained(ElcBertForMaskedLM, config.init_from, sparse_prediction=True, **config.model)
        # model: keys that change the architecture (depth, width, layer_combination) leave weights unloaded.
        changed = [
            f"model.{key}: {getattr(saved, key)} in init_from's config, {value} here"
            for key, value in config.model.items()
            if getattr(saved, key, value) != value
        ]
        hint = "init_from continues that model as it is: leave the model: keys that change its architecture unset"
        hint += f" ({'; '.join(changed)})" if changed else ""
        check_weights_loaded(f"init_from {config.init_from}", model, info, hint)
        if len(tokenizer) > model.config.vocab_size:
            raise InputError(
                f"init_from {config.init_from}: its tokenizer has {len(tokenizer)} tokens, the model's vocabulary "
                f"{model.config.vocab_size}"
            )
        return model.train()
    overrides = {"sparse_prediction": True, **config.model}
    return ElcBertForMaskedLM(ElcBertConfig.from_preset(config.preset, vocab_size=len(tokenizer), **overrides))


def _training_arguments(config: PretrainConfig, output_dir: Path, has_validation: bool) -> TrainingArguments:
    """The job's TrainingArguments: one row per micro-batch, read in the order the job chose. The optimizer and its
    schedule are the job's (`_optimizers`); the arguments name their learning rate, weight decay and warm-up steps,
    so that a run's saved arguments (training_args.bin) say what it trained with."""
    owned = dict(
        seed=config.seed,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        warmup_steps=_warmup_steps(config),
        per_device_train_batch_size=1,  # a row is a whole micro-batch
        per_device_eval_batch_size=1,
        train_sampling_strategy="sequential",
        remove_unused_columns=False,
        torch_compile=config.torch_compile,
    )
    return training_arguments(
        config,
        output_dir,
        owned,
        max_grad_norm=2.0,
        logging_steps=max(1, config.max_steps // 50),
        save_steps=max(1, config.max_steps // 5),
        eval_strategy="steps" if has_validation else "no",
        eval_steps=max(1, config.max_steps // 5),
        # Without an accelerator, accelerate sets up data parallelism (gloo) only when told to use the CPU.
        use_cpu=torch.accelerator.current_accelerator() is None,
    )


def _check_corpora(config: PretrainConfig) -> None:
    """Local corpora must exist before anything starts."""
    for entries, split in ((config.train_files, "train"), (config.validation_files, "dev")):
        for entry in entries:
            if not isinstance(entry, dict):
                corpus_files(Path(config.data_dir) / entry, split)


def _check_batches(config: PretrainConfig, parts: int) -> None:
    """Every global batch must split into `parts` (processes x accumulation steps) equal micro-batches."""
    for phase, size in (("batch_size", config.batch_size), ("long phase batch", config.batch_size // 4)):
        if (phase == "batch_size" or config.long_seq_length is not None) and size % parts:
            raise InputError(
                f"{phase} {size} must be divisible by processes x gradient_accumulation_steps = {parts}: each "
                "process takes an equal share of every global batch"
            )


def _phases(config: PretrainConfig) -> list[Phase]:
    """The training phases: the whole run, or the recipe's short phase and then its long one (long_seq_length,
    batch_size / 4) for the steps after long_after."""
    long_steps = 0 if config.long_seq_length is None else config.max_steps - round(config.long_after * config.max_steps)
    phases = [Phase(config.seq_length, config.batch_size, config.max_steps - long_steps)]
    if long_steps:
        phases.append(Phase(config.long_seq_length, config.batch_size // 4, long_steps))
    return phases


def _prepared_data(config: PretrainConfig, output_dir: Path):
    """The tokenizer, the phases (`_phases`) with their packed samples (none when streaming) and the packed
    validation samples (None without validation files)."""
    data_dir = Path(config.data_dir)
    documents = None
    if not config.streaming:
        documents = corpus(config.train_files, data_dir, "train", config.data_cache_dir, config.prepare_corpus)
    tokenizer = _tokenizer(config, output_dir / runs.TOKENIZER, documents)
    phases = _phases(config)
    if not config.streaming:
        phases = [
            dataclasses.replace(
                phase, samples=packed_samples(documents, tokenizer, phase.max_length, packing=config.packing)
            )
            for phase in phases
        ]
    validation = None
    if config.validation_files:
        validation = corpus(config.validation_files, data_dir, "dev", config.data_cache_dir, config.prepare_corpus)
        validation = packed_samples(validation, tokenizer, config.seq_length, packing=config.packing)
    return tokenizer, phases, validation


def _train_rows(config: PretrainConfig, tokenizer, phases: list[Phase], parts: int):
    """The training rows (micro-batches of `parts` per global batch), the tokens and words of each step, and the share
    of real tokens among the padded micro-batches' positions (all None when streaming: not known ahead)."""
    if config.streaming:
        sources = [DatasetSource(**entry) for entry in config.train_files]
        rows = streamed_rows(
            sources,
            tokenizer,
            phases[0],
            parts,
            seed=config.seed,
            shuffle_buffer=config.shuffle_buffer,
            cache_dir=config.data_cache_dir,
            packing=config.packing,
            prepare=config.prepare_corpus,
        )
        return rows, None, None, None
    return training_rows(phases, parts, config.seed, config.pack_rows, bool(config.checkpoint_words))


def step_words(config: PretrainConfig, output_dir: Path) -> list[int]:
    """The words (as released, BabyLM's count) that each step's samples show, from the samples and batches the run
    of `config` trains on, built as `pretrain` builds them but without training; the tokenizer is the one in
    `output_dir` (trained and saved there when absent, as the run does). Not known ahead when streaming."""
    if config.streaming:
        raise InputError("streaming: the words of each step are not known ahead")
    _, phases, _ = _prepared_data(config, output_dir)
    return training_rows(phases, 1, config.seed, config.pack_rows, count_words=True)[2]


class CheckpointsAreModels(TrainerCallback):
    """Every folder a run keeps is a model that other code loads as it loads the final one: each `checkpoint-N`
    gets the run's tokenizer and a config.json whose MLM head returns B x T x V logits (the run trains with
    `sparse_prediction`); and where the run keeps words-seen checkpoints (`checkpoint_words`), the model (no optimizer
    state) is saved as `words-<W>` once the training samples have shown W words (the first step reaching it; a
    milestone beyond the run's words gets no folder); `elc-bert push --revisions` pushes it as the BabyLM 2025
    revision of W (`runs.layout.revision_name`: words-1M is chck_1M). `words_scale` (`checkpoint_words_scale`, a dry
    run at toy scale) keeps `words-<W>` once the samples have shown W x words_scale words."""

    def __init__(
        self, tokenizer, output_dir: Path, step_words: list[int] | None = None, milestones=(), words_scale: float = 1.0
    ):
        self.tokenizer, self.output_dir = tokenizer, output_dir
        self.seen = np.cumsum(step_words) if step_words else None
        self.milestones, self.words_scale = sorted(milestones), words_scale

    def on_save(self, args, state, control, **kwargs):
        folder = self.output_dir / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            config_file = folder / "config.json"
            config = read_json(config_file, "a model config")
            config["sparse_prediction"] = False
            runs.replace_file(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")
            save_tokenizer(self.tokenizer, folder)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.seen is None or not state.is_world_process_zero:
            return
        step = state.global_step
        for words in self.milestones:
            before = self.seen[step - 2] if step >= 2 else 0
            if before < words * self.words_scale <= self.seen[step - 1]:
                self.save_model(model, words, int(self.seen[step - 1]), step)

    def save_model(self, model, words: int, seen: int, step: int) -> None:
        folder = words_checkpoint(self.output_dir, words)
        if folder.exists():  # kept before a resume: the same weights
            return
        model = getattr(model, "module", model)
        with runs.replacing_folder(folder, self.output_dir / f".{folder.name}.partial") as scratch:  # the run's lock
            sparse, model.config.sparse_prediction = model.config.sparse_prediction, False
            try:
                model.save_pretrained(scratch)
            finally:
                model.config.sparse_prediction = sparse
            save_tokenizer(self.tokenizer, scratch)
            record = {"words": seen, "milestone": words, "step": step}
            if self.words_scale != 1:  # a dry run: the milestone's name is not the words it saw
                record["checkpoint_words_scale"] = self.words_scale
            (scratch / runs.WORDS_SEEN).write_text(json.dumps(record) + "\n")


def _warn_unreached_milestones(config: PretrainConfig, step_words: list[int]) -> None:
    """Warns, before training, when the run's steps show fewer words than its first `checkpoint_words` milestone: it
    would end without a words-seen checkpoint (those beyond the run's words get none, `CheckpointsAreModels`)."""
    if not config.checkpoint_words:
        return
    first, seen = min(config.checkpoint_words), sum(step_words)
    if seen < first * config.checkpoint_words_scale:
        logger.warning(
            "checkpoint_words: the run's %d steps show %s words, fewer than its first milestone %s (%s): it will keep "
            "no words-seen checkpoint. Raise max_steps (or batch_size) to keep them",
            config.max_steps,
            f"{seen:,}",
            f"{round(first * config.checkpoint_words_scale):,}",
            words_checkpoint(config.output_dir, first).name,
        )


def _optimizers(config: PretrainConfig, model) -> tuple:
    """The optimizer (LAMB or AdamW, no weight decay on biases and LayerNorms) and its warm-up + cosine schedule."""
    groups = parameter_groups(model, config.weight_decay)
    optimizer_class = Lamb if config.optimizer == "lamb" else torch.optim.AdamW
    optimizer = optimizer_class(groups, lr=config.learning_rate, betas=(0.9, 0.98), eps=1e-6)
    return optimizer, warmup_cosine_schedule(optimizer, _warmup_steps(config), config.max_steps, config.final_lr_ratio)


def _warmup_steps(config: PretrainConfig) -> int:
    """The steps of the schedule's linear warm-up: warmup_ratio of max_steps, rounded up, one at least."""
    return max(1, math.ceil(config.warmup_ratio * config.max_steps))


def _unmaskable(tokenizer) -> int:
    """The special tokens' ids that are never masked: those below [TAB]'s where the tokenizer has the recipe's
    specials ([UNK] ... [PAR] = 0 ... 5; the reference masks [TAB], which stands for text), else all of them."""
    tab = tokenizer.convert_tokens_to_ids(TAB_MARK)
    specials = sorted(tokenizer.all_special_ids)
    return tab if tab in specials and specials == list(range(len(specials))) else len(specials)


def _masking(config: PretrainConfig, tokenizer) -> SpanMaskingCollator:
    # Masks are a function of each sequence's ids, its step and the seed: a resumed run masks exactly as the first
    # one did, and a sample seen again gets new masks.
    return SpanMaskingCollator(
        tokenizer.mask_token_id,
        tokenizer.pad_token_id,
        len(tokenizer),
        mask_p=config.mask_p,
        span_p=config.span_p,
        max_span=config.max_span,
        num_special_tokens=_unmaskable(tokenizer),
        seed=config.seed,
        short_p=config.short_p,
        max_length=config.seq_length,
        pack_rows=config.pack_rows,
    )


def _throughput(metrics: dict, step_sequences: list[int], step_tokens: list[int] | None, first_step: int) -> dict:
    """`metrics` with the real sequences (and tokens) per second of the steps this process ran, in place of the
    Trainer's `train_samples_per_second`, which counts what it is handed (one micro-batch per row) as samples: one
    number, under a name that says what it counts."""
    runtime = metrics.get("train_runtime")
    metrics.pop("train_samples_per_second", None)
    if runtime:
        metrics["train_sequences_per_second"] = sum(step_sequences[first_step:]) / runtime
        if step_tokens is not None:
            metrics["train_tokens_per_second"] = sum(step_tokens[first_step:]) / runtime
    return metrics


def _save_run(trainer: Trainer, model, tokenizer, output_dir: Path, metrics: dict) -> None:
    """The model (returning B x T x V logits again), and from the main process its tokenizer, fingerprint, metrics
    and loss curves."""
    model.config.sparse_prediction = False
    with runs.replacing_files(output_dir, writes=trainer.is_world_process_zero()) as folder:
        trainer.save_model(str(folder))  # a kill while saving leaves the earlier files (and checkpoints) whole
    if not trainer.is_world_process_zero():
        return
    save_tokenizer(tokenizer, output_dir)
    runs.record_model(output_dir, output_dir)
    history = trainer.state.log_history
    TrainingMetrics(metrics, history).write(output_dir)
    curves = {
        split: ([e["step"] for e in history if key in e], [e[key] for e in history if key in e])
        for split, key in (("train", "loss"), ("validation", "eval_loss"))
    }
    curves = {name: curve for name, curve in curves.items() if curve[0]}
    plot_curves(output_dir / runs.LOSS_PLOT, curves, "step", "MLM loss", "Pretraining")


def pretrain(config: PretrainConfig, layer_importance: Importance | None = None) -> dict:
    """Runs (or resumes) the pretraining run and returns its final metrics. Under `torchrun` or `accelerate launch`
    the processes share every global batch of `batch_size` sequences; the main process writes the run's files.
    `layer_importance` measures the layers for `layer_budget` (the CLI passes the analysis layer's
    `leave_one_out_importance`)."""
    if config.layer_budget and layer_importance is None:
        raise ValueError("layer_budget needs a layer_importance measure (analysis.layer_importance)")
    require("plots", what="elc-bert pretrain")  # its loss curve, drawn at the end
    if config.prepare_corpus:
        require("corpus", what="prepare_corpus")
    output_dir = Path(config.output_dir)
    refuse_other_jobs(output_dir, config.job)
    _check_corpora(config)
    args = _training_arguments(config, output_dir, bool(config.validation_files))
    parts = args.world_size * args.gradient_accumulation_steps
    _check_batches(config, parts)
    if config.layer_budget and args.world_size > 1:  # DDP expects a gradient for every parameter it was built with
        raise InputError("layer_budget freezes layers while training: run it in one process (no torchrun)")
    # One process writes the folder (the main one under torchrun): a second run started on it is refused.
    with runs.hold_run_folder(output_dir, "pretrain", writes=args.should_save), runs.naming_full_disk(output_dir):
        if args.should_save:
            output_dir.mkdir(parents=True, exist_ok=True)
            save_config(config, runs.config_file(output_dir, config.job))
        return _train(config, args, output_dir, parts, layer_importance)


def _layer_budget(config: PretrainConfig, model, output_dir: Path, tokenizer, validation, importance) -> list:
    """The callback of `layer_budget` (none when it is unset), measuring on a fixed sample of the validation data."""
    if not config.layer_budget:
        return []
    budget = LayerBudget(**config.layer_budget)
    layers = model.config.num_hidden_layers
    if budget.freeze >= layers:  # (init_from: the depth is known here)
        raise InputError(f"layer_budget.freeze {budget.freeze} must leave a layer training: the model has {layers}")
    batches = measurement_batches(validation, tokenizer.pad_token_id, budget.samples)
    flops_args = (config.batch_size, config.seq_length, config.mask_p)
    return [FreezeLeastImportantLayers(budget, output_dir, importance, tokenizer, batches, flops_args)]


def _train(config: PretrainConfig, args, output_dir: Path, parts: int, layer_importance=None) -> dict:
    checkpoint = runs.last_checkpoint(output_dir)  # (one that cannot be resumed is refused before the data is read)
    # The main process reads, tokenizes and packs first (into the datasets cache); the others then read the cache.
    with args.main_process_first(desc="data preparation"):
        tokenizer, phases, validation = _prepared_data(config, output_dir)
    train_dataset, step_tokens, step_words, real_token_share = _train_rows(config, tokenizer, phases, parts)
    _warn_unreached_milestones(config, step_words)
    step_sequences = [phase.batch_size for phase in phases for _ in range(phase.steps)]
    eval_rows = None if validation is None else validation_rows(validation, config.batch_size, config.max_eval_samples)
    torch.manual_seed(config.seed)
    model = _model(config, tokenizer)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_rows,
        data_collator=BatchRowCollator(_masking(config, tokenizer)),
        optimizers=_optimizers(config, model),
        callbacks=[
            CadenceFromArguments(),  # a resume may change how often it checkpoints (PretrainConfig.may_change)
            StopOnNonFiniteLoss(),
            CheckpointsAreModels(
                tokenizer, output_dir, step_words, config.checkpoint_words, config.checkpoint_words_scale
            ),
            *_layer_budget(config, model, output_dir, tokenizer, validation, layer_importance),
        ],
    )
    first_step = int(Path(checkpoint).name.split("-")[-1]) if checkpoint else 0
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = _throughput(dict(result.metrics), step_sequences, step_tokens, first_step)
    if real_token_share is not None:
        metrics["real_token_share"] = real_token_share
        for number, phase in enumerate(phases):  # the long phase's samples are packed anew
            prefix = "long_phase_" if number else ""
            metrics.update({prefix + key: share for key, share in coverage(phase.samples).items()})
    if trainer.eval_dataset is not None:
        metrics.update(trainer.evaluate())
    _save_run(trainer, model, tokenizer, output_dir, metrics)
    return metrics
