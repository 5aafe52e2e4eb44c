"""`elc-bert pretrain`: ELC-BERT or LTG-BERT from scratch with the Trainer, following the reference recipe."""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
from accelerate import PartialState
from transformers import AutoTokenizer, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from ..data.pretraining import SpanMaskingCollator, pack_sentences
from ..data.text import corpus_files, read_documents
from ..data.tokenizer import train_tokenizer
from ..models import ElcBertConfig, ElcBertForMaskedLM
from .config import save_config
from .optim import Lamb, parameter_groups, warmup_cosine_schedule
from .plots import plot_curves


@dataclass
class PretrainConfig:
    """A pretraining run. Paths in `train_files` / `validation_files` are files or BabyLM-style folders, relative to
    `data_dir`; `training` holds further `TrainingArguments` fields."""

    output_dir: str
    train_files: list[str]
    validation_files: list[str] = field(default_factory=list)
    data_dir: str = "."
    preset: str = "tiny"
    model: dict = field(default_factory=dict)  # ElcBertConfig overrides, e.g. layer_combination: residual
    tokenizer: str | None = None  # an existing tokenizer; else one is trained on the training files
    vocab_size: int = 4096
    min_frequency: int = 10
    seq_length: int = 128
    optimizer: str = "lamb"  # or "adamw"
    learning_rate: float = 1e-2
    weight_decay: float = 0.1
    warmup_ratio: float = 0.016
    final_lr_ratio: float = 0.1
    max_steps: int = 1000
    batch_size: int = 32
    seed: int = 42
    training: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.optimizer not in ("lamb", "adamw"):
            raise ValueError(f"optimizer must be 'lamb' or 'adamw', got {self.optimizer!r}")
        if self.seq_length < 8:
            raise ValueError(f"seq_length must be >= 8, got {self.seq_length}")
        if not self.train_files:
            raise ValueError("train_files is empty")


def build_dataset(files: list[Path], tokenizer, seq_length: int) -> datasets.Dataset:
    """Documents packed by whole sentences into [CLS] ... [SEP] samples of at most `seq_length` tokens."""
    documents = read_documents(files)
    tokenized = [tokenizer(document, add_special_tokens=False)["input_ids"] for document in documents]
    segments = pack_sentences(tokenized, seq_length - 2)
    samples = [[tokenizer.cls_token_id, *segment, tokenizer.sep_token_id] for segment in segments]
    return datasets.Dataset.from_dict({"input_ids": samples})


def pretrain(config: PretrainConfig) -> dict:
    """Runs (or resumes) the pretraining run and returns its final metrics."""
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, output_dir / "pretrain_config.yaml")
    data_dir = Path(config.data_dir)
    train_files = [f for name in config.train_files for f in corpus_files(data_dir / name, "train")]
    validation_files = [f for name in config.validation_files for f in corpus_files(data_dir / name, "dev")]

    tokenizer_dir = output_dir / "tokenizer"
    # Under torchrun the main process trains and saves the tokenizer first; the others then load it.
    with PartialState().main_process_first():
        if config.tokenizer is not None:
            tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        elif tokenizer_dir.exists():  # a resumed run, or a process after the main one
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        else:
            lines = (line for document in read_documents(train_files) for line in document)
            tokenizer = train_tokenizer(lines, config.vocab_size, config.min_frequency)
            tokenizer.save_pretrained(tokenizer_dir)

    train_dataset = build_dataset(train_files, tokenizer, config.seq_length)
    eval_dataset = build_dataset(validation_files, tokenizer, config.seq_length) if validation_files else None
    torch.manual_seed(config.seed)
    model_config = ElcBertConfig.from_preset(config.preset, vocab_size=len(tokenizer), **config.model)
    model = ElcBertForMaskedLM(model_config)

    groups = parameter_groups(model, config.weight_decay)
    if config.optimizer == "lamb":
        optimizer = Lamb(groups, lr=config.learning_rate, betas=(0.9, 0.98), eps=1e-6)
    else:
        optimizer = torch.optim.AdamW(groups, lr=config.learning_rate, betas=(0.9, 0.98), eps=1e-6)
    warmup = max(1, math.ceil(config.warmup_ratio * config.max_steps))
    schedule = warmup_cosine_schedule(optimizer, warmup, config.max_steps, config.final_lr_ratio)

    training = dict(
        output_dir=str(output_dir),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        max_grad_norm=2.0,
        seed=config.seed,
        logging_steps=max(1, config.max_steps // 50),
        save_steps=max(1, config.max_steps // 5),
        eval_strategy="steps" if eval_dataset is not None else "no",
        eval_steps=max(1, config.max_steps // 5),
        remove_unused_columns=False,
        report_to=[],
    )
    training.update(config.training)
    # Masks come from the global RNG, which the Trainer saves with each checkpoint: a resumed run masks the same.
    collator = SpanMaskingCollator(
        tokenizer.mask_token_id,
        tokenizer.pad_token_id,
        len(tokenizer),
        num_special_tokens=len(tokenizer.all_special_ids),
    )
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**training),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        optimizers=(optimizer, schedule),
    )
    last_checkpoint = get_last_checkpoint(str(output_dir)) if output_dir.exists() else None
    result = trainer.train(resume_from_checkpoint=last_checkpoint)
    metrics = dict(result.metrics)
    if eval_dataset is not None:
        metrics.update(trainer.evaluate())
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(output_dir)
        history = trainer.state.log_history
        (output_dir / "metrics.json").write_text(json.dumps({"final": metrics, "log_history": history}, indent=2))
        curves = {
            split: ([e["step"] for e in history if key in e], [e[key] for e in history if key in e])
            for split, key in (("train", "loss"), ("validation", "eval_loss"))
        }
        curves = {name: curve for name, curve in curves.items() if curve[0]}
        plot_curves(output_dir / "loss.png", curves, "step", "MLM loss", "Pretraining")
    return metrics
