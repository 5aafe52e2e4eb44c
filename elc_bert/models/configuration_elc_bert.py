"""Configuration of ELC-BERT and its LTG-BERT backbone (arXiv 2311.02265 and 2303.09859)."""

from .errors import InputError
from .transformers_compat import PreTrainedConfig, strict

LAYER_COMBINATIONS = ("elc", "residual")
ELC_VARIANTS = ("base", "zero", "normalized", "weighted_output")
POSITIONAL_SPLITS = ("halves", "interleaved")

# Readers of other checkpoint formats, by the model_type their config.json states: each maps (the folder or Hub name,
# its config dict, the caller's other `from_pretrained` arguments, the Hub arguments) to the ElcBertConfig fields of
# that checkpoint. `reference_checkpoints.py` registers the published reference checkpoints' ("ltgbert").
CHECKPOINT_FORMATS = {}
HUB_ARGUMENTS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")

# The paper's sizes (BabyLM 2023 strict / strict-small) and a tiny one for tests and CPU runs.
PRESETS = {
    "strict": dict(
        vocab_size=16384, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=2048
    ),
    "strict-small": dict(
        vocab_size=6144, hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1024
    ),
    "tiny": dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128),
    # The largest size whose pretraining run on the local stand-in corpus fits about 2.5 hours on 2 CPU threads for
    # several epochs (chosen by `scripts/bench_presets.py`: about 2,900 tokens/s, 3.4 epochs in 3,000 steps of 64).
    "small-cpu": dict(
        vocab_size=8192, hidden_size=256, num_hidden_layers=8, num_attention_heads=4, intermediate_size=683
    ),
}


def fields_into_constructor(config_class, config_dict: dict, kwargs: dict) -> tuple[dict, dict]:
    """`get_config_dict`'s result with the config fields given to `from_pretrained` moved from `kwargs` into the
    constructor's arguments: the library would set them on the built config afterwards, unchecked; there they are
    checked exactly as in `config_class(...)`."""
    for name in [name for name in kwargs if name in getattr(config_class, "__dataclass_fields__", {})]:
        config_dict[name] = kwargs.pop(name)
    return config_dict, kwargs


@strict
class ElcBertConfig(PreTrainedConfig):
    r"""
    Configuration of an ELC-BERT (Every Layer Counts BERT) or a plain LTG-BERT model.

    Args:
        vocab_size (`int`): size of the vocabulary V.
        hidden_size (`int`): width D of the hidden states.
        num_hidden_layers (`int`): number of transformer blocks L.
        num_attention_heads (`int`): number of heads H; `hidden_size` must be divisible by it.
        intermediate_size (`int`): width I of the GeGLU feed-forward (its input projection is 2I wide).
        max_position_embeddings (`int`): M, the distance at which relative-position buckets stop growing. Longer
            inputs still work: distances are clamped at M - 1.
        position_bucket_size (`int`): P, the number of relative-position buckets per direction (2P - 1 in all).
            Distances up to P/2 are exact, longer ones logarithmic.
        layer_norm_eps (`float`): epsilon of every LayerNorm.
        hidden_dropout_prob (`float`): dropout on the embeddings and the feed-forward outputs.
        attention_probs_dropout_prob (`float`): dropout on the relative embeddings, the attention probabilities
            and the attention output.
        classifier_dropout (`float`, *optional*): dropout in the fine-tuning heads; `None` uses `hidden_dropout_prob`.
        layer_combination (`str`): `"elc"` (each block reads a learned convex combination of the embedding and all
            earlier block outputs) or `"residual"` (plain LTG-BERT with a pre-norm residual stream).
        elc_variant (`str`): ELC variant, one of `"base"` (the released checkpoints), `"zero"`, `"normalized"`,
            `"weighted_output"` (see the spec's variant table). Ignored when `layer_combination="residual"`.
        positional_split (`str`): how the 2D-wide positional projection splits into the positional query and key:
            `"halves"` (ELC / BabyLM checkpoints) or `"interleaved"` (per head, older BNC LTG-BERT checkpoints).
        pad_token_id, bos_token_id, eos_token_id, mask_token_id (`int`): special token ids of the reference
            tokenizer ([PAD]=3, [CLS]=1, [SEP]=2, [MASK]=4).
        tie_word_embeddings (`bool`): tie the MLM decoder to the input embedding.
        sparse_prediction (`bool`): in `ElcBertForMaskedLM` with labels, run the MLM head on the labelled positions
            only and return their N x V logits (as ModernBERT does); the pretraining job turns it on. Off, the logits
            are B x T x V like every `transformers` masked LM.

    Example:
        >>> config = ElcBertConfig.from_preset("strict-small")
        >>> model = ElcBertForMaskedLM(config)
    """

    model_type = "elc_bert"

    vocab_size: int = 16384
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 2048
    max_position_embeddings: int = 512
    position_bucket_size: int = 32
    layer_norm_eps: float = 1e-7
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    classifier_dropout: float | int | None = None
    layer_combination: str = "elc"
    elc_variant: str = "base"
    positional_split: str = "halves"
    pad_token_id: int | None = 3
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    mask_token_id: int | None = 4
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False

    @classmethod
    def from_preset(cls, name: str, **kwargs) -> "ElcBertConfig":
        """A config of one of the named sizes in `PRESETS`; keyword arguments override single fields."""
        if name not in PRESETS:
            raise InputError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **kwargs})

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs) -> tuple[dict, dict]:
        """`PreTrainedConfig.get_config_dict`; for a checkpoint of another format (`CHECKPOINT_FORMATS`), the fields
        its reader makes of it, so that every class's `from_pretrained` reads such folders too."""
        hub_kwargs = {key: kwargs[key] for key in HUB_ARGUMENTS if kwargs.get(key) is not None}
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        read = CHECKPOINT_FORMATS.get(config_dict.get("model_type"))
        if read is not None:
            config_dict = read(pretrained_model_name_or_path, config_dict, kwargs, hub_kwargs)
        return fields_into_constructor(cls, config_dict, kwargs)

    def __post_init__(self, **kwargs):
        self.check_values()
        super().__post_init__(**kwargs)

    def validate_values(self):
        """The class validator of the strict dataclass: `save_pretrained` runs it before writing, so that a value set
        on the config after it was built (unchecked) is refused rather than saved."""
        self.check_values()

    def check_values(self):
        """Raises `ValueError` naming the first field whose value is invalid."""
        for field in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            if getattr(self, field) <= 0:
                raise InputError(f"{field} must be positive, got {getattr(self, field)}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise InputError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.position_bucket_size < 4 or self.position_bucket_size % 2:
            raise InputError(f"position_bucket_size must be an even number >= 4, got {self.position_bucket_size}")
        if self.max_position_embeddings <= self.position_bucket_size // 2:
            raise InputError(
                f"max_position_embeddings ({self.max_position_embeddings}) must exceed position_bucket_size / 2"
            )
        for field in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, field)
            if value is not None and not 0.0 <= value < 1.0:
                raise InputError(f"{field} must be in [0, 1), got {value}")
        if self.layer_norm_eps <= 0:
            raise InputError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}")
        for field, allowed in (
            ("layer_combination", LAYER_COMBINATIONS),
            ("elc_variant", ELC_VARIANTS),
            ("positional_split", POSITIONAL_SPLITS),
        ):
            if getattr(self, field) not in allowed:
                raise InputError(f"{field} must be one of {allowed}, got {getattr(self, field)!r}")


# `save_pretrained` writes this file next to every checkpoint and names it in config.json's `auto_map`.
ElcBertConfig.register_for_auto_class()

__all__ = ["ElcBertConfig", "PRESETS"]
