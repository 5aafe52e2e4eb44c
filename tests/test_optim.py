"""LAMB and the warmup-cosine schedule against naive implementations written from the recipe."""

import math

import pytest
import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.training.optim import Lamb, parameter_groups, warmup_cosine_schedule


def naive_lamb(weights, grads, lr, betas, eps, weight_decay):
    """Element loops in float64: the recipe's LAMB over a sequence of gradients for one tensor."""
    w = [float(x) for x in weights]
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, grad in enumerate(grads, start=1):
        g = [float(x) for x in grad]
        m = [betas[0] * mi + (1 - betas[0]) * gi for mi, gi in zip(m, g)]
        v = [betas[1] * vi + (1 - betas[1]) * gi * gi for vi, gi in zip(v, g)]
        update = [
            (mi / (1 - betas[0] ** t)) / (math.sqrt(vi / (1 - betas[1] ** t)) + eps) + weight_decay * wi
            for mi, vi, wi in zip(m, v, w)
        ]
        ratio = 1.0
        if weight_decay > 0:
            w_norm = math.sqrt(sum(x * x for x in w))
            u_norm = math.sqrt(sum(x * x for x in update))
            if w_norm > 0 and u_norm > 0:
                ratio = w_norm / u_norm
        w = [wi - lr * ratio * ui for wi, ui in zip(w, update)]
    return torch.tensor(w, dtype=torch.float64)


@pytest.mark.parametrize("weight_decay", [0.1, 0.0])
def test_lamb_matches_naive(weight_decay):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(7, generator=gen, dtype=torch.float64)
    grads = [torch.randn(7, generator=gen, dtype=torch.float64) for _ in range(5)]
    param = torch.nn.Parameter(start.clone())
    optimizer = Lamb([param], lr=0.01, weight_decay=weight_decay)
    for grad in grads:
        param.grad = grad.clone()
        optimizer.step()
    expected = naive_lamb(start, grads, 0.01, (0.9, 0.98), 1e-6, weight_decay)
    assert torch.allclose(param.detach(), expected, atol=1e-12)


def test_lamb_without_decay_takes_adam_steps_with_no_trust_ratio():
    """The reference's quirk: no-decay groups step by lr * m_hat / (sqrt(v_hat) + eps), whatever the weight norm."""
    param = torch.nn.Parameter(torch.full((4,), 100.0, dtype=torch.float64))
    optimizer = Lamb([param], lr=0.01, weight_decay=0.0)
    param.grad = torch.ones(4, dtype=torch.float64)
    optimizer.step()
    assert torch.allclose(param.detach(), torch.full((4,), 100.0 - 0.01 / (1 + 1e-6), dtype=torch.float64))


def test_parameter_groups_exclude_norms_biases_embeddings_and_elc_weights():
    model = ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny"))
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("prev_layer_weights" not in names[id(p)] and "bias" not in names[id(p)] for p in decay["params"])
    assert any("prev_layer_weights" in names[id(p)] for p in no_decay["params"])
    assert any("word_embeddings" in names[id(p)] for p in no_decay["params"])
    assert any("up_proj" in names[id(p)] for p in decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_warmup_cosine_schedule():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_cosine_schedule(optimizer, warmup_steps=10, total_steps=110, final_ratio=0.1)
    rates = []
    for _ in range(120):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    # the reference's warm-up: learning rate 0 at the first step, the peak at step 10
    assert rates[0] == 0 and rates[1] == pytest.approx(0.1) and rates[9] == pytest.approx(0.9)
    assert rates[10] == pytest.approx(1.0)
    assert rates[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert rates[110] == pytest.approx(0.1) and rates[119] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[10:110], rates[11:111]))


def per_tensor_lamb_step(params, states, lr, betas, eps, weight_decay):
    """The recipe's LAMB step written tensor by tensor (the package's implementation before it took foreach
    operations), the trust ratio read as a Python number."""
    for param in params:
        state = states.setdefault(param, {"step": 0, "m": torch.zeros_like(param), "v": torch.zeros_like(param)})
        state["step"] += 1
        state["m"].mul_(betas[0]).add_(param.grad, alpha=1 - betas[0])
        state["v"].mul_(betas[1]).addcmul_(param.grad, param.grad, value=1 - betas[1])
        m_hat = state["m"] / (1 - betas[0] ** state["step"])
        v_hat = state["v"] / (1 - betas[1] ** state["step"])
        update = m_hat / (v_hat.sqrt() + eps)
        ratio = 1.0
        if weight_decay > 0:
            update = update + weight_decay * param
            weight_norm, update_norm = param.norm().item(), update.norm().item()
            if weight_norm > 0 and update_norm > 0:
                ratio = weight_norm / update_norm
        param.sub_(lr * ratio * update)


def test_lamb_equals_the_per_tensor_recipe_over_100_steps_of_a_model():
    """Both parameter groups of a tiny ELC-BERT (decay and no decay), 100 steps of random gradients: the foreach
    LAMB and the per-tensor one end within 1e-6 of each other."""
    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny"))
    twin = [param.detach().clone() for param in model.parameters()]
    groups = parameter_groups(model, 0.1)
    optimizer = Lamb(groups, lr=5e-3)
    decays = {id(param): group["weight_decay"] for group in groups for param in group["params"]}
    states = {}
    generator = torch.Generator().manual_seed(1)
    for _ in range(100):
        for param, copy in zip(model.parameters(), twin):
            param.grad = torch.randn(param.shape, generator=generator)
            copy.grad = param.grad.clone()
        optimizer.step()
        for param, copy in zip(model.parameters(), twin):
            per_tensor_lamb_step([copy], states, 5e-3, (0.9, 0.98), 1e-6, decays[id(param)])
    worst = max((param.detach() - copy).abs().max().item() for param, copy in zip(model.parameters(), twin))
    assert worst <= 1e-6, worst


def test_a_lamb_step_reads_no_tensor_value_on_the_host(monkeypatch):
    """On CUDA a host read (`item`, `bool`, `float` of a tensor) per parameter per step is a synchronisation each."""
    reads = []
    for name in ("item", "__bool__", "__float__", "__int__", "tolist"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.zeros(4))]
    optimizer = Lamb([{"params": params, "weight_decay": 0.1}], lr=1e-2)
    for param in params:
        param.grad = torch.randn_like(param)
    optimizer.step()
    assert not reads, reads
