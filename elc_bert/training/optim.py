"""The reference pretraining optimiser (LAMB) and schedule (warmup, then cosine decay to a floor)."""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..models.errors import InputError

# Parameters whose names contain one of these take no weight decay (and, in LAMB, no trust ratio).
NO_DECAY = ("bias", "layer_norm", "LayerNorm", "embedding", "prev_layer_weights", "output_layer_weights")


class Lamb(torch.optim.Optimizer):
    """LAMB: Adam moments with bias correction, decoupled weight decay, and a per-tensor trust ratio.

    update = m_hat / (sqrt(v_hat) + eps) + weight_decay * w;  w <- w - lr * ratio * update, with
    ratio = ||w|| / ||update|| (1 when either norm is 0). As in the reference code, groups without weight decay take
    plain Adam-style steps (ratio 1).
    """

    def __init__(self, params, lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if value < 0:
                raise InputError(f"{name} must be >= 0, got {value}")
        if not all(0 <= beta < 1 for beta in betas):
            raise InputError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        """One step over every parameter with a gradient, a group at a time with `torch._foreach_*` operations: no
        Python loop of tensor operations over parameters, and no tensor value read on the host (the trust ratio
        stays a tensor), so that a step on CUDA never waits for the device."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [param for param in group["params"] if param.grad is not None]
            if params:
                self._step_group(group, params)
        return loss

    def _step_group(self, group: dict, params: list) -> None:
        beta1, beta2 = group["betas"]
        grads = [param.grad for param in params]
        for param in params:
            state = self.state[param]
            if not state:
                state.update(step=0, exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))
            state["step"] += 1
        states = [self.state[param] for param in params]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        corrected_avg = torch._foreach_div(exp_avgs, [1 - beta1 ** state["step"] for state in states])
        denominators = torch._foreach_div(exp_avg_sqs, [1 - beta2 ** state["step"] for state in states])
        torch._foreach_sqrt_(denominators)
        torch._foreach_add_(denominators, group["eps"])
        updates = torch._foreach_div(corrected_avg, denominators)
        if group["weight_decay"] > 0:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
            weight_norms, update_norms = torch._foreach_norm(params), torch._foreach_norm(updates)
            ratios = [
                torch.where((weight > 0) & (update > 0), weight / update, torch.ones_like(weight))
                for weight, update in zip(weight_norms, update_norms)
            ]
            torch._foreach_mul_(updates, ratios)
        torch._foreach_add_(params, updates, alpha=-group["lr"])


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and the NO_DECAY ones (biases, norms, embeddings, ELC layer weights): the
    reference recipe's, which the Trainer's own grouping (biases and LayerNorms only) is not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if any(key in name for key in NO_DECAY) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine_schedule(optimizer, warmup_steps: int, total_steps: int, final_ratio: float = 0.1) -> LambdaLR:
    """Linear warmup from 0 at the first step to the peak at step `warmup_steps`, then cosine decay to `final_ratio` x
    peak at `total_steps`: the reference recipe's schedule (`cosine_schedule_with_warmup` in its utils.py) step for
    step. The Trainer's "cosine_with_min_lr" decays to its minimum by another formula."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
