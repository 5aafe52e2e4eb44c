"""`elc-bert pretrain`'s config: ELC-BERT or LTG-BERT from scratch, following the reference recipe."""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from ..data.pretraining import PACKINGS, SpanMaskingCollator
from ..data.sources import DatasetSource
from ..models import PRESETS, ElcBertConfig
from ..models.errors import InputError
from ..runs.layout import TRACK_CHECKPOINT_WORDS
from .fields import TRACKERS, check_fields, config_field, report_to_field, training_field
from .layer_budget import LayerBudget
from .measures import Corpus, Measure, Run, shown_path
from .training_metrics import TrainingMetrics

SCHEDULE = "warmup_ratio and final_lr_ratio (the job's warm-up + cosine schedule)"
INIT_FROM_SETS = ("preset", "tokenizer", "vocab_size", "min_frequency")  # what init_from's model and tokenizer set
BABYLM_SOURCES = 10  # sources of the BabyLM 2023 strict-small corpus


@dataclass
class PretrainConfig:
    """A pretraining run. Entries of `train_files` / `validation_files` are files or BabyLM-style folders, relative to
    `data_dir`, or dicts naming a `datasets` dataset (`path`: a Hub name or a local dataset folder; `name`, `split`,
    `text_column`); `training` holds further `TrainingArguments` fields."""

    job: ClassVar[str] = "pretrain"  # the command that runs it
    results_class: ClassVar[type] = TrainingMetrics
    start_model: ClassVar[None] = None  # from scratch (init_from is a local folder: no Hub base model)

    output_dir: str = config_field(help="the run's folder: config, tokenizer, checkpoints, model, metrics, plots")
    train_files: list[str | dict] = config_field(
        help="training corpora: files or BabyLM-style folders under data_dir, or datasets (path: ..., name, split, "
        "text_column)",
        keys=DatasetSource,
    )
    validation_files: list[str | dict] = config_field([], "validation corpora, as train_files", keys=DatasetSource)
    max_eval_samples: int | None = config_field(
        None, "evaluate on this many validation samples, evenly spaced over all files (null: all)", bounds=">= 1"
    )
    data_dir: str = config_field(".", "the folder that train_files and validation_files are relative to")
    preset: Literal[tuple(PRESETS)] | None = config_field(
        None, "the model size (ElcBertConfig.from_preset); null: tiny, or init_from's model"
    )
    model: dict = config_field({}, "ElcBertConfig overrides, e.g. layer_combination: residual", keys=ElcBertConfig)
    tokenizer: str | None = config_field(None, "an existing tokenizer; null: one is trained on the training files")
    vocab_size: int | None = config_field(
        None, "the vocabulary size of the tokenizer trained here; null: 4096", bounds=">= 1"
    )
    min_frequency: int | None = config_field(
        None, "the tokenizer's minimum frequency of a merge; null: 10", bounds=">= 0"
    )
    seq_length: int = config_field(128, "tokens per training sample", bounds=">= 8")
    long_seq_length: int | None = config_field(
        None, "the recipe's switch to long samples (512) with batch_size / 4 for the last steps (null: none)"
    )
    long_after: float = config_field(0.9, "the fraction of max_steps after which long samples start", bounds="(0, 1)")
    optimizer: Literal["lamb", "adamw"] = config_field("lamb", "the optimizer")
    learning_rate: float = config_field(1e-2, "the peak learning rate", bounds="> 0")
    weight_decay: float = config_field(0.1, "weight decay (not on biases and LayerNorms)", bounds=">= 0")
    warmup_ratio: float = config_field(0.016, "the share of max_steps with a linear warm-up", bounds="[0, 1]")
    final_lr_ratio: float = config_field(0.1, "the cosine decay's final learning rate / peak", bounds="[0, 1]")
    max_steps: int = config_field(1000, "optimizer steps", bounds=">= 1")
    batch_size: int = config_field(
        32, "sequences per optimizer step, over all processes and accumulation steps", bounds=">= 1"
    )
    seed: int = config_field(42, "the seed of initialisation, data order and masking")
    init_from: str | None = config_field(
        None, "continued pretraining: a model folder (ours or a converted checkpoint) with its tokenizer"
    )
    mask_p: float = config_field(0.15, "the masking recipe: the share of tokens masked ...")
    span_p: float = config_field(1 / 3, "... in spans of length Geometric(span_p) ...")
    max_span: int = config_field(10, "... mod max_span")
    short_p: float = config_field(
        0.1,
        "the share of training samples cut to a random shorter length (uniform in [1, seq_length - 2))",
        bounds="[0, 1)",
    )
    prepare_corpus: bool = config_field(
        False,
        "prepare the text as the reference prepares the BabyLM corpus before tokenizing (elc-bert prepare-corpus: "
        "per-source cleaning by file name, sentence segmentation, [PAR] at paragraph ends; cached)",
    )
    packing: Literal[tuple(PACKINGS)] = config_field(
        "reference",
        "how documents become samples: reference (the reference cache: filled across sentences, cut inside the "
        "overflowing sentence, which starts the next sample again; a sentence longer than a sample continues in the "
        "next) or sentences (whole sentences only)",
    )
    pack_rows: bool = config_field(
        False,
        "lay the samples of each micro-batch several to a row of the phase's sample length (seq_length, or "
        "long_seq_length in the long phase), each attending to itself alone "
        "(position_ids mark them): the same samples, masks and loss as one sample per row, with less padding",
    )
    torch_compile: bool = config_field(False, "train the torch.compile'd model (TrainingArguments.torch_compile)")
    data_cache_dir: str | None = config_field(
        None, "where the tokenized, packed corpus is cached (null: the datasets cache)"
    )
    streaming: bool = config_field(
        False, "stream the dataset entries of train_files (packed on the fly, shuffled in a buffer)"
    )
    shuffle_buffer: int = config_field(10_000, "samples in the streaming shuffle buffer", bounds=">= 1")
    checkpoint_words: list[int] | Literal[tuple(TRACK_CHECKPOINT_WORDS)] = config_field(
        [],
        "also keep the model (no optimizer state) when the training samples have shown this many words, e.g. "
        "[1000000, 2000000, ..., 10000000, 20000000, ..., 100000000]; a BabyLM 2025 track's name keeps the checkpoints "
        "its rules ask for (strict-small: 1M ... 10M, 20M ... 100M; strict: on to 1000M); folders words-1M etc., "
        "pushed as revisions chck_1M etc. by `elc-bert push --revisions`",
        bounds=">= 1",
    )
    checkpoint_words_scale: float = config_field(
        1.0,
        "a dry run of checkpoint_words at toy scale: each milestone is kept once the samples have shown this share of "
        "its words, under its real name (1e-4: words-1M after 100 words; words_seen.json records the scale); 1 for a "
        "real run",
        bounds="(0, 1]",
    )
    layer_budget: dict = config_field(
        {},
        "a training budget by layer importance: {after_steps: W, freeze: k} measures each layer's leave-one-out "
        "importance on the validation data after W steps and freezes the k least important layers' weights for the "
        "rest of the run (optional: samples, seed of the measurement); {}: every layer trains throughout",
        keys=LayerBudget,
    )
    report_to: list[Literal[TRACKERS]] = report_to_field()
    training: dict = training_field()
    # A resumed run may change how it keeps checkpoints and reports, which does not change what it trains.
    # The TrainingArguments fields the job sets from its own keys (a `training.*` value for one is refused): the
    # optimizer and its schedule are built from the job's keys, the batches drawn by the job.
    training_owned: ClassVar[dict[str, str]] = {
        "report_to": "report_to",
        "seed": "seed",
        "max_steps": "max_steps",
        "num_train_epochs": "max_steps",
        "per_device_train_batch_size": "batch_size",
        "per_device_eval_batch_size": "batch_size",
        "train_sampling_strategy": "batch_size (the job draws its own batches)",
        "remove_unused_columns": "nothing: the job's batches need every column",
        "torch_compile": "torch_compile",
        "learning_rate": "learning_rate",
        "weight_decay": "weight_decay",
        **dict.fromkeys(("lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps"), SCHEDULE),
        **dict.fromkeys(("optim", "optim_args", "adam_beta1", "adam_beta2", "adam_epsilon"), "optimizer"),
    }
    may_change: ClassVar[tuple[str, ...]] = (
        *(f"training.{name}" for name in ("save_steps", "save_total_limit", "logging_steps", "disable_tqdm")),
        "checkpoint_words",
        "checkpoint_words_scale",
        "report_to",
    )

    def __post_init__(self):
        if isinstance(self.checkpoint_words, str) and self.checkpoint_words in TRACK_CHECKPOINT_WORDS:
            self.checkpoint_words = list(TRACK_CHECKPOINT_WORDS[self.checkpoint_words])
        check_fields(self)
        if not self.train_files:
            raise InputError("train_files is empty")
        if self.long_seq_length is not None:
            if self.long_seq_length <= self.seq_length:
                raise InputError(f"long_seq_length must exceed seq_length, got {self.long_seq_length}")
            if self.batch_size % 4:
                raise InputError(f"batch_size must be divisible by 4 for the long phase, got {self.batch_size}")
        if "vocab_size" in self.model:
            raise InputError("model.vocab_size is set by the job (the tokenizer's size): use vocab_size")
        if self.init_from is not None:
            # The model (its size) and its tokenizer come from init_from: these keys would be silently ignored.
            meaningless = [name for name in INIT_FROM_SETS if getattr(self, name) is not None]
            if meaningless:
                raise InputError(
                    f"init_from {self.init_from} brings its own model size and tokenizer: leave "
                    f"{', '.join(meaningless)} unset (null)"
                )
        else:
            self.preset = self.preset or "tiny"
            self.vocab_size = self.vocab_size or 4096
            self.min_frequency = 10 if self.min_frequency is None else self.min_frequency
        if self.streaming:
            if not all(isinstance(entry, dict) for entry in self.train_files):
                raise InputError("streaming reads datasets: every train_files entry must be a dict (path: ...)")
            if self.tokenizer is None and self.init_from is None:
                raise InputError(
                    "streaming needs a tokenizer (tokenizer: or init_from:): none can be trained on a stream"
                )
            if self.long_seq_length is not None:
                raise InputError("streaming has no long phase: set long_seq_length to null")
            if self.checkpoint_words:
                raise InputError("checkpoint_words needs the words of each step, unknown ahead when streaming")
        if self.layer_budget:
            self._check_layer_budget()
        # The masking recipe is checked where it lives.
        SpanMaskingCollator(
            4, 3, 8, mask_p=self.mask_p, span_p=self.span_p, max_span=self.max_span, short_p=self.short_p
        )

    def _check_layer_budget(self) -> None:
        budget = LayerBudget(**self.layer_budget)
        if budget.after_steps >= self.max_steps:
            raise InputError(
                f"layer_budget.after_steps {budget.after_steps} must be below max_steps {self.max_steps}: the layers "
                "are frozen after it"
            )
        if not self.validation_files:
            raise InputError("layer_budget measures layer importance on the validation data: set validation_files")
        # (with init_from the depth is known once the model is loaded: the job checks it there)
        layers = self.model.get("num_hidden_layers", PRESETS[self.preset]["num_hidden_layers"] if self.preset else None)
        if layers is not None and budget.freeze >= layers:
            raise InputError(
                f"layer_budget.freeze {budget.freeze} must leave a layer training: the model has {layers} layers"
            )

    def corpora(self, run: Run) -> tuple[list[Corpus], list[Corpus]]:
        """Files under data_dir, or a `datasets` source (a dict entry): a Hub dataset or a local folder."""

        def corpus(entry) -> Corpus:
            if isinstance(entry, dict):
                path = str(entry.get("path"))
                return Corpus(path, path, run.read_from_hub(path, named_on_hub=True), entry.get("name"))
            return Corpus(str(entry), str(Path(self.data_dir) / entry))

        return [corpus(entry) for entry in self.train_files], [corpus(entry) for entry in self.validation_files]

    def measures(self, run: Run) -> list[Measure]:
        metrics, (_, evaluation), found = run.measured.final or {}, run.corpora(), []
        if "eval_loss" in metrics:
            validation = ", ".join(corpus.name for corpus in evaluation) or "validation files"
            dataset = evaluation[0] if len(evaluation) == 1 else Corpus(validation, validation)
            name = "validation MLM loss"
            found.append(Measure("loss", name, metrics["eval_loss"], dataset, "validation", f"{name} ({validation})"))
        if "train_loss" in metrics:
            found.append(Measure("loss", "training MLM loss, mean over the run", metrics["train_loss"]))
        return found

    def training_text(self, run: Run, data: str, run_model: str | None, model_dir: str) -> str:
        return (
            f"Pretrained from scratch with `elc-bert pretrain` (run `{shown_path(run.dir)}`): preset "
            f"`{self.preset}`, {self.max_steps} steps of batch {self.batch_size} x {self.seq_length} "
            f"tokens, optimizer {self.optimizer}, peak learning rate {self.learning_rate}, seed {self.seed}; "
            f"training data: {data}.\n\n" + self.stand_in_note(run)
        )

    def limitations(self, run: Run) -> tuple[str, list[str]]:
        return f", pretrained for {self.max_steps} optimizer steps", []

    def stand_in_note(self, run: Run) -> str:
        """Says plainly whether the pretraining files were the BabyLM 2023 strict-small corpus or a stand-in."""
        files, data_dir = self.train_files, Path(self.data_dir)
        babylm = [f for f in files if isinstance(f, str) and Path(f).parts[:1] == ("babylm",)]
        training, _ = self.corpora(run)
        others = [corpus for f, corpus in zip(files, training) if f not in babylm]
        sources = []
        for entry in babylm:
            folder = data_dir / entry
            if not folder.exists():
                return (
                    f"The training files ({', '.join(babylm)} under `{data_dir}`) could not be found when this card "
                    "was written, so the card cannot tell whether they were the full BabyLM 2023 corpus."
                )
            sources += sorted(p.name.split(".")[0] for p in folder.iterdir()) if folder.is_dir() else [folder.name]
        if babylm and not others and len(sources) >= BABYLM_SOURCES:
            return f"Trained on the BabyLM 2023 corpus files {', '.join(babylm)}."
        parts = []
        if babylm:
            parts.append(
                f"{len(sources)} of the {BABYLM_SOURCES} BabyLM 2023 strict-small sources ({', '.join(sources)})"
            )
        parts += [str(corpus) for corpus in others]
        return (
            "**Stand-in corpus, not BabyLM.** This model was not trained on the BabyLM 2023 strict-small corpus that "
            f"ELC-BERT was designed for, but on a stand-in: {' plus '.join(parts)}. Its numbers are not comparable "
            "with published BabyLM results."
        )
