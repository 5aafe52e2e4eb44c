"""`elc-bert mlm`: masked-LM fine-tuning on WikiText-2 and its perplexity, for any masked LM or a layer-fusion MLM.

Trains with the Trainer, keeps the checkpoint with the best validation loss, and reports exp(loss) on the test split
as the (masked-LM) perplexity, as the DWAtt paper does.
"""

import math
from pathlib import Path

import torch
from transformers import (
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    Trainer,
    set_seed,
)

from .. import runs
from ..data.text import read_lines
from ..data.tokenizer import load_tokenizer
from ..extras import needs, require
from ..job_configs import MlmConfig, refuse_other_jobs, save_config
from ..job_configs.training_metrics import TrainingMetrics
from ..models import LayerFusionForMaskedLM
from ..models.errors import InputError, InputNotFoundError
from ..models.loading import check_fine_tuning_start, check_vocabulary, load_pretrained
from ..plots import plot_curves
from ..pretrained import find_tokenizer, is_hub_id, resolve_model
from .arguments import (
    UNLOADED_HINT,
    StopOnNonFiniteLoss,
    training_arguments,
    writes_run_folder,
)

with needs("data", "elc-bert mlm"):
    import datasets


def wikitext_splits(data_dir: str, dataset_config: str | None = None) -> dict[str, list[str]]:
    """The train / validation / test lines, from local files or a Hub dataset."""
    root = Path(data_dir)
    if not root.exists():
        if not is_hub_id(data_dir):
            raise InputNotFoundError(f"data_dir {data_dir}: no such folder (and not a Hub dataset name)")
        hub = datasets.load_dataset(data_dir, dataset_config)
        missing = sorted({"train", "validation", "test"} - set(hub))
        if missing:
            raise InputError(f"Hub dataset {data_dir} ({dataset_config}): missing splits {missing}, has {list(hub)}")
        return {split: hub[split]["text"] for split in ("train", "validation", "test")}
    return {split: read_lines(path) for split, path in _split_files(root).items()}


def _split_files(root: Path) -> dict[str, Path]:
    """The file of each split in the local WikiText-2 folder `root` (or its wikitext2/wikitext-2-v1_tokenized)."""
    nested = root / "wikitext2" / "wikitext-2-v1_tokenized"
    folder = nested if nested.is_dir() else root
    files = {}
    for split, name in (("train", "train.txt"), ("validation", "valid.txt"), ("test", "test.txt")):
        files[split] = next((path for path in (folder / name, folder / f"{name}.gz") if path.is_file()), None)
        if files[split] is None:
            raise InputNotFoundError(f"{folder}: missing the {split} split ({name} or {name}.gz)")
    return files


def split_name(data_dir: str, dataset_config: str | None, split: str) -> str:
    """How a message names a split of `wikitext_splits(data_dir, dataset_config)`: its file, or the Hub dataset's."""
    if Path(data_dir).exists():
        return f"{_split_files(Path(data_dir))[split]} (the {split} split)"
    return f"the {split} split of Hub dataset {data_dir}" + (f" ({dataset_config})" if dataset_config else "")


def blocks(lines: list[str], tokenizer, block_size: int, limit: int | None, name: str = "the text") -> datasets.Dataset:
    """The non-empty lines, tokenized and cut into blocks of `block_size` tokens, each between the tokenizer's
    sequence start and end tokens ([CLS]/[SEP], <s>/</s>). Text too short for one block raises InputError naming it
    (`name`): the Trainer could neither train nor evaluate on no block."""
    lines = [line.strip() for line in lines if line.strip()]
    body = block_size - 2
    needed = None if limit is None else limit * body
    ids = []
    for start in range(0, len(lines), 1000):  # tokenize only as much text as the blocks asked for need
        ids.extend(
            i
            for encoded in tokenizer(lines[start : start + 1000], add_special_tokens=False)["input_ids"]
            for i in encoded
        )
        if needed is not None and len(ids) >= needed:
            break
    if len(ids) < body:
        raise InputError(
            f"{name}: {len(ids)} tokens, fewer than one block of block_size {block_size} needs ({body} and the two "
            "special tokens). Give it more text or set a smaller block_size"
        )
    chunks = [ids[start : start + body] for start in range(0, len(ids) - body + 1, body)][:limit]
    first, last = tokenizer.cls_token_id, tokenizer.sep_token_id
    return datasets.Dataset.from_dict({"input_ids": [[first, *chunk, last] for chunk in chunks]})


def _model(config: MlmConfig, model_path: str):
    if config.fusion is None:
        model, info = load_pretrained(AutoModelForMaskedLM, model_path)
        if not config.allow_unloaded_weights:
            check_fine_tuning_start(model_path, model, info, UNLOADED_HINT)
        return model
    return LayerFusionForMaskedLM.from_backbone(
        model_path,
        fusion=config.fusion,
        freeze_backbone=config.freeze_backbone,
        allow_unloaded_weights=config.allow_unloaded_weights,
    )


def perplexities(trainer: Trainer, test: datasets.Dataset, seed: int) -> dict:
    """The validation and test loss of the trainer's model and their exp, the (masked-LM) perplexity; each split is
    masked from `seed`, so every model compared sees the same masks."""
    torch.manual_seed(seed)
    validation_loss = trainer.evaluate()["eval_loss"]
    torch.manual_seed(seed)
    test_loss = trainer.evaluate(test, metric_key_prefix="test")["test_loss"]
    return {
        "validation_loss": validation_loss,
        "validation_perplexity": math.exp(validation_loss),
        "test_loss": test_loss,
        "test_perplexity": math.exp(test_loss),
    }


def mlm(config: MlmConfig) -> dict:
    """Fine-tunes (or resumes) the masked LM, keeps the checkpoint with the best validation loss and returns its
    validation and test perplexity (`perplexities`), also written to metrics.json with the eval_loss.png curve."""
    require("plots", what="elc-bert mlm")
    output_dir = Path(config.output_dir)
    refuse_other_jobs(output_dir, config.job)
    model_path = resolve_model(config.model)
    tokenizer = load_tokenizer(find_tokenizer([model_path]))
    splits = wikitext_splits(config.data_dir, config.dataset_config)
    limits = {"train": config.max_train_blocks, "validation": config.max_eval_blocks, "test": config.max_eval_blocks}
    names = {split: split_name(config.data_dir, config.dataset_config, split) for split in splits}
    train, validation, test = (
        blocks(lines, tokenizer, config.block_size, limits[split], names[split]) for split, lines in splits.items()
    )
    writes = writes_run_folder()
    with runs.hold_run_folder(output_dir, "mlm", writes=writes), runs.naming_full_disk(output_dir):
        if writes:
            output_dir.mkdir(parents=True, exist_ok=True)  # the inputs are good: the run folder may be written
            save_config(config, runs.config_file(output_dir, config.job))
        return _train(config, model_path, tokenizer, train, validation, test)


def _train(config: MlmConfig, model_path: str, tokenizer, train, validation, test) -> dict:
    output_dir = Path(config.output_dir)
    set_seed(config.seed)
    model = _model(config, model_path)
    check_vocabulary(tokenizer, model, model_path)
    owned = dict(
        seed=config.seed,
        num_train_epochs=config.epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    arguments = training_arguments(
        config,
        output_dir,
        owned,
        logging_strategy="epoch",
        save_total_limit=2,
        prediction_loss_only=True,
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=config.mask_p)
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=train,
        eval_dataset=validation,
        data_collator=collator,
        callbacks=[StopOnNonFiniteLoss()],
    )
    trainer.train(resume_from_checkpoint=runs.last_checkpoint(output_dir))
    published = trainer.state.best_model_checkpoint or runs.last_checkpoint(output_dir)  # what export picks
    if published is not None and trainer.is_world_process_zero():
        runs.record_model(output_dir, published)
    metrics = perplexities(trainer, test, config.seed)
    history = trainer.state.log_history
    TrainingMetrics(metrics, history).write(output_dir)
    curve = [(e["epoch"], e["eval_loss"]) for e in history if "eval_loss" in e]
    if curve:
        curves = {"validation": tuple(zip(*curve))}
        plot_curves(output_dir / runs.EVAL_LOSS_PLOT, curves, "epoch", "MLM loss", "WikiText-2")
    return metrics
