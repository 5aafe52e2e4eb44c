"""Layer fusion over any encoder: DWAtt (depth-wise attention), Concat, and the Last, Average and Base+n baselines.

Written from the equations of the DWAtt paper (ElNokrashy et al., arXiv 2209.15168). The backbone (BERT, RoBERTa, XLM-R,
ELC-BERT, ...) yields per-token states z_0..z_L; a fusion module maps them to one state per token, which a thin task
head reads.
"""

import functools
import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from .autograd_functions import WeightedSum  # noqa: F401  (see below)
from .configuration_elc_bert import ElcBertConfig
from .configuration_layer_fusion import FUSIONS, LayerFusionConfig
from .errors import InputError
from .feature_cache import FeatureCache
from .layer_plans import run_layer_plan  # noqa: F401  (see below)
from .loading import check_fine_tuning_start, key_list, load_pretrained, unloaded_weights
from .modeling_elc_bert import AUTO_CLASSES as ELC_BERT_AUTO_CLASSES
from .modeling_elc_bert import ElcBertModel, LayerStack, select_hidden_states, wants_hidden_states
from .transformers_compat import PreTrainedModel, can_return_tuple, create_bidirectional_mask, init

# transformers before 5 copies into its module cache only the files that the entry file (this one) imports itself,
# not what those import in turn: every model file the fusion models need is named above, layer_plans.py and
# autograd_functions.py included.


@dataclass
class LayerFusionOutput(ModelOutput):
    """
    Args:
        last_hidden_state (`torch.FloatTensor`, B x T x D): the fused state of every token.
        depth_weights (`torch.FloatTensor`, B x T x S, *optional*): DWAtt's weights over the S fused states.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, with `output_hidden_states`): L+2 entries, each
            B x T x D: the backbone's states z_0..z_L (all of them, whatever `fuse_embeddings` says; z_L is the
            backbone's own output), then the fused output h (`last_hidden_state` at every position). As in
            `transformers`, `output_hidden_states` may also be an index or a list of indices into these L+2
            (negative ones count from the end: -1 is h, -2 is z_L): the entries not selected are None.
    """

    last_hidden_state: torch.FloatTensor | None = None
    depth_weights: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


class BottleneckMLP(nn.Module):
    """f(x) = W LN(gelu(U x)), U: D -> gamma D, W: gamma D -> D."""

    def __init__(self, hidden_size: int, inner_size: int, eps: float):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, inner_size)
        self.layer_norm = nn.LayerNorm(inner_size, eps=eps)
        self.down_proj = nn.Linear(inner_size, hidden_size)

    def forward(self, hidden_states):
        return self.down_proj(self.layer_norm(F.gelu(self.up_proj(hidden_states))))


def fixed_layer_positions(num_states: int, dim: int) -> torch.Tensor:
    """DWAtt's depth embeddings p_0..p_{S-1} (S x d_pos): fixed random U[0, 1) vectors drawn from a generator of
    their own with a fixed seed, so that every model (and every re-initialisation by `_init_weights`) gets the same
    ones whatever the global seed. Checkpoints still save them: older ones hold other draws, which load as saved."""
    positions = torch.rand(num_states, dim, generator=torch.Generator().manual_seed(0), device="cpu")
    return positions.to(device=torch.get_default_device(), dtype=torch.get_default_dtype())


class FusionModule(nn.Module):
    """The module of a fusion kind (the class its `FUSIONS` entry names): built from the config and the backbone, it
    maps the backbone's states z_0..z_L to one state per token, with one `forward` for every kind. A kind that fuses
    reads z_0 only with `config.fuse_embeddings` (`fused_states`)."""

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__()
        self.first_state = 0 if config.fuse_embeddings else 1

    def fused_states(self, states: list[torch.Tensor]) -> list[torch.Tensor]:
        """The S states that the kind fuses: z_0..z_L, or z_1..z_L without `fuse_embeddings`."""
        return states[self.first_state :]

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        """states: z_0..z_L, each B x T x D, or each N x D for the N wanted tokens of a per-token kind
        (`Fusion.per_token`); attention_mask (B x T, 1 = real token, or None), backbone (the model's), position_ids
        and kernel_options (FlexAttention's), as the backbone took them: read by the kinds that run the backbone's
        own layers. Returns the fused states (B x T x D, or N x D) and the depth weights (B x T x S, or N x S), or
        None for a kind without (`Fusion.depth_weights`)."""
        raise NotImplementedError


class LastLayer(FusionModule):
    """Last: h = z_L, the backbone's own output (the plain baseline); no parameters."""

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        return states[-1], None


class LayerAverage(FusionModule):
    """Average: h = (1/S) sum_n z_n; no parameters."""

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        return torch.stack(self.fused_states(states)).mean(0), None


class DepthWiseAttention(FusionModule):
    """DWAtt: h = z_L + sum_n a_n v_n with v_n = LN_n(f_{V,n}(z_n)), k_n = W_K p_n, q = 1 + elu(z_L + f_Q(z_L)),
    a = softmax_n(q . k_n). The depth embeddings p_n are fixed U[0, 1) vectors (a buffer, `fixed_layer_positions`).
    The backbone is unused here."""

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config, backbone)
        hidden = config.backbone_config.hidden_size
        inner = max(1, round(config.bottleneck_ratio * hidden))
        eps = getattr(config.backbone_config, "layer_norm_eps", 1e-12)
        num_states = config.num_fused_states
        self.value_mlps = nn.ModuleList(BottleneckMLP(hidden, inner, eps) for _ in range(num_states))
        self.value_layer_norms = nn.ModuleList(nn.LayerNorm(hidden, eps=eps) for _ in range(num_states))
        self.query_mlp = BottleneckMLP(hidden, inner, eps)
        self.key_proj = nn.Linear(config.layer_position_dim, hidden)
        self.register_buffer("layer_positions", fixed_layer_positions(num_states, config.layer_position_dim))
        self.scale = 1 / math.sqrt(hidden) if config.scaled_depth_attention else 1.0

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        """Returns the fused states (B x T x D) and the depth weights (B x T x S) over the S fused states."""
        states = self.fused_states(states)
        last = states[-1]
        values = torch.stack(
            [norm(mlp(state)) for mlp, norm, state in zip(self.value_mlps, self.value_layer_norms, states)], dim=-2
        )  # B x T x S x D
        keys = self.key_proj(self.layer_positions)  # S x D
        query = 1 + F.elu(last + self.query_mlp(last))
        with torch.autocast(query.device.type, enabled=False):  # scores and softmax over depth in float32
            weights = torch.softmax((query.float() @ keys.float().T) * self.scale, dim=-1)
        fused = last + (weights.to(values.dtype).unsqueeze(-2) @ values).squeeze(-2)
        return fused, weights


class ConcatFusion(FusionModule):
    """h = W [z_0; ...; z_L] + b: one linear map of the concatenated states (optionally + z_L)."""

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config, backbone)
        hidden = config.backbone_config.hidden_size
        self.proj = nn.Linear(config.num_fused_states * hidden, hidden)
        self.residual = config.concat_residual

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        states = self.fused_states(states)
        fused = self.proj(torch.cat(states, dim=-1))
        return (fused + states[-1] if self.residual else fused), None


class ExtraLayers(FusionModule):
    """Base+n: n freshly initialised layers of the backbone's own kind stacked on z_L.

    On an ELC-BERT backbone each extra block is one more ELC block: it reads its own learned mixture of all the
    states before it (z_0..z_L and the earlier extra blocks, through the backbone's `LayerStack`), as the backbone's
    blocks do; on LTG-BERT and the BERT family it continues the residual stream from z_L.
    """

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel):
        super().__init__(config, backbone)
        existing = backbone.encoder.layers if isinstance(backbone, ElcBertModel) else backbone.encoder.layer
        layer_class = type(existing[-1])
        depth = config.backbone_config.num_hidden_layers
        self.layers = nn.ModuleList(
            layer_class(config.backbone_config, depth + i) for i in range(config.num_extra_layers)
        )

    def forward(self, states, attention_mask=None, backbone=None, position_ids=None, kernel_options=None):
        """Reads all of z_0..z_L (B x T x D), whatever `fuse_embeddings` says; on ELC-BERT, packed sequences
        (`position_ids`) stay apart in the extra blocks too; `kernel_options` go to every extra block. Returns the
        last extra layer's output (B x T x D) and None (no depth weights)."""
        extra = {} if kernel_options is None else {"kernel_options": kernel_options}
        hidden_states = states[-1]
        if isinstance(backbone, ElcBertModel):
            block_inputs = backbone.block_inputs(hidden_states, attention_mask, position_ids)
        else:
            mask = create_bidirectional_mask(
                config=backbone.config, inputs_embeds=hidden_states, attention_mask=attention_mask
            )
            block_inputs = (mask,)
        stack = None
        if hasattr(self.layers[0], "prev_layer_weights"):  # ELC: every block reads a mixture of all states below
            stack = LayerStack(states[0])
            for slot, state in enumerate(states[1:], start=1):
                stack.write(slot, state)
        for slot, layer in enumerate(self.layers, start=len(states)):
            output = layer(
                stack.mix(layer.prev_layer_weights) if stack is not None else hidden_states, *block_inputs, **extra
            )
            hidden_states = output[0] if isinstance(output, tuple) else output
            if stack is not None:
                stack.write(slot, hidden_states)
        return hidden_states, None


class LayerFusionPreTrainedModel(PreTrainedModel):
    config: LayerFusionConfig
    base_model_prefix = "layer_fusion"
    supports_gradient_checkpointing = True  # the backbone's layers and the extra layers (Base+n) checkpoint
    # The fusion modules run no attention: the implementation asked for (`attn_implementation=...`) reaches the
    # backbone through its sub-config, and the backbone's own checks accept or refuse it.
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    # Checkpoints written before the backbone lost its pooler (see `_without_pooler`) still hold its weights.
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)pooler\."]
    # The Auto class whose `from_pretrained` loads what `from_backbone` wraps.
    _backbone_auto_class = AutoModel

    def get_base_model(self) -> PreTrainedModel:
        """The encoder this model wraps (`backbone`), as PEFT's `get_base_model` returns the model it wraps: what
        `from_backbone` loaded, without the fusion module and head."""
        return self.base_model.backbone

    @torch.no_grad()
    def _init_weights(self, module):
        # Fusion modules, extra layers and heads start like the backbone's own modules of the same kind.
        self.base_model.backbone._init_weights(module)
        if isinstance(module, DepthWiseAttention):
            init.copy_(module.layer_positions, fixed_layer_positions(*module.layer_positions.shape))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, output_loading_info: bool = False, **kwargs):
        """As `PreTrainedModel.from_pretrained`, but a checkpoint that lacks backbone weights raises a ValueError naming
        them: the library would initialise them at random, and a fusion model is only meant to start its own modules
        (fusion, head) fresh."""
        model, loading_info = super().from_pretrained(
            pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
        )
        prefix = "backbone." if model.base_model is model else f"{model.base_model_prefix}.backbone."
        missing = [key for key in unloaded_weights(loading_info)["missing"] if key.startswith(prefix)]
        if missing:
            raise InputError(
                f"{pretrained_model_name_or_path}: the checkpoint lacks backbone weights of {cls.__name__} (they "
                f"would be random): {key_list(missing)}"
            )
        model.base_model.apply_freezing()
        return (model, loading_info) if output_loading_info else model

    @classmethod
    def from_backbone(
        cls,
        backbone_name_or_path: str,
        *,
        dtype=None,
        attn_implementation: str | None = None,
        revision: str | None = None,
        token: str | bool | None = None,
        allow_unloaded_weights: bool = False,
        **config_kwargs,
    ):
        """A fusion model around a pretrained backbone (a local folder or a Hub name): the backbone keeps its
        weights, the fusion module and the head start fresh, in the backbone's dtype. `dtype`, `attn_implementation`,
        `revision` and `token` go to the backbone's `from_pretrained` (the one load of its weights); the other keyword
        arguments are `LayerFusionConfig` fields (`fusion`, `freeze_backbone`, `num_labels`, ...).
        `tie_word_embeddings` defaults to the backbone's own. A backbone checkpoint that does not fill the backbone's
        base model (random weights would be fine-tuned) raises a ValueError naming the keys unless
        `allow_unloaded_weights`; the pooler, which the fusion model drops, and an MLM head, which fine-tuning trains,
        may be missing (`check_fine_tuning_start`).

            model = LayerFusionForTokenClassification.from_backbone("roberta-base", fusion="dwatt", num_labels=9)
        """
        load_kwargs = {"dtype": dtype, "attn_implementation": attn_implementation, "revision": revision, "token": token}
        load_kwargs = {key: value for key, value in load_kwargs.items() if value is not None}
        pretrained, loading_info = load_pretrained(cls._backbone_auto_class, backbone_name_or_path, **load_kwargs)
        if not allow_unloaded_weights:
            unloaded = unloaded_weights(loading_info)
            kept = {kind: [key for key in keys if not key.startswith("pooler.")] for kind, keys in unloaded.items()}
            kept = {"missing_keys": kept["missing"], "mismatched_keys": kept["mismatched"], "unexpected_keys": []}
            hint = "Pass allow_unloaded_weights=True to fine-tune it anyway."
            check_fine_tuning_start(backbone_name_or_path, pretrained, kept, hint)
        if os.path.isdir(backbone_name_or_path):  # a local path means nothing in a checkpoint shared elsewhere
            pretrained.config.name_or_path = ""
        # The implementation the backbone settled on (the one asked for, or its default): a new LayerFusionConfig
        # resets its sub-config's, and `_from_config` sets it again, on both.
        implementation = pretrained.config._attn_implementation
        config_kwargs.setdefault("tie_word_embeddings", pretrained.config.tie_word_embeddings)
        config = LayerFusionConfig(backbone_config=pretrained.config, **config_kwargs)
        model = cls._from_config(
            config, dtype=pretrained.dtype, attn_implementation=implementation, backbone=pretrained
        )
        return model.eval()


def _without_pooler(backbone: PreTrainedModel) -> PreTrainedModel:
    """The backbone without its pooler (BERT-family backbones built with `add_pooling_layer=True`, the default of
    their `AutoModel`): the heads read the fused states, so a pooler would hold parameters that never get a gradient,
    which DistributedDataParallel (without `find_unused_parameters`) refuses. Those backbones skip a `None` pooler."""
    if getattr(backbone, "pooler", None) is not None:
        backbone.pooler = None
    return backbone


def build_backbone(backbone_config, auto_class) -> PreTrainedModel:
    """A fresh backbone of `auto_class` (`AutoModel`, `AutoModelForMaskedLM`) for `backbone_config`. An ELC-BERT
    backbone is built from this package's own classes, the others through the Auto classes: where a saved fusion
    model's code runs without this package, `transformers` loads its config and modeling files as separate modules,
    whose ElcBertConfig classes differ, so no Auto registration could map one onto the other."""
    if backbone_config.model_type == ElcBertConfig.model_type:
        return ELC_BERT_AUTO_CLASSES[auto_class](backbone_config)
    return auto_class.from_config(backbone_config)


class LayerFusionModel(LayerFusionPreTrainedModel):
    """The backbone and a fusion module. Returns the fused states and, for DWAtt, the depth weights.

    backbone: optional, an already built (e.g. pretrained) backbone whose config is `config.backbone_config`; by
    default one is built from that config."""

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        backbone = backbone if backbone is not None else build_backbone(config.backbone_config, AutoModel)
        self.backbone = _without_pooler(backbone)
        # The FusionModule that the kind's entry names, a class of this file.
        self.fusion = globals()[FUSIONS[config.fusion].module](config, self.backbone)
        self.feature_cache = None
        self.post_init()
        self.apply_freezing()

    def apply_freezing(self):
        """Feature extraction: no gradient for the backbone when `config.freeze_backbone` (re-applied after loading,
        which creates the parameters anew)."""
        if self.config.freeze_backbone:
            self.backbone.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.config.freeze_backbone:
            self.backbone.eval()  # feature extraction: no dropout in the frozen backbone
        return self

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def enable_feature_cache(self, enabled: bool = True):
        """Caches the frozen backbone's states per example (feature extraction): an epoch after the first runs no
        backbone pass. Only allowed with `freeze_backbone=True`."""
        if enabled and not self.config.freeze_backbone:
            raise InputError("the feature cache needs a frozen backbone (config.freeze_backbone=True)")
        self.feature_cache = FeatureCache() if enabled else None

    def backbone_states(
        self, input_ids, attention_mask, token_type_ids=None, positions=None, position_ids=None, kernel_options=None
    ):
        """The backbone's states z_0..z_L, each B x T x D, or with `positions` (B x T bool, real tokens only) each
        N x D for those N positions in row-major order; from the feature cache when it is enabled (which keys states
        by sentence, so it takes no `position_ids`). `kernel_options`: FlexAttention's, for the backbone."""
        if self.feature_cache is not None:
            if position_ids is not None:
                raise InputError("the feature cache keys states by sentence: it takes no position_ids (packed rows)")
            run = functools.partial(self._run_backbone, kernel_options=kernel_options)
            return self.feature_cache.states(run, input_ids, attention_mask, token_type_ids, positions)
        states = self._run_backbone(input_ids, attention_mask, token_type_ids, position_ids, kernel_options)
        return [state[positions] for state in states] if positions is not None else states

    @torch.no_grad()
    def fill_feature_cache(self, examples, batch_size: int = 64, progress: bool = True):
        """Computes the frozen backbone's states of `examples` into the feature cache in one pass ahead of training,
        in batches of like lengths: far less padding than the shuffled training batches that would fill it otherwise.

        examples: a sequence of dicts (a `datasets.Dataset` of tokenized examples will do) with unpadded `input_ids`
        and, optionally, `token_type_ids`; other fields are ignored. Examples already cached are skipped."""
        if self.feature_cache is None:
            raise InputError("fill_feature_cache needs the feature cache: call enable_feature_cache() first")
        was_training = self.backbone.training
        self.backbone.eval()
        pad = getattr(self.config.backbone_config, "pad_token_id", None) or 0
        self.feature_cache.fill(self._run_backbone, examples, pad, self.backbone.device, batch_size, progress)
        self.backbone.train(was_training)

    def _run_backbone(self, input_ids, attention_mask, token_type_ids, position_ids=None, kernel_options=None):
        """z_0..z_L, with z_L the backbone's own output (for an ELC-BERT `weighted_output` backbone that is its
        output mixture, not the last block's state)."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if kernel_options is not None:  # FlexAttention's: ELC-BERT and transformers' own encoders take them alike
            kwargs["kernel_options"] = kernel_options
        output = self.backbone(input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        return [*output.hidden_states[:-1], output.last_hidden_state]

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        output_hidden_states=None,
        positions=None,
        position_ids=None,
        **kwargs,
    ) -> LayerFusionOutput:
        """input_ids, attention_mask: B x T (1 = real token). Per-token fusions skip the padding of a padded batch:
        there the fused states (and depth weights) are zero.

        positions: B x T bool, optional: the only positions whose fused states are wanted (a loss that reads the
        labelled tokens only). Then `last_hidden_state` is N x D and `depth_weights` N x S for those N positions in
        row-major order, and per-token fusions compute nothing elsewhere.

        position_ids: handed to the backbone (an ELC-BERT reads restarting ones as packed sequences and keeps them
        apart, in Base+n's extra blocks too; the BERT family reads them as absolute positions).

        kernel_options (a keyword): FlexAttention's kernel options, handed to the backbone and Base+n's extra blocks
        under `attn_implementation="flex_attention"` (see `ElcBertModel.forward`).

        output_hidden_states: a flag, an index or a list of indices (default `config.output_hidden_states`): see
        `LayerFusionOutput.hidden_states`."""
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        want_states = wants_hidden_states(output_hidden_states)
        real = attention_mask.bool() if attention_mask is not None else None
        wanted = positions if positions is not None else real
        # Fusing per token, only the wanted tokens need work: a batch of short and long sentences is mostly padding.
        # The hidden states keep the B x T layout, so asking for them turns this off.
        pack = wanted is not None and FUSIONS[self.config.fusion].per_token and not (bool(wanted.all()) or want_states)
        kernel_options = kwargs.get("kernel_options")
        states = self.backbone_states(
            input_ids,
            attention_mask,
            token_type_ids,
            positions=wanted if pack else None,
            position_ids=position_ids,
            kernel_options=kernel_options,
        )
        fused, depth_weights = self.fusion(states, attention_mask, self.backbone, position_ids, kernel_options)
        if pack and positions is None:  # back to B x T
            fused = _unpack(fused, wanted)
            depth_weights = _unpack(depth_weights, wanted) if depth_weights is not None else None
        hidden_states = select_hidden_states([*states, fused], output_hidden_states) if want_states else None
        if not pack and positions is not None:  # computed at every position: keep the wanted ones
            fused = fused[positions]
            depth_weights = depth_weights[positions] if depth_weights is not None else None
        return LayerFusionOutput(last_hidden_state=fused, depth_weights=depth_weights, hidden_states=hidden_states)

    @torch.inference_mode()
    def mean_depth_weights(self, batches) -> list[float]:
        """DWAtt's depth profile: its weights over the S fused states (z_0 first when `fuse_embeddings`) averaged over
        the real tokens of `batches`, dicts holding `input_ids` and `attention_mask` (B x T; other keys are ignored).
        Runs in the model's current mode (call `eval()` first for the deterministic profile)."""
        if not FUSIONS[self.config.fusion].depth_weights:
            kinds = " or ".join(f"fusion={kind!r}" for kind, fusion in FUSIONS.items() if fusion.depth_weights)
            raise InputError(f"mean_depth_weights needs {kinds}, not {self.config.fusion!r}")
        total, count = 0.0, 0
        for batch in batches:
            input_ids, attention_mask = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
            real = attention_mask.bool()
            weights = self(input_ids, attention_mask=attention_mask, positions=real).depth_weights  # N x S
            total = total + weights.float().sum(0)
            count += int(real.sum())
        return (total / count).tolist()


def _unpack(packed: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """N x ... values of the real tokens back into B x T x ..., zeros at padding."""
    out = packed.new_zeros(real.shape + packed.shape[1:])
    out[real] = packed
    return out


class LayerFusionForTokenClassification(LayerFusionPreTrainedModel):
    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.layer_fusion = LayerFusionModel(config, backbone=backbone)
        self.dropout = nn.Dropout(config.head_dropout)
        self.classifier = nn.Linear(config.backbone_config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs
    ) -> TokenClassifierOutput:
        """labels: B x T, -100 where not scored. Returns B x T x num_labels logits. In training mode with labels, the
        loss reads the labelled positions only, so only they go through the fusion and the classifier (the few-shot
        protocol labels first sub-tokens: about 2 in 3 real tokens); the logits elsewhere are then zero.

        In every head, `kwargs` are those of `LayerFusionModel.forward` (`output_hidden_states`: the hidden states
        of `LayerFusionOutput`) and the loss's (the Trainer's `num_items_in_batch`)."""
        scored = labels != -100 if labels is not None and self.training else None
        outputs = self.layer_fusion(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, positions=scored, **kwargs
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels if scored is None else labels[scored], self.config, **kwargs)
        if scored is not None:
            logits = _unpack(logits, scored)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class LayerFusionForSequenceClassification(LayerFusionPreTrainedModel):
    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.layer_fusion = LayerFusionModel(config, backbone=backbone)
        self.dropout = nn.Dropout(config.head_dropout)
        self.classifier = nn.Linear(config.backbone_config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs
    ) -> SequenceClassifierOutput:
        """Classifies each sequence from the fused state of its first token. labels: B (or B x num_labels)."""
        outputs = self.layer_fusion(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state[:, 0]))
        loss = None
        if labels is not None:
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config, **kwargs)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class LayerFusionForMaskedLM(LayerFusionPreTrainedModel):
    """Fused states through the backbone's own MLM head (BERT's, RoBERTa's, ELC-BERT's), tied to its embeddings
    unless `config.tie_word_embeddings` is False.

    backbone: optional, an already built (e.g. pretrained) masked LM of the backbone's kind whose config is
    `config.backbone_config`: its base model becomes the backbone and its head `lm_head`."""

    _backbone_auto_class = AutoModelForMaskedLM

    def __init__(self, config: LayerFusionConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        masked_lm = backbone if backbone is not None else build_backbone(config.backbone_config, AutoModelForMaskedLM)
        if not config.tie_word_embeddings:
            _untie(masked_lm)
        self.layer_fusion = LayerFusionModel(config, backbone=masked_lm.base_model)
        head_name = _head_name(masked_lm)
        self.lm_head = getattr(masked_lm, head_name)
        # The backbone's own tying, renamed: "cls.x" -> "lm_head.x", "bert.y" -> "layer_fusion.backbone.y". The
        # library applies it only while `config.tie_word_embeddings` holds.
        rename = {head_name: "lm_head", masked_lm.base_model_prefix: "layer_fusion.backbone"}

        def renamed(key):
            first, _, rest = key.partition(".")
            return f"{rename[first]}.{rest}" if first in rename else key

        tied = masked_lm._tied_weights_keys or {}
        if isinstance(tied, dict):
            self._tied_weights_keys = {renamed(target): renamed(source) for target, source in tied.items()}
        else:  # transformers < 5 (remote code loaded there) lists the tied weights without their sources
            self._tied_weights_keys = [renamed(target) for target in tied]
        self._decoder_name = renamed(_output_embedding_name(masked_lm)).removeprefix("lm_head.")
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.get_submodule(self._decoder_name)

    def set_output_embeddings(self, new_embeddings):
        parent, _, name = self._decoder_name.rpartition(".")
        setattr(self.lm_head.get_submodule(parent) if parent else self.lm_head, name, new_embeddings)
        # BERT's and RoBERTa's heads keep a second vocab-sized bias, the one their decoder's bias is tied to: it
        # follows a resized decoder (as in their own `set_output_embeddings`), or the reloaded checkpoint would not
        # fit. A copy, so that an untied model saves both; tying shares them again.
        for target, source in self._tied_weights_keys.items():
            if target == f"lm_head.{self._decoder_name}.bias" and new_embeddings.bias is not None:
                module_name, _, bias_name = source.rpartition(".")
                bias = nn.Parameter(new_embeddings.bias.detach().clone(), new_embeddings.bias.requires_grad)
                setattr(self.get_submodule(module_name), bias_name, bias)

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs
    ) -> MaskedLMOutput:
        """labels: B x T, -100 where not scored. As in `ElcBertForMaskedLM`, with labels the head runs on the
        labelled positions only and `logits` is N x V for those N positions; without, logits are B x T x V."""
        outputs = self.layer_fusion(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, **kwargs)
        if labels is None:
            logits = self.lm_head(outputs.last_hidden_state)
            return MaskedLMOutput(logits=logits, hidden_states=outputs.hidden_states)
        scored = labels != -100
        logits = self.lm_head(outputs.last_hidden_state[scored])
        loss = self.loss_function(logits, labels[scored], vocab_size=logits.shape[-1], **kwargs)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


def _untie(masked_lm: PreTrainedModel):
    """Gives each weight that the masked LM ties to another (its decoder's, and BERT's decoder bias) a copy of its
    own: the masked LM ties them when built if its own config says so, and a fusion model that unties them must save
    and train them apart."""
    for target, source in masked_lm.get_expanded_tied_weights_keys().items():
        module_name, _, name = target.rpartition(".")
        module = masked_lm.get_submodule(module_name)
        setattr(module, name, nn.Parameter(masked_lm.get_parameter(source).detach().clone()))


def _head_name(masked_lm: PreTrainedModel) -> str:
    """The attribute holding a masked LM's head: its one child that is not the base model."""
    names = [name for name, _ in masked_lm.named_children() if name != masked_lm.base_model_prefix]
    if len(names) != 1:
        raise InputError(f"cannot tell the MLM head of {type(masked_lm).__name__} among {names}")
    return names[0]


def _output_embedding_name(masked_lm: PreTrainedModel) -> str:
    decoder = masked_lm.get_output_embeddings()
    return next(name for name, module in masked_lm.named_modules() if module is decoder)


# As in modeling_elc_bert.py: each model class's Auto class, for the code `save_pretrained` writes next to the
# weights.
AUTO_CLASSES = {
    AutoModel: LayerFusionModel,
    AutoModelForMaskedLM: LayerFusionForMaskedLM,
    AutoModelForSequenceClassification: LayerFusionForSequenceClassification,
    AutoModelForTokenClassification: LayerFusionForTokenClassification,
}
for _auto_class, _model_class in AUTO_CLASSES.items():
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = [
    "LayerFusionModel",
    "LayerFusionPreTrainedModel",
    "LayerFusionForTokenClassification",
    "LayerFusionForSequenceClassification",
    "LayerFusionForMaskedLM",
    "LayerFusionOutput",
    "FusionModule",
    "LastLayer",
    "LayerAverage",
    "DepthWiseAttention",
    "ConcatFusion",
    "ExtraLayers",
    "FeatureCache",
]
