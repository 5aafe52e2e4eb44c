"""The ELC-BERT model's custom autograd functions: the same numbers as the formulas the model writes out
(`modeling_elc_bert.py`, which runs these eager and the formulas under `torch.compile`), with less kept for the
backward pass or fewer operators. Each one's docstring gives its formula; each is tested against autograd's gradient
of it, twice differentiable, and usable under `torch.func` (`tests/test_modeling.py`).
"""

import torch
import torch.nn.functional as F


def gated_norm(up: torch.Tensor, eps: float, norm_dtype: torch.dtype | None = None) -> torch.Tensor:
    """LN(value * GELU(gate)) of a GeGLU's up-projection [value, gate] (... x 2I), the LN without affine parameters,
    computed in `norm_dtype` where given (what autocast made of it in the forward pass)."""
    value, gate = up.chunk(2, dim=-1)
    product = value * F.gelu(gate, approximate="tanh")
    if norm_dtype is not None:
        product = product.to(norm_dtype)
    return F.layer_norm(product, value.shape[-1:], eps=eps)


class RelativeBias(torch.autograd.Function):
    """The disentangled relative bias of every pair (i, j), content-to-position plus position-to-content, B x H x T^2:

        bias[b, h, iT + j] = relative[0, h, b, index[0, b, h, iT + j]] + relative[1, h, b, index[1, b, h, iT + j]]

    for the relative scores (2 x H x B x T(2P-1)) and their flat indices (2 x B x H x T^2,
    `ElcBertModel.position_buckets`): one gather and a sum, written batch-major as attention takes it. Its backward is
    the gather's, a scatter-add of the bias's gradient into both halves, but keeps the index alone: autograd's gather
    keeps its whole input (2 x B x H x T x (2P-1) per block). Differentiable twice (the backward is linear)."""

    @staticmethod
    def forward(relative: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return relative.permute(0, 2, 1, 3).gather(3, index).sum(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        relative, index = inputs
        ctx.save_for_backward(index)
        ctx.shape = relative.shape

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        # Scattered head-major, the scores' own layout (index and gradient read through transposed views), so that
        # nothing is copied on the way back to the matrix product that made them
        index, grad = index.permute(0, 2, 1, 3), grad.expand(index.shape).permute(0, 2, 1, 3)
        return grad.new_zeros(ctx.shape).scatter_add_(3, index, grad), None


class GatedNorm(torch.autograd.Function):
    """LN(value * GELU(gate)) of a GeGLU's up-projection [value, gate] (... x 2I), the LN without affine parameters: the
    GeGLU's inner product, normalised. Autograd would keep the GELU's output, the product and the LN's output (3 x I
    per token, beside the up-projection, which the GELU's backward keeps); this keeps the up-projection alone and
    recomputes the GELU, the product and the LN's statistics in the backward pass (elementwise work) with the same
    operators in the same dtypes (under autocast, the LN's, which autocast may raise). Differentiable twice."""

    @staticmethod
    def forward(up: torch.Tensor, eps: float) -> torch.Tensor:
        return gated_norm(up, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        up, eps = inputs
        ctx.save_for_backward(up)
        ctx.eps, ctx.norm_dtype = eps, output.dtype

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (up,) = ctx.saved_tensors
        # The forward recomputed and differentiated by autograd (public API only): the same operators and dtypes as
        # autograd's graph of the formula, so the same gradient. Where the caller differentiates again (grad mode on
        # in this backward), the recomputation hangs on `up` itself so that the result depends on it.
        again = torch.is_grad_enabled()
        with torch.enable_grad():
            leaf = up if again else up.detach().requires_grad_()
            output = gated_norm(leaf, ctx.eps, ctx.norm_dtype)
        (grad_up,) = torch.autograd.grad(output, leaf, grad, create_graph=again)
        return grad_up, None


class WeightedSum(torch.autograd.Function):
    """sum_i w_i y_i for weights w (n) and states y_0..y_{n-1} (each B x T x D) as one matrix-vector product over
    the stacked states, and its backward as two: dL/dw_i = <g, y_i>, dL/dy_i = w_i g for the output's gradient g.
    A state's stacked copy lives only inside each call, so autograd keeps no more than the states themselves (which
    the blocks' outputs are anyway). Runs in the states' dtype, outside autocast."""

    @staticmethod
    def forward(weights: torch.Tensor, *states: torch.Tensor) -> torch.Tensor:
        with torch.autocast(states[0].device.type, enabled=False):
            return torch.mv(torch.stack(states).flatten(1).T, weights).view(states[0].shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        weights, *states = ctx.saved_tensors
        flat = grad.reshape(-1)
        with torch.autocast(grad.device.type, enabled=False):
            grad_weights = torch.mv(torch.stack(states).flatten(1), flat) if ctx.needs_input_grad[0] else None
            grad_states = torch.outer(weights, flat).view(len(states), *grad.shape).unbind(0)
        return grad_weights, *grad_states


__all__ = ["GatedNorm", "RelativeBias", "WeightedSum", "gated_norm"]
