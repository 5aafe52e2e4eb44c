"""Configuration of the layer-fusion heads (ElNokrashy et al., "Depth-Wise Attention (DWAtt)", arXiv 2209.15168)."""

from typing import NamedTuple

from transformers import AutoConfig

from .configuration_elc_bert import ElcBertConfig, fields_into_constructor
from .errors import InputError
from .transformers_compat import PreTrainedConfig, SubConfigSpec, strict


class Fusion(NamedTuple):
    """What a fusion kind (`LayerFusionConfig.fusion`) is: its one entry, which the config, the model, the jobs, the
    analysis and the model cards read. A new kind is one entry here and one `FusionModule` in
    modeling_layer_fusion.py."""

    name: str  # as the papers and result tables call it
    description: str  # one sentence, for model cards
    # The `FusionModule` of modeling_layer_fusion.py that computes it, by class name (as transformers' Auto mappings
    # name model classes): the config file ships alone as remote code and imports no modeling code.
    module: str
    depth_weights: bool = False  # it weighs the fused states per token (`mean_depth_weights`, depth profiles)
    # Each token's output reads that token's states alone, so the model may fuse the wanted tokens only (N x D).
    per_token: bool = True


FUSIONS = {
    "dwatt": Fusion(
        "DWAtt (depth-wise attention)",
        "Each token attends over the depth of the backbone: a query from z_L scores fixed random depth embeddings, "
        "and the weighted sum of per-layer value MLPs is added to z_L.",
        "DepthWiseAttention",
        depth_weights=True,
    ),
    "concat": Fusion("Concat", "One linear map of the concatenated states of all layers.", "ConcatFusion"),
    "average": Fusion("Average", "The mean of the states of all layers.", "LayerAverage"),
    "last": Fusion("Last", "The backbone's last layer alone (the plain baseline).", "LastLayer"),
    "extra_layers": Fusion(
        "Base+n",
        "Extra freshly initialised layers of the backbone's own kind on top of z_L.",
        "ExtraLayers",
        per_token=False,  # attention mixes the tokens
    ),
}


@strict
class LayerFusionConfig(PreTrainedConfig):
    r"""
    Configuration of a layer-fusion model: a backbone encoder whose per-layer states z_0..z_L are fused per token.

    Args:
        backbone_config (`PreTrainedConfig` or `dict`): the backbone's own config (any `AutoConfig`: `bert`,
            `roberta`, `xlm-roberta`, `elc_bert`, ...), stored inside this one as its sub-config. Required: a config
            without one (say, a backbone's own `config.json` given to `LayerFusionFor*.from_pretrained`) is refused,
            since it would build a random backbone; `LayerFusionFor*.from_backbone` wraps a pretrained backbone.
            `get_text_config()` returns it, so that `resize_token_embeddings` updates the backbone's `vocab_size`.
        fusion (`str`): a kind of `FUSIONS`: `"dwatt"` (depth-wise attention), `"concat"` (one linear map of the
            concatenated states), `"average"`, `"last"` (the plain backbone) or `"extra_layers"` (Base+n: freshly
            initialised layers of the backbone's own kind on top of z_L).
        fuse_embeddings (`bool`): whether z_0, the embedding output, is among the fused states (S = L+1, else L).
        num_extra_layers (`int`): n for `fusion="extra_layers"`.
        bottleneck_ratio (`float`): gamma, the width of DWAtt's bottleneck MLPs as a fraction of the hidden size.
        layer_position_dim (`int`): d_pos, the size of DWAtt's fixed random depth embeddings p_n.
        scaled_depth_attention (`bool`): divide DWAtt's scores q.k_n by sqrt(hidden size) (the paper does not).
        concat_residual (`bool`): add z_L to the Concat output.
        freeze_backbone (`bool`): feature extraction: the backbone takes no gradient and stays in eval mode.
        head_dropout (`float`): dropout before the task head's output layer.
        tie_word_embeddings (`bool`): in `LayerFusionForMaskedLM`, tie the backbone's MLM decoder to its input
            embeddings, as the backbone's own MLM model does; `False` gives the decoder weights of its own.
        output_hidden_states (`bool`, `int` or `list[int]`): the default of the models' `output_hidden_states` (see
            `LayerFusionOutput.hidden_states`).
    """

    model_type = "layer_fusion"
    # optional=True only keeps the library from building a default BERT config in place of a missing backbone:
    # __post_init__ refuses that case with a message of its own.
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="bert", optional=True)}

    backbone_config: PreTrainedConfig | dict | None = None
    fusion: str = "dwatt"
    fuse_embeddings: bool = True
    num_extra_layers: int = 1
    bottleneck_ratio: float | int = 0.5
    layer_position_dim: int = 24
    scaled_depth_attention: bool = False
    concat_residual: bool = False
    freeze_backbone: bool = False
    head_dropout: float | int = 0.1
    tie_word_embeddings: bool = True

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs) -> tuple[dict, dict]:
        """`PreTrainedConfig.get_config_dict`, with the fields given to `from_pretrained` checked as in the
        constructor (`fields_into_constructor`)."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        return fields_into_constructor(cls, config_dict, kwargs)

    def validate_values(self):
        """The class validator of the strict dataclass, run by `save_pretrained` before writing."""
        self.check_values()

    def __post_init__(self, **kwargs):
        if self.backbone_config is None:
            found = kwargs.get("model_type")
            what = f"a config of model_type {found!r}" if found else "this config"
            raise InputError(
                f"{what} has no backbone_config, so it is not a layer-fusion checkpoint (model_type "
                f"'{self.model_type}'). To put a fusion head on a pretrained backbone, use "
                "LayerFusionFor*.from_backbone(path, fusion=...); to build one from scratch, pass "
                "LayerFusionConfig(backbone_config=...)."
            )
        self.check_values()
        super().__post_init__(**kwargs)

    def check_values(self):
        """Raises `ValueError` naming the first field whose value is invalid."""
        if self.fusion not in FUSIONS:
            raise InputError(f"fusion must be one of {tuple(FUSIONS)}, got {self.fusion!r}")
        if self.num_extra_layers < 1:
            raise InputError(f"num_extra_layers must be >= 1, got {self.num_extra_layers}")
        if not 0 < self.bottleneck_ratio <= 8:
            raise InputError(f"bottleneck_ratio must be in (0, 8], got {self.bottleneck_ratio}")
        if self.layer_position_dim < 1:
            raise InputError(f"layer_position_dim must be >= 1, got {self.layer_position_dim}")
        if not 0 <= self.head_dropout < 1:
            raise InputError(f"head_dropout must be in [0, 1), got {self.head_dropout}")

    def get_text_config(self, *args, **kwargs) -> PreTrainedConfig:
        """The backbone's config: it owns the vocabulary (and `resize_token_embeddings` writes its `vocab_size`)."""
        return self.backbone_config.get_text_config(*args, **kwargs)

    @property
    def num_fused_states(self) -> int:
        """S: the number of backbone states that the fusion reads."""
        layers = self.backbone_config.num_hidden_layers
        return layers + 1 if self.fuse_embeddings else layers


# `save_pretrained` writes this file next to every checkpoint and names it in config.json's `auto_map`. Where that
# code runs without this package, an ELC-BERT `backbone_config` must still parse through `AutoConfig`.
LayerFusionConfig.register_for_auto_class()
AutoConfig.register(ElcBertConfig.model_type, ElcBertConfig, exist_ok=True)

__all__ = ["LayerFusionConfig", "FUSIONS", "Fusion"]
