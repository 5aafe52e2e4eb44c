"""ELC-BERT (Every Layer Counts BERT) and its LTG-BERT backbone.

Written from the equations of the ELC-BERT paper, arXiv 2311.02265, and LTG-BERT's, arXiv 2303.09859. Tensors are
batch-first: B x T x D. The relative-position terms enter `scaled_dot_product_attention` as an additive bias built from
one bucket table shared by all layers.
"""

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .autograd_functions import GatedNorm, RelativeBias, WeightedSum
from .configuration_elc_bert import ElcBertConfig
from .errors import InputError
from .layer_plans import check_layer_plan, run_layer_plan
from .transformers_compat import (
    ALL_ATTENTION_FUNCTIONS,
    GradientCheckpointingLayer,
    PreTrainedModel,
    can_return_tuple,
    create_bidirectional_mask,
    init,
    resolve_hidden_states_indices,
    selected_hidden_states,
)


def relative_position_buckets(length: int, bucket_size: int, max_position: int, device=None) -> torch.Tensor:
    """T x T table of bucket indices delta(i, j) in [0, 2P-2] for query i and key j.

    Exact up to |i - j| = P/2, logarithmic up to M - 1; longer distances are clamped at M - 1.
    """
    position = torch.arange(length, device=device)
    relative = position[:, None] - position[None, :]
    mid = bucket_size // 2
    distance = relative.abs().clamp(max=max_position - 1)
    log_ratio = torch.log(distance.float() / mid) / torch.log(torch.tensor((max_position - 1) / mid, device=device))
    log_bucket = mid + torch.ceil(log_ratio * (mid - 1)).long()
    bucket = torch.where(distance <= mid, relative, torch.sign(relative) * log_bucket)
    return bucket + bucket_size - 1


class ElcBertEmbeddings(nn.Module):
    """Word embeddings (LN without affine, no positions) and the normalised relative-position table."""

    def __init__(self, config: ElcBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.word_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.relative_embedding = nn.Parameter(torch.empty(2 * config.position_bucket_size - 1, config.hidden_size))
        self.relative_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, input_ids=None, inputs_embeds=None):
        """Returns y_0 (B x T x D)."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        return self.dropout(self.word_layer_norm(inputs_embeds))

    def relative_table(self) -> torch.Tensor:
        """The normalised relative-position table R~ ((2P-1) x D) that every block reads."""
        return self.relative_layer_norm(self.relative_embedding)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + position_bias + mask) v with an explicit softmax (the `"eager"` implementation).

    query, key, value: B x H x T x d; position_bias: B x H x T x T; attention_mask: B x 1 x T x T (or broadcastable),
    boolean (True = attend) or additive. Returns the context (B x T x H x d) and the attention probabilities
    (B x H x T x T), the very tensor the context is computed from.
    """
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    context = torch.matmul(F.dropout(weights, p=dropout, training=module.training), value)
    return context.transpose(1, 2).contiguous(), weights


# Shared memory per block that FlexAttention's compiled kernel asked for at its default configuration, in bf16 with
# heads of 64 (Inductor's "Required: 245760" on an H100 with torch 2.11, docs/benchmarks.md).
FLEX_DEFAULT_SHARED_MEMORY = 245_760


def flex_kernel_options(device: torch.device) -> dict | None:
    """The FlexAttention kernel options that fit `device` when the caller gives none: its defaults (None) off CUDA and
    on a GPU whose opt-in shared memory per block holds the default configuration; else one pipeline stage
    (`{"num_stages": 1}`), which holds the kernel's tiles once instead of twice."""
    if device.type != "cuda":
        return None
    properties = torch.cuda.get_device_properties(device)
    if getattr(properties, "shared_memory_per_block_optin", 0) >= FLEX_DEFAULT_SHARED_MEMORY:
        return None
    return {"num_stages": 1}


def relative_flex_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block_mask,
    scaling: float,
    content_to_position: torch.Tensor,
    position_to_content: torch.Tensor,
    position_buckets: torch.Tensor,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """The `"flex_attention"` implementation: `torch.nn.attention.flex_attention` with the disentangled relative bias as
    its `score_mod`, read from the two H x B x T(2P-1) tables (row-major T x (2P-1) per head and input) at each pair's
    flat indices (`ElcBertModel.position_buckets`; no B x H x T x T bias is made), and padding (and packed samples) as
    its block mask (`ElcBertModel.block_inputs` makes it; None: attend to all).

        score(i, j) = q_i . k_j * scaling + content_to_position[i, delta(i, j)] + position_to_content[j, delta(i, j)]

    FlexAttention has no attention dropout: training with `attention_probs_dropout_prob` > 0 is refused.
    `kernel_options` go to `flex_attention` as they are (None: `flex_kernel_options`, what fits the device). Returns
    the context, B x T x H x d."""
    from torch.nn.attention.flex_attention import flex_attention

    if module.training and module.config.attention_probs_dropout_prob > 0:
        raise InputError(
            'attn_implementation="flex_attention" has no attention dropout: train with '
            "attention_probs_dropout_prob=0, or with sdpa"
        )

    length = query.shape[2]

    def score_mod(score, batch, head, query_index, key_index):
        relative = (
            content_to_position[head, batch, position_buckets[0, query_index * length + key_index]]
            + position_to_content[head, batch, position_buckets[1, query_index * length + key_index]]
        )
        return score + relative

    if kernel_options is None:
        kernel_options = flex_kernel_options(query.device)
    context = flex_attention(
        query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scaling, kernel_options=kernel_options
    )
    return context.transpose(1, 2).contiguous()


def as_block_mask(mask: torch.Tensor, batch_size: int, length: int):
    """A FlexAttention block mask of a boolean or additive B x 1 x T x T (or B x 1 x 1 x T) mask tensor."""
    from torch.nn.attention.flex_attention import create_block_mask

    keep = (mask if mask.dtype == torch.bool else mask == 0).expand(batch_size, 1, length, length)
    return create_block_mask(
        lambda batch, head, query_index, key_index: keep[batch, 0, query_index, key_index],
        batch_size,
        None,
        length,
        length,
        device=mask.device,
    )


# What `DataCollatorWithFlattening` can give in place of position_ids (FlashAttention's and Mamba's markers).
PACKING_MARKERS = ("cu_seq_lens_q", "cu_seq_lens_k", "seq_idx")


def packed_sequence_mask(position_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The B x 1 x T x T boolean mask (True: attend) of rows that hold several sequences one after the other, told
    apart by `position_ids` (B x T or 1 x T) as `transformers.DataCollatorWithFlattening` makes them: a sequence starts
    wherever a position is not the one before plus 1. Each token attends to the real tokens (`attention_mask`, B x T,
    1 = real; None: all) of its own sequence; a padding token, to every real token (so only a row of padding alone
    attends to nothing). Built on the device without reading a value on the host. The mask is T x T per row: packing
    a whole batch into one row makes attention quadratic in the batch's tokens, so pack into rows of bounded length."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    sequence = starts.cumsum(-1)
    keep = sequence[:, :, None] == sequence[:, None, :]
    if attention_mask is not None:
        real = attention_mask.bool()
        keep = (keep | ~real[:, :, None]) & real[:, None, :]
    return keep[:, None]


class ElcBertAttention(nn.Module):
    """Pre-norm disentangled self-attention: content-content plus content-position and position-content terms.

    The two positional terms form a B x H x T x T bias added to the scores; the attention itself runs through the
    implementation named by `config._attn_implementation`: `"eager"` (explicit softmax, returns the probabilities),
    `"sdpa"` (`torch.nn.functional.scaled_dot_product_attention` with the bias as its float mask) or
    `"flex_attention"` (`relative_flex_attention`: the terms as a score_mod over bucket indices, no dense bias).
    FlashAttention-2 takes no bias at all and cannot compute these scores: it is not offered.
    """

    is_causal = False

    def __init__(self, config: ElcBertConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = 1.0 / math.sqrt(3 * self.head_dim)
        self.interleaved = config.positional_split == "interleaved"
        self.pre_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.in_proj_qk = nn.Linear(config.hidden_size, 2 * config.hidden_size)
        self.in_proj_v = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, hidden_states, relative_embedding, position_buckets, attention_mask=None, **kwargs):
        """hidden_states: B x T x D; relative_embedding: (2P-1) x D; position_buckets: 2 x B x H x T^2, where the two
        positional terms of each pair lie in the T x (2P-1) relative scores of each head and input
        (`ElcBertModel.position_buckets`); attention_mask: the mask of `ElcBertModel.block_inputs` (a B x 1 x T x T
        or B x 1 x 1 x T tensor, a FlexAttention BlockMask, or None).

        Returns the sublayer output (B x T x D) and the attention probabilities (B x H x T x T; None from "sdpa").
        """
        kernel_options = kwargs.pop("kernel_options", None)  # FlexAttention's; the other implementations take none
        batch, length, width = hidden_states.shape
        heads, head_dim = self.num_heads, self.head_dim
        h = self.pre_layer_norm(hidden_states)
        # The content query and key, one projection: its columns (query|key, head, d) as 2 x B x H x T x d
        qk = self.in_proj_qk(h).view(batch, length, 2, heads, head_dim)
        query, key = qk.permute(2, 0, 3, 1, 4).unbind(0)  # each B x H x T x d, views
        value = self.in_proj_v(h).view(batch, length, heads, head_dim).transpose(1, 2)  # B x H x T x d

        # The positional query/key reuse W_qk and b_qk on the (2P-1) rows of the relative table; the scaling is
        # applied to this small table rather than to the B x H x T x T bias.
        position = self.in_proj_qk(self.dropout(relative_embedding)) * self.scaling
        buckets = position.shape[0]
        # 2H x d x (2P-1), (key|query, head): each kind of content vector meets the other kind's positions
        if self.interleaved:
            position = position.view(buckets, heads, 2, head_dim).flip(2).permute(2, 1, 3, 0)
        else:
            position = position.view(buckets, 2, heads, head_dim).flip(1).permute(1, 2, 3, 0)
        position = position.reshape(2 * heads, head_dim, buckets)
        # Both terms in one matrix product of views (nothing copied; autograd keeps a view of the projection, which
        # it keeps for the attention anyway): [query . key_position, key . query_position], 2H x BT x (2P-1), read as
        # 2 x H x B x T(2P-1).
        content = qk.permute(2, 3, 0, 1, 4).reshape(2 * heads, batch * length, head_dim)
        relative = torch.bmm(content, position).view(2, heads, batch, length * buckets)
        if self.config._attn_implementation == "flex_attention":
            context = relative_flex_attention(
                self,
                query,
                key,
                value,
                attention_mask,
                self.scaling,
                *relative.unbind(0),
                position_buckets[:, 0, 0],
                kernel_options,
            )
            context = context.reshape(batch, length, width)
            return self.dropout(self.post_layer_norm(self.out_proj(context))), None
        # [i, j] <- row i at delta(i, j) (content-to-position) plus row j at delta(i, j) (position-to-content)
        bias = RelativeBias.apply(relative, position_buckets).view(batch, heads, length, length)

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        context, probabilities = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout.p if self.training else 0.0,
            scaling=self.scaling,
            position_bias=bias.to(query.dtype),
            **kwargs,
        )
        context = context.reshape(batch, length, width)
        return self.dropout(self.post_layer_norm(self.out_proj(context))), probabilities


class ElcBertFeedForward(nn.Module):
    """GeGLU feed-forward with an inner LayerNorm and no biases."""

    def __init__(self, config: ElcBertConfig, layer_idx: int):
        super().__init__()
        self.pre_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.inner_layer_norm = nn.LayerNorm(config.intermediate_size, config.layer_norm_eps, elementwise_affine=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Deeper layers start with smaller feed-forward weights (applied in `_init_weights`).
        self.up_proj.init_scale = self.down_proj.init_scale = math.sqrt(1.0 / (2.0 * (layer_idx + 1)))

    def forward(self, hidden_states):
        """Eager, the GELU, the product and the inner LN are `GatedNorm` (which keeps fewer activations; the inner LN
        module's own forward, and so its hooks, do not run); compiled, the same written out, for Inductor's
        partitioner to choose what to keep and what to recompute."""
        up = self.up_proj(self.pre_layer_norm(hidden_states))
        norm = self.inner_layer_norm
        if type(norm) is nn.LayerNorm and not norm.elementwise_affine and not torch.compiler.is_compiling():
            gated = GatedNorm.apply(up, norm.eps)
        else:
            value, gate = up.chunk(2, dim=-1)
            gated = norm(value * F.gelu(gate, approximate="tanh"))
        return self.dropout(self.down_proj(gated))


class ElcBertLayer(GradientCheckpointingLayer):
    """One block. With `layer_combination="elc"` it returns the update y_n; with `"residual"` the new stream."""

    def __init__(self, config: ElcBertConfig, layer_idx: int):
        super().__init__()
        self.residual = config.layer_combination == "residual"
        self.variant = config.elc_variant
        self.attention = ElcBertAttention(config)
        self.mlp = ElcBertFeedForward(config, layer_idx)
        if not self.residual:
            # theta^(n) of block n = layer_idx + 1: one logit per earlier state y_0..y_{n-1}.
            self.prev_layer_weights = nn.Parameter(torch.zeros(layer_idx + 1))
            if self.variant == "normalized":
                self.output_layer_norm = nn.LayerNorm(
                    config.hidden_size, config.layer_norm_eps, elementwise_affine=False
                )

    def forward(self, hidden_states, relative_embedding, position_buckets, attention_mask=None, **kwargs):
        """hidden_states: B x T x D, the block's input (ELC: its mixture of the earlier states). Returns the block's
        output (B x T x D) and its attention probabilities (B x H x T x T, None from "sdpa")."""
        attention, probabilities = self.attention(
            hidden_states, relative_embedding, position_buckets, attention_mask, **kwargs
        )
        if self.residual:
            hidden_states = hidden_states + attention
            return hidden_states + self.mlp(hidden_states), probabilities
        if self.variant == "base":
            return attention + self.mlp(attention), probabilities
        output = attention + self.mlp(hidden_states + attention)
        if self.variant == "normalized":
            output = self.output_layer_norm(output)
        return output, probabilities


class LayerStack:
    """The states y_0, y_1, ... of one forward pass (slot n holds y_n) and the mixtures sum_i alpha_i y_i that the
    blocks read: `write(n, y_n)` fills a slot; `mix(logits)` returns the mixture of the filled slots among the first
    len(logits), with alpha the softmax of their logits (renormalised over the filled ones when some are empty: a
    layer plan may skip a block). Eager, each mixture is one matrix-vector product (`WeightedSum`), forward and
    backward: a few large operations in place of two per state; under `torch.compile`, the plain weighted sum, which
    Inductor fuses into one kernel.
    """

    def __init__(self, first: torch.Tensor):
        """first: y_0 (B x T x D)."""
        self.states = {0: first}

    def write(self, slot: int, state: torch.Tensor) -> None:
        """Fills `slot` with `state` (B x T x D), or replaces what a block run before left there."""
        self.states[slot] = state

    def mix(self, logits: torch.Tensor) -> torch.Tensor:
        """sum_i softmax(logits)_i y_i over the filled slots i < len(logits) (B x T x D)."""
        filled = [slot for slot in sorted(self.states) if slot < len(logits)]
        weights = torch.softmax(logits if len(filled) == len(logits) else logits[filled], dim=0, dtype=torch.float32)
        states = [self.states[slot] for slot in filled]
        weights = weights.to(states[0].dtype)
        if not torch.compiler.is_compiling():
            return WeightedSum.apply(weights, *states)
        # Compiled, the sum written out is one fused kernel that reads each state once (the stack would be copied)
        mixed = weights[0] * states[0]
        for weight, state in zip(weights[1:], states[1:]):
            mixed = mixed + weight * state
        return mixed


class ElcBertEncoder(nn.Module):
    """The blocks, each once in order, or as the layer plan of `use_layer_plan` says (`layer_plans.py`: blocks
    skipped, reordered, repeated or run in parallel).

    ELC: block n reads its mixture of the states before it (`LayerStack`); LTG-BERT: the blocks continue the residual
    stream.
    """

    def __init__(self, config: ElcBertConfig):
        super().__init__()
        self.elc = config.layer_combination == "elc"
        self.layers = nn.ModuleList(ElcBertLayer(config, i) for i in range(config.num_hidden_layers))
        if self.elc and config.elc_variant == "weighted_output":
            self.output_layer_weights = nn.Parameter(torch.zeros(config.num_hidden_layers + 1))
        self.layer_plan = None  # None: every block once, in order; else the steps set by `use_layer_plan`

    @contextlib.contextmanager
    def use_layer_plan(self, plan: list):
        """Runs the blocks as `plan` says inside the `with` block: a list of steps, each a block index or a `Parallel`
        group (`layer_plans.run_layer_plan`). Weights and modules stay as they are; on leaving, the encoder runs as
        before."""
        check_layer_plan(plan, len(self.layers))
        previous, self.layer_plan = self.layer_plan, list(plan)
        try:
            yield self
        finally:
            self.layer_plan = previous

    def forward(
        self,
        embeddings,
        relative_embedding,
        position_buckets,
        attention_mask=None,
        output_attentions=False,
        output_hidden_states=False,
        kernel_options=None,
    ):
        """embeddings: y_0 (B x T x D); attention_mask: the mask of `ElcBertModel.block_inputs`; kernel_options:
        FlexAttention's, for every block.

        Returns the model output, the states y_0..y_L (ELC) or the stream after each block (LTG-BERT; with
        `output_hidden_states`; under a layer plan, the output of each step), and the attention probabilities of each
        block run (with `output_attentions`)."""
        stack = LayerStack(embeddings) if self.elc else None
        block_inputs = (relative_embedding, position_buckets, attention_mask)
        if self.layer_plan is not None:
            output, states, attentions = run_layer_plan(
                self.layers,
                self.layer_plan,
                stack,
                embeddings,
                block_inputs,
                output_attentions,
                output_hidden_states,
                kernel_options,
            )
        else:
            output, states, attentions = embeddings, [embeddings], []
            for index, layer in enumerate(self.layers):
                hidden_states = stack.mix(layer.prev_layer_weights) if self.elc else output
                output, probabilities = layer(
                    hidden_states, *block_inputs, output_attentions=output_attentions, kernel_options=kernel_options
                )
                if self.elc:
                    stack.write(index + 1, output)
                if probabilities is not None:  # "sdpa" computes none (and warns when they are asked for)
                    attentions.append(probabilities)
                if output_hidden_states:
                    states.append(output)
        if hasattr(self, "output_layer_weights"):
            output = stack.mix(self.output_layer_weights)
        return output, states, attentions


class ElcBertLMHead(nn.Module):
    """LN -> dense -> GELU -> LN -> dropout -> decoder (tied to the word embeddings)."""

    def __init__(self, config: ElcBertConfig):
        super().__init__()
        self.pre_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, hidden_states):
        hidden_states = self.post_layer_norm(F.gelu(self.dense(self.pre_layer_norm(hidden_states))))
        return self.decoder(self.dropout(hidden_states))


class ElcBertClassificationHead(nn.Module):
    """The fine-tuning head of the reference: LN -> dense -> GELU -> LN -> dropout -> n outputs."""

    def __init__(self, config: ElcBertConfig, num_outputs: int):
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.pre_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_layer_norm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=False)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, hidden_states):
        hidden_states = self.post_layer_norm(F.gelu(self.dense(self.pre_layer_norm(hidden_states))))
        return self.out_proj(self.dropout(hidden_states))


class ElcBertPreTrainedModel(PreTrainedModel):
    config: ElcBertConfig
    base_model_prefix = "elc_bert"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True  # relative_flex_attention
    _no_split_modules = ["ElcBertLayer"]
    # A model reads the backbone and its own head of a checkpoint; another task's head stays unused without a
    # warning. `position_indices` are the bucket tables the reference checkpoints store (recomputed here).
    _keys_to_ignore_on_load_unexpected = [r"position_indices", r"^lm_head\."]

    @torch.no_grad()
    def _init_weights(self, module):
        std = math.sqrt(2.0 / (5.0 * self.config.hidden_size))
        if isinstance(module, nn.Linear):
            module_std = std * getattr(module, "init_scale", 1.0)
            init.trunc_normal_(module.weight, mean=0.0, std=module_std, a=-2 * module_std, b=2 * module_std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
        elif isinstance(module, nn.LayerNorm) and module.weight is not None:
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ElcBertEmbeddings):
            init.trunc_normal_(module.relative_embedding, mean=0.0, std=std, a=-2 * std, b=2 * std)
        elif isinstance(module, ElcBertLayer) and hasattr(module, "prev_layer_weights"):
            logits = torch.zeros_like(module.prev_layer_weights)
            if module.variant == "base":
                logits[-1] = 1.0  # lean on the immediate predecessor at the start
            init.copy_(module.prev_layer_weights, logits)
        elif isinstance(module, ElcBertEncoder) and hasattr(module, "output_layer_weights"):
            init.zeros_(module.output_layer_weights)
        elif isinstance(module, ElcBertModel):
            table = module.position_bucket_table
            init.copy_(table, module._bucket_table(table.shape[0], table.device))

    def layer_weights(self) -> torch.Tensor:
        """The ELC alpha matrix, L x (L+1): row n-1 holds softmax(theta^(n)) over y_0..y_{n-1}, zeros after."""
        encoder = self.base_model.encoder
        if not encoder.elc:
            raise InputError("layer_weights() needs an ELC model (config.layer_combination='elc')")
        num_layers = len(encoder.layers)
        alpha = torch.zeros(num_layers, num_layers + 1)
        for n, layer in enumerate(encoder.layers):
            alpha[n, : n + 1] = torch.softmax(layer.prev_layer_weights.detach().float().cpu(), dim=0)
        return alpha


class ElcBertModel(ElcBertPreTrainedModel):
    """The bare encoder. `last_hidden_state` is y_L (ELC), the weighted output mixture (`weighted_output`) or the
    residual stream (LTG-BERT); `hidden_states` are y_0..y_L (ELC) or the stream after each block (LTG-BERT)."""

    _keys_to_ignore_on_load_unexpected = [r"position_indices", r"^(lm_head|classifier)\."]

    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.embeddings = ElcBertEmbeddings(config)
        self.encoder = ElcBertEncoder(config)
        # The M x M bucket table shared by all layers (a bucket depends on i - j only: its top-left T x T corner
        # serves every input of T <= M tokens). Not saved: `_init_weights` computes it.
        self.register_buffer("position_bucket_table", self._bucket_table(config.max_position_embeddings), False)
        self.post_init()

    def _bucket_table(self, length: int, device=None) -> torch.Tensor:
        config = self.config
        return relative_position_buckets(length, config.position_bucket_size, config.max_position_embeddings, device)

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def position_buckets(self, batch_size: int, length: int, device) -> torch.Tensor:
        """Where the two positional terms of the pair (i, j) of B inputs of T tokens (longer than M: computed for that
        length) lie in a block's T x (2P-1) relative scores of each head and input (`ElcBertAttention`), as flat
        indices: [0, ., iT + j] = i (2P-1) + delta(i, j) (content-to-position) and [1, ., iT + j] = j (2P-1) +
        delta(i, j) (position-to-content); 2 x T^2, expanded (a view) to the 2 x B x H x T^2 that `RelativeBias`
        takes."""
        if length <= self.position_bucket_table.shape[0]:
            table = self.position_bucket_table[:length, :length]
        else:
            table = self._bucket_table(length, device)
        rows = torch.arange(length, device=table.device) * (2 * self.config.position_bucket_size - 1)
        index = torch.stack((table + rows[:, None], table + rows[None, :])).view(2, 1, 1, length * length)
        return index.expand(2, batch_size, self.config.num_attention_heads, length * length)

    def embed(self, input_ids=None, inputs_embeds=None) -> torch.Tensor:
        """y_0 of the ids (or of `inputs_embeds`). Ids outside the vocabulary raise an InputError naming one on the
        CPU (where the lookup raises IndexError) and a device-side assert with the same words elsewhere: no host
        read of the ids either way, so an eager forward on CUDA never waits for the device here."""
        if input_ids is None or torch.compiler.is_compiling():
            return self.embeddings(input_ids, inputs_embeds)
        vocab_size = self.config.vocab_size
        if input_ids.device.type != "cpu":
            within = ((input_ids >= 0) & (input_ids < vocab_size)).all()
            torch._assert_async(within, f"input_ids outside the vocabulary of {vocab_size} tokens")
        try:
            return self.embeddings(input_ids, inputs_embeds)
        except IndexError:
            raise out_of_vocabulary(input_ids, vocab_size) from None

    def block_inputs(self, hidden_states: torch.Tensor, attention_mask=None, position_ids=None) -> tuple:
        """What every block reads besides its input, for B x T x D `hidden_states`, a B x T `attention_mask` (1 for
        real tokens, or None) and `position_ids` (B x T or 1 x T, or None): the normalised relative-position table R~
        ((2P-1) x D), the bucket tables (`position_buckets`) and the attention mask: `create_bidirectional_mask`'s, or
        with `position_ids` the `packed_sequence_mask` (positions only tell packed sequences apart: attention is
        relative). Blocks stacked on this model's states (Base+n) read the same."""
        if position_ids is not None:
            mask = packed_sequence_mask(position_ids.to(hidden_states.device), attention_mask)
        else:
            mask = create_bidirectional_mask(self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        if self.config._attn_implementation == "flex_attention" and isinstance(mask, torch.Tensor):
            mask = as_block_mask(mask, *hidden_states.shape[:2])
        buckets = self.position_buckets(*hidden_states.shape[:2], hidden_states.device)
        return self.embeddings.relative_table(), buckets, mask

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,  # accepted for tokenizer output, not used
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """input_ids: B x T; attention_mask: B x T with 1 for real tokens and 0 for padding.

        Positions are relative: `position_ids` (B x T or 1 x T) only mark packed sequences, several in one row as
        `transformers.DataCollatorWithFlattening` makes them (the positions restart at each sequence): each token
        attends to its own sequence alone, so each sequence's outputs are those it has alone. Without them, a row is
        one sequence.

        `output_hidden_states` may be a flag or, as in `transformers`, an index or a list of indices into the L+1
        states (negative ones count from the end): then the states not selected are None.

        `kernel_options` (a keyword, as `transformers`' FlexAttention models take it) go to every
        `torch.nn.attention.flex_attention` call under `attn_implementation="flex_attention"`, and are ignored
        otherwise. Without them the model chooses what fits the device (`flex_kernel_options`: `{"num_stages": 1}`
        where the compiled kernel's default configuration needs more shared memory than the GPU has, as bf16 on an
        H100 with torch 2.11: docs/benchmarks.md)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError("pass exactly one of input_ids and inputs_embeds")
        markers = [name for name in PACKING_MARKERS if kwargs.get(name) is not None]
        if markers and position_ids is None:
            raise InputError(
                f"packed sequences marked by {', '.join(markers)} alone: pass position_ids too "
                "(DataCollatorWithFlattening's default), which mark them for this model"
            )
        check_inputs(
            self.config, input_ids if input_ids is not None else inputs_embeds[..., 0], attention_mask, position_ids
        )
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        embeddings = self.embed(input_ids, inputs_embeds)
        want_states = wants_hidden_states(output_hidden_states)
        last_hidden_state, states, attentions = self.encoder(
            embeddings,
            *self.block_inputs(embeddings, attention_mask, position_ids),
            output_attentions,
            want_states,
            kwargs.get("kernel_options"),
        )
        return BaseModelOutput(
            last_hidden_state=last_hidden_state,
            hidden_states=select_hidden_states(states, output_hidden_states) if want_states else None,
            attentions=tuple(attentions) if output_attentions and attentions else None,
        )


def wants_hidden_states(output_hidden_states) -> bool:
    """Whether `output_hidden_states` asks for any: True, an index (0 included) or a list of indices."""
    return output_hidden_states is not None and output_hidden_states is not False


def select_hidden_states(states: list, output_hidden_states) -> tuple:
    """All of `states`, or for an index or a list of indices (as `transformers` takes them; negative ones count from
    the end, out-of-range ones select nothing) the selected ones and None elsewhere."""
    selected = selected_hidden_states(output_hidden_states)
    if selected is None:
        return tuple(states)
    keep = resolve_hidden_states_indices(None, selected, num_hidden_states=len(states))
    return tuple(state if i in keep else None for i, state in enumerate(states))


def check_inputs(config, input_ids: torch.Tensor, attention_mask=None, position_ids=None) -> None:
    """Raises InputError naming the argument for an empty batch or an attention mask (or position ids) whose shape is
    not the inputs' (B x T; position ids may be 1 x T). Shapes only: no tensor value is read on the host (on CUDA
    that would synchronise every call); ids outside the vocabulary are named when the lookup fails
    (`ElcBertModel.embed`)."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise InputError(f"input_ids must be a non-empty B x T batch, got shape {tuple(input_ids.shape)}")
    check_shape("attention_mask", attention_mask, input_ids)
    if position_ids is not None and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        position_ids = position_ids.expand(input_ids.shape)
    check_shape("position_ids", position_ids, input_ids)


def out_of_vocabulary(input_ids: torch.Tensor, vocab_size: int) -> InputError:
    """The error for ids outside the vocabulary, naming one (read on the host: only once the lookup has failed)."""
    low, high = int(input_ids.min()), int(input_ids.max())
    bad = high if high >= vocab_size else low
    return InputError(f"input_ids holds {bad}, outside the vocabulary of {vocab_size} tokens")


def check_shape(name: str, tensor: torch.Tensor | None, input_ids: torch.Tensor) -> None:
    """Raises ValueError when `tensor` (a mask or per-token labels) is not B x T like `input_ids`."""
    if tensor is not None and tuple(tensor.shape) != tuple(input_ids.shape):
        raise InputError(f"{name} has shape {tuple(tensor.shape)}, input_ids {tuple(input_ids.shape)}")


class ElcBertForMaskedLM(ElcBertPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "elc_bert.embeddings.word_embeddings.weight"}
    _keys_to_ignore_on_load_unexpected = [r"position_indices", r"^classifier\."]

    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.elc_bert = ElcBertModel(config)
        self.lm_head = ElcBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, **kwargs) -> MaskedLMOutput:
        """labels: B x T, -100 where not scored. logits: B x T x V; with `config.sparse_prediction` and labels, the
        head runs on the labelled positions only and `logits` is N x V for those N positions (row-major order).

        In every head, `kwargs` are those of `ElcBertModel.forward` (`output_hidden_states`, ...) and the loss's (the
        Trainer's `num_items_in_batch`)."""
        if input_ids is not None:
            check_shape("labels", labels, input_ids)
        outputs = self.elc_bert(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        sequence_output = outputs.last_hidden_state
        if labels is not None and self.config.sparse_prediction:
            scored = labels != -100
            sequence_output, labels = sequence_output[scored], labels[scored]
        logits = self.lm_head(sequence_output)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ElcBertForSequenceClassification(ElcBertPreTrainedModel):
    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elc_bert = ElcBertModel(config)
        self.classifier = ElcBertClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, **kwargs
    ) -> SequenceClassifierOutput:
        """Classifies each sequence from its first ([CLS]) position. labels: B (class ids, or floats to regress)."""
        outputs = self.elc_bert(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.classifier(outputs.last_hidden_state[:, 0])
        loss = None
        if labels is not None:
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config, **kwargs)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ElcBertForTokenClassification(ElcBertPreTrainedModel):
    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elc_bert = ElcBertModel(config)
        self.classifier = ElcBertClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, **kwargs
    ) -> TokenClassifierOutput:
        """Labels every position. labels: B x T, -100 where not scored; logits: B x T x num_labels."""
        if input_ids is not None:
            check_shape("labels", labels, input_ids)
        outputs = self.elc_bert(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.classifier(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


def multiple_choice_loss(logits, labels, **kwargs) -> torch.Tensor:
    """Cross-entropy of B x C choice logits against B labels, as the library's losses compute it
    (`fixed_cross_entropy`: in float32, -100 ignored, over the Trainer's `num_items_in_batch` where it passes one).
    transformers' `LOSS_MAPPING` has no loss for multiple choice (its own heads call CrossEntropyLoss)."""
    return fixed_cross_entropy(logits.float(), labels.to(logits.device), **kwargs)


class ElcBertForMultipleChoice(ElcBertPreTrainedModel):
    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.elc_bert = ElcBertModel(config)
        self.classifier = ElcBertClassificationHead(config, 1)
        self.post_init()

    @property
    def loss_function(self):
        """`multiple_choice_loss`, or the loss function set on the model (as the other heads' `loss_function`; the
        library's default for a class name it does not know is the causal-LM loss)."""
        return getattr(self, "_loss_function", multiple_choice_loss)

    @loss_function.setter
    def loss_function(self, value):
        self._loss_function = value

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, **kwargs
    ) -> MultipleChoiceModelOutput:
        """input_ids: B x C x T (C choices); one logit per choice from its [CLS] position; labels: B."""
        source = input_ids if input_ids is not None else inputs_embeds
        num_choices = source.shape[1]
        for name in ("token_type_ids", "position_ids"):  # B x C x T, as the inputs
            if kwargs.get(name) is not None and kwargs[name].dim() == 3:
                kwargs[name] = kwargs[name].flatten(0, 1)
        outputs = self.elc_bert(
            input_ids.flatten(0, 1) if input_ids is not None else None,
            attention_mask=attention_mask.flatten(0, 1) if attention_mask is not None else None,
            inputs_embeds=inputs_embeds.flatten(0, 1) if inputs_embeds is not None else None,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state[:, 0]).view(-1, num_choices)
        loss = self.loss_function(logits, labels, **kwargs) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ElcBertForQuestionAnswering(ElcBertPreTrainedModel):
    def __init__(self, config: ElcBertConfig):
        super().__init__(config)
        self.elc_bert = ElcBertModel(config)
        self.classifier = ElcBertClassificationHead(config, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        start_positions=None,
        end_positions=None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        """Extractive QA: start and end logits (B x T) per position; positions outside the input are ignored."""
        outputs = self.elc_bert(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        start_logits, end_logits = self.classifier(outputs.last_hidden_state).unbind(dim=-1)
        loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Each model class's Auto class. `save_pretrained` writes this file (and the ones it imports) next to the weights
# and names it in config.json's `auto_map`: every saved folder loads with `trust_remote_code=True` where this package
# is not installed (`push_to_hub` and the Trainer's pushes included); with the package, its own classes are used
# (`elc_bert.models` registers them with the Auto classes).
AUTO_CLASSES = {
    AutoModel: ElcBertModel,
    AutoModelForMaskedLM: ElcBertForMaskedLM,
    AutoModelForSequenceClassification: ElcBertForSequenceClassification,
    AutoModelForTokenClassification: ElcBertForTokenClassification,
    AutoModelForMultipleChoice: ElcBertForMultipleChoice,
    AutoModelForQuestionAnswering: ElcBertForQuestionAnswering,
}
for _auto_class, _model_class in AUTO_CLASSES.items():
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = [
    "ElcBertPreTrainedModel",
    "ElcBertModel",
    "ElcBertForMaskedLM",
    "ElcBertForSequenceClassification",
    "ElcBertForTokenClassification",
    "ElcBertForMultipleChoice",
    "ElcBertForQuestionAnswering",
    "relative_position_buckets",
]
