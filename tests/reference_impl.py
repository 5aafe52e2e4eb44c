"""Naive reference implementation of LTG-BERT / ELC-BERT, used only by the tests.

Written straight from the equations in ../shared/docs/elc-bert.md (sections "Backbone" and "ELC-BERT") and
../shared/docs/notes/elc-bert-reference-notes.md sections 1, 2 and 6. It deliberately shares no code with the
``elc_bert`` package (it never imports it): Python loops over examples, heads and (query, key) pairs, a scalar
bucket formula per pair, float64 everywhere, eval mode (no dropout). Speed does not matter; inputs are tiny.
Parameters are given in the reference checkpoint layout (``embedding.*``, ``transformer.layers.{i}.*``,
``classifier.nonlinearity.*``); tensors in and out are batch-first.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64


# ----------------------------------------------------------------------------------------------- relative buckets
def bucket_index(i: int, j: int, bucket_size: int, max_position: int) -> int:
    """delta(i, j) = bucket(i - j) + P - 1, the row of the relative table used by query i and key j."""
    rel = i - j
    mid = bucket_size // 2
    abs_rel = min(abs(rel), max_position - 1)  # clamp for sequences longer than max_position
    if abs_rel <= mid:
        bucket = rel
    else:
        # float32 semantics, as the reference builds its table with torch float32 ops
        f32 = torch.float32
        num = torch.log(torch.tensor(abs_rel, dtype=f32) / torch.tensor(mid, dtype=f32))
        den = torch.log(torch.tensor((max_position - 1) / mid, dtype=f32))
        scaled = num / den * torch.tensor(mid - 1, dtype=f32)
        bucket = int(math.copysign(mid + math.ceil(scaled.item()), rel))
    return bucket + bucket_size - 1


def _position_indices(size: int, bucket_size: int, max_position: int) -> torch.Tensor:
    """[size, size] int64 table of bucket indices (one scalar call per distinct offset, then filled per pair)."""
    per_rel = {rel: bucket_index(rel, 0, bucket_size, max_position) for rel in range(-(size - 1), size)}
    return torch.tensor([[per_rel[i - j] for j in range(size)] for i in range(size)], dtype=torch.int64)


def _self_check() -> None:
    P, M = 32, 512
    expected = {0: 0, 1: 1, 16: 16, 17: 17, 21: 18, 26: 19, 32: 20, 41: 21, 51: 22, 64: 23}
    expected |= {81: 24, 102: 25, 128: 26, 162: 27, 203: 28, 256: 29, 322: 30, 406: 31, 450: 31, 511: 31}
    for rel, bucket in expected.items():
        assert bucket_index(rel, 0, P, M) == bucket + P - 1, (rel, bucket_index(rel, 0, P, M) - P + 1)
        assert bucket_index(0, rel, P, M) == -bucket + P - 1, (rel, bucket_index(0, rel, P, M) - P + 1)
    # the boundaries of the logarithmic buckets: one less falls in the previous bucket
    for rel, bucket in [(20, 17), (25, 18), (31, 19), (63, 22), (127, 25), (255, 28), (405, 30)]:
        assert bucket_index(rel, 0, P, M) == bucket + P - 1, rel
    # long sequences clamp |rel| at M - 1 instead of failing
    assert bucket_index(5000, 0, P, M) == 31 + P - 1 and bucket_index(0, 5000, P, M) == -31 + P - 1
    assert all(0 <= bucket_index(r, 0, P, M) <= 2 * P - 2 for r in range(-1200, 1200))


# ----------------------------------------------------------------------------------------------- elementary pieces
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-7
) -> torch.Tensor:
    """LN over the last dim (biased variance). Without weight/bias this is LN0, with them LN1."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight + bias
    return y


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    y = x @ weight.T
    return y if bias is None else y + bias


def _masked_softmax(scores: list[torch.Tensor], key_is_real: list[bool]) -> list[torch.Tensor]:
    """Softmax over the real keys only (0-d tensors, so autograd flows); a padded key gets probability exactly 0."""
    zero = torch.zeros((), dtype=F64)
    real = [s for s, ok in zip(scores, key_is_real) if ok]
    if not real:
        return [zero] * len(scores)
    top = max(s.item() for s in real)  # a constant shift: it changes no value and no gradient
    exps = [torch.exp(s - top) if ok else zero for s, ok in zip(scores, key_is_real)]
    total = sum(exps)
    return [e / total for e in exps]


# ----------------------------------------------------------------------------------------------- attention
def attention_one_head(q, k, v, q_pos, k_pos, delta, key_is_real, scale):
    """One example, one head. q, k, v: [T, d]; q_pos, k_pos: [2P-1, d]; delta: T x T list of table rows.

    score(i, j) = s<q_i, k_j> + s<q_i, k_pos[delta(i,j)]> + s<k_j, q_pos[delta(i,j)]>.
    """
    T = q.shape[0]
    out = torch.zeros_like(v)
    probs = torch.zeros(T, T, dtype=F64)
    for i in range(T):
        scores = []
        for j in range(T):
            r = delta[i][j]
            c2c = torch.dot(q[i], k[j])
            c2p = torch.dot(q[i], k_pos[r])
            p2c = torch.dot(k[j], q_pos[r])
            scores.append(scale * (c2c + c2p + p2c))
        p = _masked_softmax(scores, key_is_real)
        for j in range(T):
            probs[i, j] = p[j]
            out[i] = out[i] + p[j] * v[j]
    return out, probs


def attention(sd, prefix, x, rel_norm, delta, mask, num_heads, positional_split, eps):
    """Attn(x) for x [B, T, D]: pre-LN0, disentangled relative attention, out_proj, post affine LN."""
    B, T, D = x.shape
    d = D // num_heads
    w_qk, b_qk = sd[prefix + "attention.in_proj_qk.weight"], sd[prefix + "attention.in_proj_qk.bias"]
    h = layer_norm(x, eps=eps)
    qk = linear(h, w_qk, b_qk)  # [B, T, 2D]
    q, k = qk[..., :D], qk[..., D:]
    v = linear(h, sd[prefix + "attention.in_proj_v.weight"], sd[prefix + "attention.in_proj_v.bias"])
    pos = linear(rel_norm, w_qk, b_qk)  # [2P-1, 2D], same W_qk and b_qk
    scale = 1.0 / math.sqrt(3 * d)
    context = torch.zeros(B, T, D, dtype=F64)
    for b in range(B):
        key_is_real = [bool(mask[b, j] != 0) for j in range(T)]
        for head in range(num_heads):
            cols = slice(head * d, (head + 1) * d)
            if positional_split == "halves":
                q_pos, k_pos = pos[:, head * d : (head + 1) * d], pos[:, D + head * d : D + (head + 1) * d]
            elif positional_split == "interleaved":
                q_pos, k_pos = pos[:, 2 * head * d : 2 * head * d + d], pos[:, 2 * head * d + d : 2 * head * d + 2 * d]
            else:
                raise ValueError(positional_split)
            out, _ = attention_one_head(
                q[b, :, cols], k[b, :, cols], v[b, :, cols], q_pos, k_pos, delta, key_is_real, scale
            )
            context[b, :, cols] = out
    o = linear(context, sd[prefix + "attention.out_proj.weight"], sd[prefix + "attention.out_proj.bias"])
    return layer_norm(
        o, sd[prefix + "attention.post_layer_norm.weight"], sd[prefix + "attention.post_layer_norm.bias"], eps=eps
    )


# ----------------------------------------------------------------------------------------------- FFN, blocks, head
def ffn(sd, prefix, x, eps):
    """GeGLU without biases: u = LN0(x) W1^T, [a|g] = u, z = a * gelu_tanh(g), m = W2 LN0(z)."""
    u = linear(layer_norm(x, eps=eps), sd[prefix + "mlp.mlp.1.weight"])
    inner = u.shape[-1] // 2
    a, g = u[..., :inner], u[..., inner:]
    z = a * gelu_tanh(g)
    return linear(layer_norm(z, eps=eps), sd[prefix + "mlp.mlp.4.weight"])


def ltg_block(x, attn_fn, ffn_fn):
    x = x + attn_fn(x)
    return x + ffn_fn(x)


def elc_block(x_n, attn_fn, ffn_fn, variant, eps):
    """Block output y_n (an update; x_n is not added back)."""
    a = attn_fn(x_n)
    if variant == "base":
        return a + ffn_fn(a)
    if variant in ("zero", "weighted_output"):
        return a + ffn_fn(x_n + a)
    if variant == "normalized":
        return layer_norm(a + ffn_fn(x_n + a), eps=eps)
    raise ValueError(variant)


def mlm_head(sd, x, eps):
    """LN0 -> Linear(D,D)+b -> GELU(erf) -> LN0 -> Linear(D,V)+b."""
    h = layer_norm(x, eps=eps)
    h = gelu_erf(linear(h, sd["classifier.nonlinearity.1.weight"], sd["classifier.nonlinearity.1.bias"]))
    h = layer_norm(h, eps=eps)
    return linear(h, sd["classifier.nonlinearity.5.weight"], sd["classifier.nonlinearity.5.bias"])


def _softmax_vec(theta: torch.Tensor) -> torch.Tensor:
    ex = torch.exp(theta - theta.max())
    return ex / ex.sum()


# ----------------------------------------------------------------------------------------------- full model
def naive_forward(
    sd,
    input_ids,
    attention_mask,
    *,
    num_heads,
    layer_combination,
    elc_variant="base",
    positional_split="halves",
    max_position_embeddings=512,
    position_bucket_size=32,
    layer_norm_eps=1e-7,
) -> dict:
    eps = layer_norm_eps
    sd = {k: (v.to(F64) if v.is_floating_point() else v) for k, v in sd.items()}
    input_ids = torch.as_tensor(input_ids)
    B, T = input_ids.shape
    mask = torch.ones(B, T, dtype=torch.int64) if attention_mask is None else torch.as_tensor(attention_mask)
    num_layers = len({k.split(".")[2] for k in sd if k.startswith("transformer.layers.")})

    # embedding: e = LN0(E[ids]); relative table R~ = LN1(R)
    emb = sd["embedding.word_embedding.weight"]
    e = torch.zeros(B, T, emb.shape[1], dtype=F64)
    for b in range(B):
        for t in range(T):
            e[b, t] = emb[int(input_ids[b, t])]
    e = layer_norm(e, eps=eps)
    rel_norm = layer_norm(
        sd["embedding.relative_embedding"],
        sd["embedding.relative_layer_norm.weight"],
        sd["embedding.relative_layer_norm.bias"],
        eps=eps,
    )
    assert rel_norm.shape[0] == 2 * position_bucket_size - 1
    delta = [[bucket_index(i, j, position_bucket_size, max_position_embeddings) for j in range(T)] for i in range(T)]

    def make_fns(layer):
        prefix = f"transformer.layers.{layer}."

        def attn_fn(x):
            return attention(sd, prefix, x, rel_norm, delta, mask, num_heads, positional_split, eps)

        def ffn_fn(x):
            return ffn(sd, prefix, x, eps)

        return attn_fn, ffn_fn

    hidden_states, alphas = [e], []
    if layer_combination == "residual":
        x = e
        for layer in range(num_layers):
            x = ltg_block(x, *make_fns(layer))
            hidden_states.append(x)
        last = x
    elif layer_combination == "elc":
        for layer in range(num_layers):
            alpha = _softmax_vec(sd[f"transformer.layers.{layer}.prev_layer_weights"])
            assert alpha.shape[0] == len(hidden_states) == layer + 1
            x_n = torch.zeros_like(e)
            for i, y_i in enumerate(hidden_states):
                x_n = x_n + alpha[i] * y_i
            alphas.append(alpha)
            hidden_states.append(elc_block(x_n, *make_fns(layer), elc_variant, eps))
        if elc_variant == "weighted_output":
            beta = _softmax_vec(sd["transformer.prev_layer_weights"])
            assert beta.shape[0] == num_layers + 1
            last = torch.zeros_like(e)
            for i, y_i in enumerate(hidden_states):
                last = last + beta[i] * y_i
        else:
            last = hidden_states[-1]
    else:
        raise ValueError(layer_combination)

    out = {"hidden_states": hidden_states, "last_hidden_state": last, "mlm_logits": mlm_head(sd, last, eps)}
    if layer_combination == "elc":
        out["alpha"] = alphas
    return out


# ----------------------------------------------------------------------------------------------- random weights
def random_reference_state_dict(
    *,
    vocab_size,
    hidden_size,
    num_layers,
    intermediate_size,
    position_bucket_size=32,
    elc: bool,
    weighted_output: bool = False,
    seed=0,
) -> dict[str, torch.Tensor]:
    """Random float32 parameters in the reference checkpoint layout (plus the int64 position_indices buffers)."""
    if weighted_output and not elc:
        raise ValueError("weighted_output is an ELC variant")
    gen = torch.Generator().manual_seed(seed)
    V, D, inner, P = vocab_size, hidden_size, intermediate_size, position_bucket_size

    def normal(*shape, std=0.05, mean=0.0):
        return (torch.randn(*shape, generator=gen, dtype=F64) * std + mean).float()

    sd = {
        "embedding.word_embedding.weight": normal(V, D, std=0.1),
        "embedding.relative_embedding": normal(2 * P - 1, D, std=0.1),
        "embedding.relative_layer_norm.weight": normal(D, std=0.1, mean=1.0),
        "embedding.relative_layer_norm.bias": normal(D, std=0.02),
    }
    positions = _position_indices(512, P, 512)
    for i in range(num_layers):
        p = f"transformer.layers.{i}."
        if elc:
            sd[p + "prev_layer_weights"] = normal(i + 1, std=1.0)
        sd[p + "attention.in_proj_qk.weight"] = normal(2 * D, D, std=0.1)
        sd[p + "attention.in_proj_qk.bias"] = normal(2 * D, std=0.02)
        sd[p + "attention.in_proj_v.weight"] = normal(D, D, std=0.1)
        sd[p + "attention.in_proj_v.bias"] = normal(D, std=0.02)
        sd[p + "attention.out_proj.weight"] = normal(D, D, std=0.1)
        sd[p + "attention.out_proj.bias"] = normal(D, std=0.02)
        sd[p + "attention.post_layer_norm.weight"] = normal(D, std=0.1, mean=1.0)
        sd[p + "attention.post_layer_norm.bias"] = normal(D, std=0.02)
        sd[p + "attention.position_indices"] = positions.clone()
        sd[p + "mlp.mlp.1.weight"] = normal(2 * inner, D, std=0.1)
        sd[p + "mlp.mlp.4.weight"] = normal(D, inner, std=0.1)
    if weighted_output:
        sd["transformer.prev_layer_weights"] = normal(num_layers + 1, std=1.0)
    sd["classifier.nonlinearity.1.weight"] = normal(D, D, std=0.1)
    sd["classifier.nonlinearity.1.bias"] = normal(D, std=0.02)
    sd["classifier.nonlinearity.5.weight"] = sd["embedding.word_embedding.weight"].clone()
    sd["classifier.nonlinearity.5.bias"] = normal(V, std=0.02)
    return sd


if __name__ == "__main__":
    _self_check()
    print("bucket self-check passed")
