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
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(param.grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                corrected_avg = exp_avg / (1 - beta1 ** state["step"])
                corrected_sq = exp_avg_sq / (1 - beta2 ** state["step"])
                update = corrected_avg / (corrected_sq.sqrt() + group["eps"])
                ratio = 1.0
                if group["weight_decay"] > 0:
                    update.add_(param, alpha=group["weight_decay"])
                    weight_norm, update_norm = param.norm(), update.norm()
                    if weight_norm > 0 and update_norm > 0:
                        ratio = (weight_norm / update_norm).item()
                param.add_(update, alpha=-group["lr"] * ratio)
        return loss


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and the NO_DECAY ones (biases, norms, embeddings, ELC layer weights): the
    reference recipe's, which the Trainer's own grouping (biases and LayerNorms only) is not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if any(key in name for key in NO_DECAY) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine_schedule(optimizer, warmup_steps: int, total_steps: int, final_ratio: float = 0.1) -> LambdaLR:
    """Linear warmup to the peak, then cosine decay to `final_ratio` x peak at `total_steps`: the reference recipe's
    schedule step for step, which the Trainer's "cosine_with_min_lr" is not (its warmup starts at 0, this one at
    1/warmup_steps)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
