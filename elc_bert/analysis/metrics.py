"""What the layers do: the raw layer stream from forward hooks, representation metrics, similarity maps, a task
metric under layer plans (leave-one-out, the Painters sweep) and per-layer weight statistics.

The layer stream h_0..h_T is the input of the first layer and the output of every layer, taken by hooks on the layer
modules (decoders' last `hidden_states` entry comes after the final norm; the hooks see the raw stream). For
ELC-BERT h_n is block n's output y_n. Token-level metrics average over real (non-padding) tokens.
"""

import copy
import math
import random

import numpy as np
import torch
from tqdm.auto import tqdm

from ..models import FUSIONS
from ..models.errors import InputError
from ..pretrained import language_model_kind
from ..scoring import DEFAULT_BATCH_TOKENS, token_pseudo_log_likelihoods
from .interventions import STRATEGIES, apply_layer_plan, layer_modules, num_layers, painters_plan, skip_plan
from .manipulations import tensor_types


def text_batches(tokenizer, sentences: list[str], batch_size: int = 16, max_length: int = 128) -> list[dict]:
    """Padded, truncated batches of `sentences` (CPU tensors)."""
    return [
        dict(
            tokenizer(
                sentences[i : i + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
        )
        for i in range(0, len(sentences), batch_size)
    ]


def _model_inputs(model, batch: dict) -> dict:
    inputs = {key: value.to(model.device) for key, value in batch.items() if key in ("input_ids", "attention_mask")}
    if getattr(model.config, "is_decoder", False) or getattr(model.config, "use_cache", None) is not None:
        inputs["use_cache"] = False  # a repeated layer must not write its KV-cache slot twice
    return inputs


@torch.inference_mode()
def layer_stream(model, batch: dict) -> tuple[list[torch.Tensor], torch.Tensor]:
    """[h_0, ..., h_T] (each N x D over the real tokens of `batch`, float32) and the real-token mask."""
    layers = layer_modules(model)
    states = []

    def keep(output):
        states.append((output[0] if isinstance(output, tuple) else output).float())

    def keep_input(module, args, kwargs):
        keep(args[0] if args else kwargs["hidden_states"])

    handles = [layers[0].register_forward_pre_hook(keep_input, with_kwargs=True)]
    handles += [layer.register_forward_hook(lambda module, args, output: keep(output)) for layer in layers]
    try:
        model(**_model_inputs(model, batch))
    finally:
        for handle in handles:
            handle.remove()
    mask = batch["attention_mask"].bool().to(states[0].device)
    return [state[mask] for state in states], mask


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-8)


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of two N x D representations of the same N tokens: ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)."""
    x, y = x.double() - x.double().mean(0), y.double() - y.double().mean(0)
    cross = (y.T @ x).pow(2).sum()
    return float(cross / ((x.T @ x).norm() * (y.T @ y).norm()))


@torch.inference_mode()
def representation_metrics(model, batches: list[dict]) -> dict:
    """Per layer l (h_l -> h_{l+1}): block influence 1 - cos, angular distance arccos(cos)/pi, relative magnitude
    ||h_{l+1} - h_l|| / ||h_{l+1}|| (= ||f(x)|| / ||f(x) + x|| for a residual block); and the (T+1) x (T+1) maps of
    mean token cosine and linear CKA between all pairs of stream states."""
    streams = [layer_stream(model, batch)[0] for batch in batches]
    stream = [torch.cat([s[i] for s in streams]) for i in range(len(streams[0]))]
    count = len(stream)
    influence, angular, magnitude = [], [], []
    for a, b in zip(stream, stream[1:]):
        cos = _cosine(a, b).clamp(-1, 1)
        influence.append(float(1 - cos.mean()))
        angular.append(float((torch.arccos(cos) / math.pi).mean()))
        magnitude.append(float(((b - a).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-8)).mean()))
    cosine_map = [[float(_cosine(stream[i], stream[j]).mean()) for j in range(count)] for i in range(count)]
    cka_map = [[linear_cka(stream[i], stream[j]) for j in range(count)] for i in range(count)]
    return {
        "block_influence": influence,
        "angular_distance": angular,
        "relative_magnitude": magnitude,
        "cosine_map": cosine_map,
        "cka_map": cka_map,
        "tokens": int(stream[0].shape[0]),
    }


class TaskMetric:
    """The number a plan is judged by, lower is better, on fixed batches:
    - a masked LM: the masked-token loss with fixed masks (15% of the real non-special tokens, seeded; its exp is the
      masked-token perplexity);
    - a causal LM: the next-token loss;
    - an encoder without LM head: representation drift, 1 - cos between the final layer's output under the plan
      and without it (0 for no intervention)."""

    def __init__(self, model, tokenizer, batches: list[dict], seed: int = 0, mask_p: float = 0.15):
        self.model, self.batches = model, batches
        self.relative = True  # changes are reported in % of the unmodified model's value
        self.kind = language_model_kind(model)
        if self.kind == "causal":
            self.name = "next-token loss"
            self.labels = [b["input_ids"].masked_fill(b["attention_mask"] == 0, -100) for b in batches]
        elif self.kind == "masked":
            self.name = "masked-token loss"
            generator = torch.Generator().manual_seed(seed)
            self.labels, self.inputs = [], []
            for batch in batches:
                special = torch.tensor(
                    [
                        tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True)
                        for ids in batch["input_ids"].tolist()
                    ],
                    dtype=torch.bool,
                )
                candidates = batch["attention_mask"].bool() & ~special
                masked = candidates & (torch.rand(candidates.shape, generator=generator) < mask_p)
                self.labels.append(batch["input_ids"].masked_fill(~masked, -100))
                self.inputs.append(batch["input_ids"].masked_fill(masked, tokenizer.mask_token_id))
        else:
            self.name = "representation drift (1 - cos of the final output)"
            self.relative = False
            with torch.inference_mode():
                self.reference = [self._final(batch) for batch in batches]

    def _final(self, batch):
        output = self.model(**_model_inputs(self.model, batch))
        return output.last_hidden_state[batch["attention_mask"].bool().to(self.model.device)].float()

    def loss(self) -> torch.Tensor:
        """The metric as a differentiable scalar tensor (float64), for training against it (recovery); calling the
        metric gives its value without autograd."""
        if self.kind not in ("causal", "masked"):
            drifts = [1 - _cosine(self._final(b), ref) for b, ref in zip(self.batches, self.reference)]
            return torch.cat(drifts).double().mean()
        total, count = 0.0, 0
        for i, batch in enumerate(self.batches):
            inputs = _model_inputs(self.model, batch)
            if hasattr(self, "inputs"):
                inputs["input_ids"] = self.inputs[i].to(self.model.device)
            labels = self.labels[i].to(self.model.device)
            tokens = int((labels[:, 1:] if self.kind == "causal" else labels).ne(-100).sum())
            loss = self.model(**inputs, labels=labels).loss
            total, count = total + loss.double() * tokens, count + tokens
        return total / max(count, 1)

    @torch.inference_mode()
    def __call__(self) -> float:
        return float(self.loss())

    def split(self) -> tuple["TaskMetric", "TaskMetric"]:
        """The metric over alternate sentences of its sample, as two metrics (the same masks; the drift reference
        of each half computed anew): one to train against and one held out to measure on (recovery)."""
        halves = []
        for start in (0, 1):
            part = copy.copy(self)
            rows = [torch.arange(start, len(batch["input_ids"]), 2) for batch in self.batches]
            kept = [i for i, chosen in enumerate(rows) if len(chosen)]
            part.batches = [{key: value[rows[i]] for key, value in self.batches[i].items()} for i in kept]
            for name in ("labels", "inputs"):
                if hasattr(self, name):
                    setattr(part, name, [getattr(self, name)[i][rows[i]] for i in kept])
            if hasattr(self, "reference"):
                with torch.inference_mode():
                    part.reference = [part._final(batch) for batch in part.batches]
            halves.append(part)
        return halves[0], halves[1]

    def for_model(self, model) -> "TaskMetric":
        """The same metric (masks, labels, drift reference) on another model of the same architecture, e.g. a copy."""
        metric = copy.copy(self)
        metric.model = model
        return metric


class PseudoPerplexity:
    """Masked-LM pseudo-perplexity (Salazar et al., 2020): every real non-special token i of every sentence is masked
    once, alone, and PPPL = exp(-sum_i log p(w_i | w_{-i}) / #tokens), the sum being the sentences' pseudo-log-
    likelihoods (`scoring.token_pseudo_log_likelihoods`, BLiMP's scorer). Exact but costs one masked copy
    per token, so use it on a small sample; the masked-token loss of TaskMetric is the cheap alternative. Lower is
    better. `batch_tokens`: the token budget of one forward pass (masked copies x their length)."""

    def __init__(self, model, tokenizer, batches: list[dict], batch_tokens: int = DEFAULT_BATCH_TOKENS):
        if language_model_kind(model) != "masked":
            raise InputError("pseudo-perplexity needs a masked LM (a model with an MLM head)")
        if tokenizer.mask_token_id is None:
            raise InputError("pseudo-perplexity needs a tokenizer with a mask token")
        self.model, self.batch_tokens = model, batch_tokens
        self.mask_id, self.pad_id = tokenizer.mask_token_id, tokenizer.pad_token_id or 0
        self.name, self.relative = "pseudo-perplexity", True
        self.sequences, self.special = [], []  # each sentence's real token ids and their special-token mask
        for batch in batches:
            for ids, attention in zip(batch["input_ids"], batch["attention_mask"]):
                real = ids[attention.bool()].tolist()
                self.sequences.append(real)
                self.special.append(tokenizer.get_special_tokens_mask(real, already_has_special_tokens=True))
        self.tokens = sum(len(mask) - sum(mask) for mask in self.special)

    def __call__(self) -> float:
        pll = token_pseudo_log_likelihoods(
            self.model, self.sequences, self.special, self.mask_id, self.pad_id, self.batch_tokens, progress=False
        )
        return math.exp(-float(pll.sum()) / max(self.tokens, 1))


class CustomMetric:
    """Any number a plan can be judged by, e.g. a fine-tuned head's dev F1 or accuracy: `compute()` evaluates the
    model as it runs now (inside a plan, with the plan). Lower is better unless `higher_is_better`."""

    def __init__(self, name: str, compute, higher_is_better: bool = False):
        self.name, self.compute, self.higher_is_better = name, compute, higher_is_better
        self.relative = True

    def __call__(self) -> float:
        return float(self.compute())


def leave_one_out(model, metric) -> dict:
    """The metric with each layer skipped in turn, and its change in % of the unmodified model's (none for the drift
    metric, whose baseline is 0: the drift is itself the change). `metric` is a TaskMetric or a CustomMetric (e.g.
    a fine-tuned head's dev F1); a layer whose removal improves it is flagged."""
    total = num_layers(model)
    base = metric()
    rows = []
    for layer in tqdm(range(total), desc="leave-one-out"):
        with apply_layer_plan(model, skip_plan(total, layer)):
            value = metric()
        change = 100 * (value - base) / abs(base) if metric.relative else None
        helps = metric.relative and (value > base if getattr(metric, "higher_is_better", False) else value < base)
        rows.append({"layer": layer, "metric": value, "change_percent": change, "removal_helps": helps})
    return {"metric": metric.name, "baseline": base, "layers": rows}


def painters_sweep(model, metric, strategies=STRATEGIES, seeds: int = 3, iterations: int = 3) -> dict:
    """The metric for every strategy and start N (so M = T - 2N - 1 middle layers changed, from 1 to T - 1); the
    random strategy averages `seeds` orders."""
    total = num_layers(model)
    starts = list(range((total - 2) // 2, -1, -1))
    curves = {}
    jobs = [(strategy, start) for strategy in strategies for start in starts]
    for strategy, start in tqdm(jobs, desc="Painters sweep"):
        values = []
        for seed in range(seeds if strategy == "random" else 1):
            with apply_layer_plan(model, painters_plan(strategy, total, start, seed=seed, iterations=iterations)):
                values.append(metric())
        curves.setdefault(strategy, []).append(
            {"start": start, "middle_layers": total - 2 * start - 1, "metric": float(np.mean(values))}
        )
    return {"metric": metric.name, "baseline": metric(), "curves": curves}


def weight_statistics(model, null_permutations: int = 20, seed: int = 0) -> dict:
    """Per layer: the parameters' L2 norm, mean, std; and the mean correlation of consecutive weight deltas,
    corr(e_{l+1} - e_l, e_{l+2} - e_{l+1}), beside the same statistic with the layers shuffled (a null: independent
    layers give -1/2 by construction)."""
    # Each layer's parameters that have the same shape in every layer, flattened and concatenated
    layers, common = layer_modules(model), tensor_types(model)
    weights = [
        torch.cat([dict(layer.named_parameters())[n].detach().float().flatten() for n in common]) for layer in layers
    ]

    def delta_correlation(order):
        deltas = [weights[b] - weights[a] for a, b in zip(order, order[1:])]
        values = [float(torch.corrcoef(torch.stack([d1, d2]))[0, 1]) for d1, d2 in zip(deltas, deltas[1:])]
        return float(np.mean(values)) if values else float("nan")

    rng = random.Random(seed)
    null = []
    for _ in range(null_permutations):
        order = list(range(len(weights)))
        rng.shuffle(order)
        null.append(delta_correlation(order))
    return {
        "layers": [
            {"layer": i, "norm": float(w.norm()), "mean": float(w.mean()), "std": float(w.std())}
            for i, w in enumerate(weights)
        ],
        "delta_correlation": delta_correlation(list(range(len(weights)))),
        "delta_correlation_shuffled_mean": float(np.mean(null)) if null else float("nan"),
        "delta_correlation_shuffled_std": float(np.std(null)) if null else float("nan"),
    }


@torch.inference_mode()
def depth_profiles(model, batches: list[dict]) -> dict:
    """ELC-BERT's alpha matrix (`layer_weights()`) and a layer-fusion DWAtt model's depth weights averaged over
    the real tokens of `batches`, whichever the model has."""
    profiles = {}
    if hasattr(model, "layer_weights") and getattr(model.config, "layer_combination", None) == "elc":
        profiles["alpha"] = model.layer_weights().tolist()
    if getattr(model.config, "fusion", None) in FUSIONS and FUSIONS[model.config.fusion].depth_weights:
        profiles["dwatt_depth_weights"] = model.base_model.mean_depth_weights(batches)
    return profiles
