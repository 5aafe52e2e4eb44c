"""The ELC-BERT / LTG-BERT models: numerics against the naive reference, padding, long inputs, hidden states and
attentions, ELC layer weights, tying, gradient checkpointing, bf16, the Auto classes, the task heads, init."""

import gc
import math
import os
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    ARCHITECTURES,
    AUTO,
    NUM_LABELS,
    REF_DIMS,
    TASK_CLASSES,
    TINY,
    arch_id,
    assert_close,
    class_id,
    padded_batch,
    task_inputs,
    task_model,
    task_outputs,
)
from reference_impl import bucket_index, naive_forward
from transformers.loss.loss_utils import LOSS_MAPPING

import elc_bert as elc_bert_package
from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
)
from elc_bert.models.autograd_functions import GatedNorm, RelativeBias
from elc_bert.models.modeling_elc_bert import relative_position_buckets

# ============================================================================== 2. numerics vs the naive reference
NUMERIC_CASES = [
    (arch, split) for arch in ARCHITECTURES for split in ("halves", "interleaved")
]  # residual + 4 ELC variants, each with both positional splits


def _load_reference(folder, arch, split, model_class=ElcBertForMaskedLM):
    overrides = {}
    if arch[0] == "elc" and arch[1] in ("zero", "normalized"):
        overrides["elc_variant"] = arch[1]  # not readable off the weights
    if split != "halves":
        overrides["positional_split"] = split
    return model_class.from_pretrained(folder, **overrides)


@pytest.mark.parametrize("arch, split", NUMERIC_CASES, ids=[f"{arch_id(a)}-{s}" for a, s in NUMERIC_CASES])
def test_matches_naive_reference(reference_checkpoint, arch, split):
    elc = arch[0] == "elc"
    folder, sd = reference_checkpoint(elc=elc, weighted_output=arch[1] == "weighted_output" and elc, seed=3)
    model = _load_reference(folder, arch, split)
    assert not model.training
    assert model.config.layer_combination == arch[0]
    if elc:
        assert model.config.elc_variant == arch[1]
    assert model.config.positional_split == split

    # T = 20 reaches the first logarithmic buckets (|i - j| up to 19).
    input_ids, attention_mask = padded_batch([20, 13, 6], vocab_size=REF_DIMS["vocab_size"], seed=1)
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    ref = naive_forward(
        sd,
        input_ids,
        attention_mask,
        num_heads=REF_DIMS["num_heads"],
        layer_combination=arch[0],
        elc_variant=arch[1],
        positional_split=split,
    )
    # Padding masks keys only: every query row, padded or not, is defined and compared.
    hidden = model.elc_bert(input_ids, attention_mask=attention_mask).last_hidden_state
    assert_close(hidden, ref["last_hidden_state"], what="base last_hidden_state")
    assert len(out.hidden_states) == REF_DIMS["num_layers"] + 1
    for n, (ours, theirs) in enumerate(zip(out.hidden_states, ref["hidden_states"])):
        assert_close(ours, theirs, what=f"hidden_states[{n}]")
    # The logits are of order 1-2 here (errors ~1e-6): 1e-5 absolute, no relative slack.
    assert_close(out.logits, ref["mlm_logits"], atol=1e-5, what="mlm logits")
    if elc:
        alpha = model.layer_weights()
        for n, naive_alpha in enumerate(ref["alpha"]):
            assert_close(alpha[n, : n + 1], naive_alpha, atol=1e-6, what=f"alpha row {n}")
            assert torch.all(alpha[n, n + 1 :] == 0)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base")], ids=arch_id)
def test_attention_implementations_match_naive_reference(reference_checkpoint, arch, implementation):
    """Both attention implementations, chosen through `attn_implementation` as in `transformers`: the same numbers
    as the naive reference on any device, and training works."""
    folder, sd = reference_checkpoint(elc=arch[0] == "elc", seed=4)
    model = ElcBertForMaskedLM.from_pretrained(folder, attn_implementation=implementation)
    assert model.config._attn_implementation == implementation
    input_ids, attention_mask = padded_batch([20, 13, 6], vocab_size=REF_DIMS["vocab_size"], seed=2)
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    ref = naive_forward(sd, input_ids, attention_mask, num_heads=REF_DIMS["num_heads"], layer_combination=arch[0])
    assert_close(logits, ref["mlm_logits"], atol=1e-5, what=f"mlm logits ({implementation})")
    model.train()
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    relative = model.elc_bert.embeddings.relative_embedding.grad
    assert relative is not None and torch.isfinite(relative).all() and relative.abs().sum() > 0


def test_positional_split_changes_the_output(reference_checkpoint):
    """The two split conventions must not coincide on random weights (otherwise test above checks nothing)."""
    folder, sd = reference_checkpoint(elc=True, seed=4)
    ids, mask = padded_batch([9, 6], vocab_size=REF_DIMS["vocab_size"])
    kw = dict(num_heads=REF_DIMS["num_heads"], layer_combination="elc")
    halves = naive_forward(sd, ids, mask, positional_split="halves", **kw)["last_hidden_state"]
    interleaved = naive_forward(sd, ids, mask, positional_split="interleaved", **kw)["last_hidden_state"]
    assert (halves - interleaved).abs().max() > 1e-3
    model = ElcBertForMaskedLM.from_pretrained(folder, positional_split="interleaved")
    with torch.no_grad():
        ours = model.elc_bert(ids, attention_mask=mask).last_hidden_state
    assert_close(ours, interleaved, what="interleaved")


# ============================================================================== 4. longer than max_position_embeddings
@pytest.mark.parametrize("combination, bucket", [("elc", 32), ("residual", 8)], ids=["elc-P32", "ltg-P8"])
def test_longer_than_max_position_matches_naive(reference_checkpoint, combination, bucket):
    max_position = 24
    folder, sd = reference_checkpoint(
        elc=combination == "elc", seed=5, max_position_embeddings=max_position, bucket=bucket, num_layers=2
    )
    model = ElcBertForMaskedLM.from_pretrained(folder)
    assert model.config.max_position_embeddings == max_position
    assert model.config.position_bucket_size == bucket
    input_ids, attention_mask = padded_batch([40, 29], vocab_size=REF_DIMS["vocab_size"], seed=2)
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    ref = naive_forward(
        sd,
        input_ids,
        attention_mask,
        num_heads=REF_DIMS["num_heads"],
        layer_combination=combination,
        max_position_embeddings=max_position,
        position_bucket_size=bucket,
    )
    for n, (ours, theirs) in enumerate(zip(out.hidden_states, ref["hidden_states"], strict=True)):
        assert_close(ours, theirs, what=f"hidden_states[{n}]")
    assert_close(out.logits, ref["mlm_logits"], atol=1e-5, what="mlm logits")


@pytest.mark.parametrize("variant", ["base", "normalized"])
def test_longer_than_max_position_differs_from_the_official_rebuild_as_documented(reference_checkpoint, variant):
    """Past `max_position_embeddings` (M) we follow the spec and clamp distances at M - 1, for every checkpoint. The
    official ELC `base`/`normalized` code instead rebuilds its bucket table with M = T for a longer input, which moves
    the logarithmic buckets (the official HF copies crash there). This pins the documented difference: equal to the
    clamped naive reference, and measurably off the rebuilt one (docs/models/elc-bert.md, "Inputs longer than M")."""
    max_position = 24
    folder, sd = reference_checkpoint(elc=True, seed=6, max_position_embeddings=max_position, num_layers=2)
    model = ElcBertForMaskedLM.from_pretrained(folder, elc_variant=variant)
    input_ids, attention_mask = padded_batch([40, 29], vocab_size=REF_DIMS["vocab_size"], seed=3)
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    common = dict(num_heads=REF_DIMS["num_heads"], layer_combination="elc", elc_variant=variant)
    clamped = naive_forward(sd, input_ids, attention_mask, max_position_embeddings=max_position, **common)
    rebuilt = naive_forward(sd, input_ids, attention_mask, max_position_embeddings=input_ids.shape[1], **common)
    assert_close(logits, clamped["mlm_logits"], atol=1e-5, what="clamped (ours, the spec)")
    difference = (logits.double() - rebuilt["mlm_logits"]).abs().max().item()
    assert difference > 1e-4, "the official rebuild would be the same here: nothing to document"


# ============================================================================== 13. relative position buckets
SPEC_BUCKETS = {0: 0, 16: 16, 17: 17, 32: 20, 64: 23, 128: 26, 256: 29, 406: 31, 511: 31, 599: 31}


@pytest.mark.parametrize("length, bucket, max_position", [(600, 32, 512), (50, 8, 24), (40, 32, 24)])
def test_relative_position_buckets_match_naive(length, bucket, max_position):
    table = relative_position_buckets(length, bucket, max_position)
    assert table.shape == (length, length)
    # The naive index depends on (i, j) only through i - j: one call per offset fills the whole table.
    per_offset = {rel: bucket_index(rel, 0, bucket, max_position) for rel in range(-(length - 1), length)}
    offsets = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    expected = torch.tensor([per_offset[r] for r in range(-(length - 1), length)])[offsets + length - 1]
    mismatches = (table.long() != expected).nonzero()
    assert mismatches.numel() == 0, f"{len(mismatches)} pairs differ, first (i, j) = {mismatches[0].tolist()}"
    assert table.min() >= 0 and table.max() <= 2 * bucket - 2
    # Spot checks from the spec: 17 -> 17, 32 -> 20, 64 -> 23, 128 -> 26, 256 -> 29, 406..511 -> 31, clamped beyond.
    if (bucket, max_position) == (32, 512):
        for rel, b in SPEC_BUCKETS.items():
            assert table[rel, 0] == b + bucket - 1
            assert table[0, rel] == -b + bucket - 1


# ============================================================================== 3. padded batch == each sequence alone
PADDING_ARCHS = [("residual", "base"), ("elc", "base"), ("elc", "weighted_output")]


@pytest.mark.parametrize("arch", PADDING_ARCHS, ids=arch_id)
@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_padded_batch_equals_each_sequence_alone(model_class, arch):
    model = task_model(model_class, arch)
    input_ids, attention_mask = task_inputs(model_class)
    with torch.no_grad():
        batched = task_outputs(model_class, model(input_ids, attention_mask=attention_mask))
        for row in range(input_ids.shape[0]):
            if model_class is ElcBertForMultipleChoice:
                for choice in range(input_ids.shape[1]):
                    n = int(attention_mask[row, choice].sum())
                    alone = model(input_ids[row : row + 1, choice : choice + 1, :n]).logits
                    assert_close(batched[0][row, choice], alone[0, 0], what=f"row {row} choice {choice}")
                continue
            n = int(attention_mask[row].sum())
            alone = task_outputs(model_class, model(input_ids[row : row + 1, :n]))
            for ours, single in zip(batched, alone, strict=True):
                if model_class is ElcBertForSequenceClassification:
                    assert_close(ours[row], single[0], what=f"row {row}")
                else:  # per-position outputs: compare the real positions
                    assert_close(ours[row, :n], single[0], what=f"row {row}")


# ============================================================================== 5. hidden states and attentions
@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_hidden_states_count_and_shape(arch):
    model = task_model(ElcBertModel, arch)
    input_ids, attention_mask = padded_batch([11, 7, 4])
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        plain = model(input_ids, attention_mask=attention_mask)
    L, D = TINY["num_hidden_layers"], TINY["hidden_size"]
    assert plain.hidden_states is None and plain.attentions is None
    assert len(out.hidden_states) == L + 1
    for state in out.hidden_states:
        assert state.shape == (3, 11, D)
    assert torch.equal(out.last_hidden_state, plain.last_hidden_state)
    if arch[1] == "weighted_output" and arch[0] == "elc":
        # The output is a mixture of y_0..y_L, not the last block output.
        assert not torch.allclose(out.last_hidden_state, out.hidden_states[-1], atol=1e-4)
    else:
        torch.testing.assert_close(out.last_hidden_state, out.hidden_states[-1], rtol=0, atol=0)
    # y_0 is the embedding output LN0(E[ids]), whatever the architecture.
    embedded = model.get_input_embeddings()(input_ids)
    torch.testing.assert_close(
        out.hidden_states[0], F.layer_norm(embedded, (D,), eps=model.config.layer_norm_eps), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_every_class_returns_hidden_states_and_attentions(model_class):
    model = task_model(model_class, attn_implementation="eager")
    input_ids, attention_mask = task_inputs(model_class)
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True, output_attentions=True)
    rows = input_ids.shape[0] * (input_ids.shape[1] if input_ids.dim() == 3 else 1)
    T, L = input_ids.shape[-1], TINY["num_hidden_layers"]
    assert len(out.hidden_states) == L + 1
    assert all(h.shape == (rows, T, TINY["hidden_size"]) for h in out.hidden_states)
    assert len(out.attentions) == L
    assert all(a.shape == (rows, TINY["num_attention_heads"], T, T) for a in out.attentions)


@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base"), ("elc", "normalized")], ids=arch_id)
def test_attentions_are_distributions_over_real_keys(arch):
    model = task_model(ElcBertForMaskedLM, arch, attn_implementation="eager")
    input_ids, attention_mask = padded_batch([11, 7, 4])
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_attentions=True)
        plain = model(input_ids, attention_mask=attention_mask)
    # Asking for the probabilities does not change the result.
    torch.testing.assert_close(out.logits, plain.logits, rtol=1e-5, atol=1e-5)
    B, T = input_ids.shape
    assert len(out.attentions) == TINY["num_hidden_layers"]
    padded_keys = (attention_mask == 0)[:, None, None, :].expand(B, TINY["num_attention_heads"], T, T)
    for layer, probs in enumerate(out.attentions):
        assert probs.shape == (B, TINY["num_attention_heads"], T, T)
        assert torch.all(probs >= 0)
        torch.testing.assert_close(probs.sum(-1), torch.ones(B, TINY["num_attention_heads"], T), rtol=0, atol=1e-5)
        assert torch.all(probs[padded_keys] == 0), f"layer {layer}: probability on a padded key"
        # Not degenerate: real keys share the mass.
        assert probs[0, :, :, :11].max() < 1.0


# ============================================================================== 6. layer_weights()
@pytest.mark.parametrize("variant", ["base", "zero", "normalized", "weighted_output"])
@pytest.mark.parametrize("model_class", [ElcBertModel, ElcBertForMaskedLM, ElcBertForQuestionAnswering], ids=class_id)
def test_layer_weights_properties(model_class, variant):
    model = task_model(model_class, ("elc", variant), num_hidden_layers=4)
    alpha = model.layer_weights()
    L = 4
    assert alpha.shape == (L, L + 1)
    torch.testing.assert_close(alpha.sum(1), torch.ones(L), rtol=0, atol=1e-6)
    assert torch.all(alpha >= 0)
    assert torch.all(torch.triu(alpha, diagonal=1) == 0), "nonzero weight on a later layer"
    encoder = model.encoder if model_class is ElcBertModel else model.elc_bert.encoder
    for n in range(L):
        logits = encoder.layers[n].prev_layer_weights.detach().double()
        assert logits.shape == (n + 1,)
        expected = torch.exp(logits - logits.max()) / torch.exp(logits - logits.max()).sum()
        torch.testing.assert_close(alpha[n, : n + 1].double(), expected, rtol=0, atol=1e-6)
    # It follows the parameters.
    with torch.no_grad():
        encoder.layers[2].prev_layer_weights.copy_(torch.tensor([0.0, 0.0, 50.0]))
    assert model.layer_weights()[2, 2] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "model_class", [ElcBertModel, ElcBertForMaskedLM, ElcBertForSequenceClassification], ids=class_id
)
def test_layer_weights_raises_for_residual(model_class):
    model = task_model(model_class, ("residual", "base"))
    with pytest.raises(ValueError):
        model.layer_weights()


# ============================================================================== 7. tied embeddings
def test_tied_embeddings_survive_save_and_load(tmp_path):
    model = task_model(ElcBertForMaskedLM)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.save_pretrained(tmp_path)
    assert os.path.isfile(tmp_path / "model.safetensors")
    loaded = ElcBertForMaskedLM.from_pretrained(tmp_path)
    decoder, embedding = loaded.get_output_embeddings().weight, loaded.get_input_embeddings().weight
    assert decoder is embedding
    assert torch.equal(embedding, model.get_input_embeddings().weight)
    torch.testing.assert_close(loaded.get_output_embeddings().bias, model.get_output_embeddings().bias, rtol=0, atol=0)
    # Still tied in use: changing the embedding changes the decoder.
    with torch.no_grad():
        embedding[5].add_(1.0)
    assert torch.equal(loaded.get_output_embeddings().weight[5], embedding[5])


def test_resize_token_embeddings_keeps_tying(tmp_path):
    model = task_model(ElcBertForMaskedLM)
    V = TINY["vocab_size"]
    input_ids, attention_mask = padded_batch([9, 5])
    with torch.no_grad():
        before = model(input_ids, attention_mask=attention_mask).logits
    model.resize_token_embeddings(V + 10)
    assert model.get_input_embeddings().weight.shape == (V + 10, TINY["hidden_size"])
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.config.vocab_size == V + 10
    with torch.no_grad():
        after = model(input_ids, attention_mask=attention_mask).logits
        new_token = model(torch.tensor([[1, V + 5, V + 9]])).logits
    assert after.shape == (2, 9, V + 10)
    assert torch.isfinite(new_token).all()
    torch.testing.assert_close(after[..., :V], before, rtol=1e-5, atol=1e-5)
    # And it round-trips.
    model.save_pretrained(tmp_path)
    loaded = ElcBertForMaskedLM.from_pretrained(tmp_path)
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    with torch.no_grad():
        reloaded = loaded(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(reloaded, after, rtol=0, atol=1e-6)


# ============================================================================== 8. gradient checkpointing
def _grads(model, input_ids, attention_mask, labels):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base"), ("elc", "weighted_output")], ids=arch_id)
def test_gradient_checkpointing_same_gradients(arch, reentrant):
    model = task_model(ElcBertForMaskedLM, arch).train()
    input_ids, attention_mask = padded_batch([11, 7, 4])
    labels = torch.where(torch.rand(input_ids.shape, generator=torch.Generator().manual_seed(0)) < 0.4, input_ids, -100)
    labels[attention_mask == 0] = -100
    labels[0, 1] = input_ids[0, 1]

    # Count the forward calls of one Linear inside the first block: recomputation in backward makes it 2 per step.
    first_linear = next(m for m in model.elc_bert.encoder.layers[0].modules() if isinstance(m, torch.nn.Linear))
    calls = []
    handle = first_linear.register_forward_hook(lambda *args: calls.append(1))

    reference = _grads(model, input_ids, attention_mask, labels)
    plain_calls = len(calls)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    assert model.is_gradient_checkpointing
    calls.clear()
    checkpointed = _grads(model, input_ids, attention_mask, labels)
    handle.remove()
    assert len(calls) > plain_calls, "gradient checkpointing did not recompute the block"

    assert set(checkpointed) == set(reference)
    assert len(reference) == len([p for p in model.parameters() if p.requires_grad])
    for name, grad in reference.items():
        torch.testing.assert_close(checkpointed[name], grad, rtol=1e-5, atol=1e-5, msg=name)


# ============================================================================== 9. bf16 autocast and fully padded rows
@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_bf16_autocast_forward_backward_no_nan(arch):
    model = task_model(ElcBertForMaskedLM, arch).train()
    input_ids, attention_mask = padded_batch([11, 7, 4, 6])
    attention_mask[2] = 0  # a fully padded row
    labels = torch.full_like(input_ids, -100)
    labels[:, 1:3] = input_ids[:, 1:3]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids, attention_mask=attention_mask, labels=labels, output_hidden_states=True)
        plain = model(input_ids, attention_mask=attention_mask)
    assert torch.isfinite(out.loss)
    assert torch.isfinite(out.logits.float()).all()
    assert torch.isfinite(plain.logits.float()).all()
    assert all(torch.isfinite(h.float()).all() for h in out.hidden_states)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads, "no gradient reached the parameters"
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_fully_padded_row_float32(arch, implementation):
    model = task_model(ElcBertForMaskedLM, arch, attn_implementation=implementation)
    input_ids, attention_mask = padded_batch([11, 7, 4])
    attention_mask[1] = 0
    with torch.no_grad():
        out = model(
            input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            output_attentions=implementation == "eager",
        )
        others = model(input_ids[[0, 2]], attention_mask=attention_mask[[0, 2]]).logits
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(h).all() for h in out.hidden_states)
    assert all(torch.isfinite(a).all() for a in out.attentions or ())
    # The empty row does not disturb the others.
    torch.testing.assert_close(out.logits[[0, 2]], others, rtol=1e-5, atol=1e-5)
    # And the gradient is finite too.
    model.train()
    labels = torch.full_like(input_ids, -100)
    labels[:, 1] = input_ids[:, 1]
    loss = model(input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ============================================================================== 10. Auto classes round trip
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "weighted_output")], ids=arch_id)
@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_auto_round_trip(tmp_path, model_class, arch):
    model = task_model(model_class, arch, positional_split="interleaved")
    input_ids, attention_mask = task_inputs(model_class)
    model.save_pretrained(tmp_path)
    loaded = AUTO[model_class].from_pretrained(tmp_path)
    assert type(loaded) is model_class
    assert loaded.config.layer_combination == arch[0]
    assert loaded.config.positional_split == "interleaved"
    assert not loaded.training
    # Bit-identical weights, no key lost or added.
    original_state, loaded_state = model.state_dict(), loaded.state_dict()
    assert set(loaded_state) == set(original_state)
    for key, tensor in original_state.items():
        assert torch.equal(loaded_state[key], tensor), key
    with torch.no_grad():
        expected = task_outputs(model_class, model(input_ids, attention_mask=attention_mask))
        actual = task_outputs(model_class, loaded(input_ids, attention_mask=attention_mask))
    # Not torch.equal: the loaded tensors live in memory-mapped safetensors storage with a different alignment, and
    # CPU BLAS kernels may then round the last bit differently (seen: 6e-8). Identical weights are checked above.
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_token_type_ids_accepted_and_ignored(model_class):
    model = task_model(model_class)
    input_ids, attention_mask = task_inputs(model_class)
    token_type_ids = torch.randint(0, 2, input_ids.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with_types = task_outputs(
            model_class, model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        )
        without = task_outputs(model_class, model(input_ids=input_ids, attention_mask=attention_mask))
    for a, b in zip(with_types, without, strict=True):
        assert torch.equal(a, b)


# ============================================================================== 12. task heads: losses and backward
def _labels_for(model_class, input_ids, attention_mask):
    gen = torch.Generator().manual_seed(7)
    B = input_ids.shape[0]
    if model_class is ElcBertForSequenceClassification:
        return {"labels": torch.randint(0, NUM_LABELS, (B,), generator=gen)}
    if model_class is ElcBertForTokenClassification:
        labels = torch.randint(0, NUM_LABELS, input_ids.shape, generator=gen)
        return {"labels": labels.masked_fill(attention_mask == 0, -100)}
    if model_class is ElcBertForMultipleChoice:
        return {"labels": torch.randint(0, input_ids.shape[1], (B,), generator=gen)}
    if model_class is ElcBertForQuestionAnswering:
        lengths = attention_mask.sum(1)
        start = torch.stack([torch.randint(0, int(n), (1,), generator=gen)[0] for n in lengths])
        return {"start_positions": start, "end_positions": torch.minimum(start + 2, lengths - 1)}
    labels = torch.full_like(input_ids, -100)
    labels[:, 1:4] = input_ids[:, 1:4]
    return {"labels": labels}


def _expected_loss(model_class, logits_output, labels):
    if model_class is ElcBertForQuestionAnswering:
        start = F.cross_entropy(logits_output.start_logits.double(), labels["start_positions"])
        end = F.cross_entropy(logits_output.end_logits.double(), labels["end_positions"])
        return (start + end) / 2
    logits = logits_output.logits.double()
    if model_class is ElcBertForTokenClassification:
        return F.cross_entropy(logits.flatten(0, 1), labels["labels"].flatten(), ignore_index=-100)
    return F.cross_entropy(logits, labels["labels"])


HEAD_CLASSES = [
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
]


@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base")], ids=arch_id)
@pytest.mark.parametrize("model_class", HEAD_CLASSES + [ElcBertForMaskedLM], ids=class_id)
def test_task_head_loss_and_backward(model_class, arch):
    model = task_model(model_class, arch).train()
    input_ids, attention_mask = task_inputs(model_class)
    labels = _labels_for(model_class, input_ids, attention_mask)
    out = model(input_ids, attention_mask=attention_mask, **labels)
    assert out.loss is not None and out.loss.dim() == 0
    assert torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient for {name}"
        assert torch.isfinite(p.grad).all(), name
    # The head's own output layer must get a nonzero gradient.
    assert any(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if not n.startswith("elc_bert."))
    B = input_ids.shape[0]
    if model_class is ElcBertForSequenceClassification:
        assert out.logits.shape == (B, NUM_LABELS)
    elif model_class is ElcBertForTokenClassification:
        assert out.logits.shape == (B, input_ids.shape[1], NUM_LABELS)
    elif model_class is ElcBertForMultipleChoice:
        assert out.logits.shape == (B, input_ids.shape[1])
    elif model_class is ElcBertForQuestionAnswering:
        assert out.start_logits.shape == out.end_logits.shape == input_ids.shape
    if model_class is not ElcBertForMaskedLM:
        with torch.no_grad():
            expected = _expected_loss(model_class, out, labels)
        torch.testing.assert_close(out.loss.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "model_class, loss_type",
    [
        (ElcBertForMaskedLM, "ForMaskedLM"),
        (ElcBertForSequenceClassification, "ForSequenceClassification"),
        (ElcBertForTokenClassification, "ForTokenClassification"),
        (ElcBertForQuestionAnswering, "ForQuestionAnswering"),
        (ElcBertForMultipleChoice, None),
    ],
    ids=lambda value: class_id(value) if isinstance(value, type) else None,
)
def test_heads_compute_their_loss_with_the_library_loss_function(model_class, loss_type):
    """The heads' losses are the `transformers` ones their class names select (`loss_function`), so a loss function
    set on the model is the one used. Multiple choice has none in `LOSS_MAPPING` (the library's own heads call
    CrossEntropyLoss): its default is a cross-entropy over the choices, never the causal-LM fallback, and is
    replaced the same way."""
    model = task_model(model_class)
    if loss_type is not None:
        assert model.loss_function is LOSS_MAPPING[loss_type]
    else:
        assert model.loss_function is not LOSS_MAPPING["ForCausalLM"]
    input_ids, attention_mask = task_inputs(model_class)
    model.loss_function = lambda *args, **kwargs: torch.tensor(7.0)
    out = model(input_ids, attention_mask=attention_mask, **_labels_for(model_class, input_ids, attention_mask))
    assert out.loss.item() == 7.0


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse_prediction"])
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base"), ("elc", "weighted_output")], ids=arch_id)
def test_masked_lm_logits_with_labels(arch, sparse):
    """B x T x V logits with or without labels, like every transformers MLM; with `sparse_prediction` (the
    pretraining job's setting) the head runs on the labelled positions only: N x V in row-major order."""
    model = task_model(ElcBertForMaskedLM, arch, sparse_prediction=sparse)
    input_ids, attention_mask = padded_batch([11, 7, 4])
    labels = torch.full_like(input_ids, -100)
    positions = [(0, 1), (0, 5), (0, 10), (1, 0), (1, 6), (2, 2)]
    targets = torch.tensor([9, 20, 33, 50, 61, 77])
    for (row, col), target in zip(positions, targets):
        labels[row, col] = target
    with torch.no_grad():
        full = model(input_ids, attention_mask=attention_mask).logits
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
    V = TINY["vocab_size"]
    assert full.shape == (3, 11, V)
    picked = torch.stack([full[r, c] for r, c in positions])  # row-major order
    if sparse:
        assert out.logits.shape == (len(positions), V)
        torch.testing.assert_close(out.logits, picked, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(out.logits, full, rtol=1e-5, atol=1e-5)
    expected = F.cross_entropy(picked.double(), targets)
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-5, atol=1e-6)


# ============================================================================== 14. initialisation
@pytest.fixture(scope="module")
def big_model():
    torch.manual_seed(0)
    config = ElcBertConfig(
        vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512
    )
    return ElcBertForMaskedLM(config)


TRUNC_STD = 0.8796  # std of a standard normal truncated at +-2


def test_init_embedding_std(big_model):
    D = 256
    sigma = math.sqrt(2.0 / (5.0 * D))
    weight = big_model.get_input_embeddings().weight.detach()
    assert weight.std().item() == pytest.approx(sigma * TRUNC_STD, rel=0.1)
    assert weight.abs().max().item() <= 2 * sigma + 1e-6
    assert weight.mean().abs().item() < 0.05 * sigma


def test_init_ffn_scaled_by_depth_and_attention_not(big_model):
    D = 256
    sigma = math.sqrt(2.0 / (5.0 * D))
    state = big_model.state_dict()
    per_layer = {}
    for key, tensor in state.items():
        if "mlp" in key and tensor.dim() == 2:
            layer = int(key.split("layers.")[1].split(".")[0])
            per_layer.setdefault(layer, []).append((key, tensor))
    assert sorted(per_layer) == [0, 1, 2, 3], "no FFN weights found through the 'mlp' state-dict keys"
    for layer, tensors in per_layer.items():
        expected = sigma * TRUNC_STD * math.sqrt(1.0 / (2.0 * (layer + 1)))
        for key, tensor in tensors:
            assert tensor.float().std().item() == pytest.approx(expected, rel=0.1), key
    # Attention projections are not rescaled.
    attention = [(k, t) for k, t in state.items() if "attention" in k and t.dim() == 2]
    assert attention
    for key, tensor in attention:
        assert tensor.float().std().item() == pytest.approx(sigma * TRUNC_STD, rel=0.1), key
    # Biases start at zero.
    for key, tensor in state.items():
        if key.endswith("bias") and "layer_norm" not in key:
            assert torch.all(tensor == 0), key


def test_init_elc_base_leans_on_predecessor(big_model):
    alpha = big_model.layer_weights()
    for n in range(alpha.shape[0]):
        assert alpha[n].argmax().item() == n
        # theta = (0, ..., 0, 1): alpha_prev = e / (e + n)
        assert alpha[n, n].item() == pytest.approx(math.e / (math.e + n), abs=1e-6)


@pytest.mark.parametrize("variant", ["zero", "normalized", "weighted_output"])
def test_init_other_variants_uniform(variant):
    torch.manual_seed(0)
    model = ElcBertModel(ElcBertConfig(**{**TINY, "elc_variant": variant}))
    alpha = model.layer_weights()
    for n in range(alpha.shape[0]):
        torch.testing.assert_close(alpha[n, : n + 1], torch.full((n + 1,), 1.0 / (n + 1)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ["base", "weighted_output"])
def test_gradients_match_autograd_through_naive_reference(reference_checkpoint, variant):
    """The ELC mixture's gradients (LayerStack) equal autograd through the naive float64 reference, for the layer
    weights, the embeddings and the first block's feed-forward."""
    folder, sd = reference_checkpoint(elc=True, weighted_output=variant == "weighted_output", seed=5)
    model = _load_reference(folder, ("elc", variant), "halves")
    input_ids, attention_mask = padded_batch([14, 9], vocab_size=REF_DIMS["vocab_size"], seed=3)
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()

    leaves = {k: v.to(torch.float64).requires_grad_() for k, v in sd.items() if v.is_floating_point()}
    leaves["classifier.nonlinearity.5.weight"] = leaves["embedding.word_embedding.weight"]  # tied
    ref = naive_forward(
        leaves,
        input_ids,
        attention_mask,
        num_heads=REF_DIMS["num_heads"],
        layer_combination="elc",
        elc_variant=variant,
    )
    scored = labels != -100
    F.cross_entropy(ref["mlm_logits"][scored], labels[scored]).backward()

    pairs = {
        f"elc_bert.encoder.layers.{i}.prev_layer_weights": f"transformer.layers.{i}.prev_layer_weights"
        for i in range(3)
    }
    pairs["elc_bert.embeddings.word_embeddings.weight"] = "embedding.word_embedding.weight"
    pairs["elc_bert.encoder.layers.0.mlp.up_proj.weight"] = "transformer.layers.0.mlp.mlp.1.weight"
    if variant == "weighted_output":
        pairs["elc_bert.encoder.output_layer_weights"] = "transformer.prev_layer_weights"
    ours = dict(model.named_parameters())
    for our_name, ref_name in pairs.items():
        expected = leaves[ref_name].grad
        assert_close(ours[our_name].grad, expected, atol=1e-6 + 1e-4 * expected.abs().max().item(), what=our_name)


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_a_forward_pass_leaves_no_reference_cycle(arch):
    """The mixtures' shared state (LayerStack) keeps no tensor of the graph past the forward pass: outputs and their
    graph are freed as soon as they are dropped, without waiting for the garbage collector."""
    model = task_model(ElcBertModel, arch).train()
    input_ids, attention_mask = padded_batch([11, 7, 4])
    gc.collect()
    gc.disable()
    try:
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        states = [weakref.ref(state) for state in (out.last_hidden_state, *out.hidden_states)]
        del out
        assert all(state() is None for state in states)
    finally:
        gc.enable()


def test_layer_stack_backward_twice_and_from_an_intermediate_state():
    """retain_graph backward passes do not accumulate into each other, and a loss on an intermediate y_n works."""
    model = ElcBertModel(ElcBertConfig(**TINY)).train()
    input_ids, attention_mask = padded_batch([9, 6], vocab_size=TINY["vocab_size"], seed=4)
    out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    loss = out.last_hidden_state.pow(2).mean()
    loss.backward(retain_graph=True)
    first = model.encoder.layers[1].prev_layer_weights.grad.clone()
    model.zero_grad()
    loss.backward(retain_graph=True)
    assert torch.allclose(model.encoder.layers[1].prev_layer_weights.grad, first, atol=1e-7)

    model.zero_grad()
    out.hidden_states[2].pow(2).mean().backward()  # y_2 depends on layers 0 and 1 only
    assert model.encoder.layers[1].prev_layer_weights.grad.abs().sum() > 0
    assert model.encoder.layers[2].prev_layer_weights.grad is None
    # The same gradient through the plain residual-free path computed without the stack: finite differences.
    theta = model.encoder.layers[1].prev_layer_weights
    with torch.no_grad():
        model.eval()
        base = model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[2].pow(2).mean()
        theta[0] += 1e-3
        moved = (
            model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[2].pow(2).mean()
        )
        theta[0] -= 1e-3
    assert abs((moved - base).item() / 1e-3 - theta.grad[0].item()) < 1e-2 * max(1.0, abs(theta.grad[0].item()))


# ============================================================================== bad input to forward
@pytest.mark.parametrize("model_class", [ElcBertModel, ElcBertForMaskedLM, ElcBertForTokenClassification], ids=class_id)
def test_forward_rejects_bad_input_naming_the_argument(model_class):
    """Ids outside the vocabulary, an empty batch, a mask or labels of another shape: a ValueError that names the
    argument, before any computation (on the CPU an embedding lookup would say "index out of range in self"; on
    CUDA a device-side assert)."""
    model = task_model(model_class)
    input_ids, attention_mask = padded_batch([7, 4])
    with pytest.raises(ValueError, match=r"input_ids holds 96, outside the vocabulary of 96"):
        model(torch.where(input_ids == input_ids[0, 1], TINY["vocab_size"], input_ids), attention_mask=attention_mask)
    with pytest.raises(ValueError, match=r"input_ids holds -1"):
        model(torch.full_like(input_ids, -1), attention_mask=attention_mask)
    with pytest.raises(ValueError, match=r"non-empty B x T batch"):
        model(input_ids[:0], attention_mask=attention_mask[:0])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 6\)"):
        model(input_ids, attention_mask=attention_mask[:, :6])
    if model_class is not ElcBertModel:
        with pytest.raises(ValueError, match=r"labels has shape \(2, 5\)"):
            model(input_ids, attention_mask=attention_mask, labels=input_ids[:, :5])


# ============================================================================== no host reads in forward
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_an_eager_forward_reads_no_tensor_value_on_the_host(arch, packed, monkeypatch):
    """On CUDA every `Tensor.item` / `int(tensor)` / `bool(tensor)` is a host-device synchronisation: the package's
    forward and loss make none (spied on the CPU; the library's own code is not ours to judge). Ids outside the
    vocabulary are still named, once the lookup has failed."""
    import inspect

    package = str(Path(elc_bert_package.__file__).parent)
    reads = []

    def spy(name):
        original = getattr(torch.Tensor, name)

        def wrapped(self, *args, **kwargs):
            caller = inspect.currentframe().f_back
            if caller.f_code.co_filename.startswith(package):
                reads.append(f"{name} at {caller.f_code.co_filename}:{caller.f_lineno}")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapped)

    model = task_model(ElcBertForMaskedLM, arch).train()
    input_ids, attention_mask = padded_batch([9, 5])
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    for name in ("item", "__int__", "__bool__", "__float__", "__index__", "tolist"):
        spy(name)
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 2, 0, 1, 5, 6, 7, 8]]) if packed else None
    model(input_ids, attention_mask=attention_mask, labels=labels, position_ids=position_ids).loss.backward()
    assert not reads, reads
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full_like(input_ids, TINY["vocab_size"]), attention_mask=attention_mask)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("arch", [("elc", "base"), ("residual", "base")], ids=arch_id)
def test_a_cuda_training_step_synchronises_nowhere_in_the_package(arch, packed):
    """On CUDA, under `torch.cuda.set_sync_debug_mode("warn")`, a training step (forward, loss, backward, LAMB step)
    raises no synchronisation warning from the package's own lines (the library's code is not ours to judge)."""
    import warnings

    from elc_bert.training.optim import Lamb, parameter_groups

    package = str(Path(elc_bert_package.__file__).parent)
    model = task_model(ElcBertForMaskedLM, arch).cuda().train()
    optimizer = Lamb(parameter_groups(model, 0.1), lr=1e-3)
    input_ids, attention_mask = (tensor.cuda() for tensor in padded_batch([9, 5]))
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 2, 0, 1, 5, 6, 7, 8]]).cuda() if packed else None

    def step():
        model(input_ids, attention_mask=attention_mask, labels=labels, position_ids=position_ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the first step initialises lazily (optimizer state, kernels)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    ours = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if w.filename.startswith(package)]
    assert not ours, ours


# ================================================================================ operators of a training step
def _script(name: str):
    """A module of scripts/ (the benchmarks whose counts the tests below hold), imported by name."""
    import importlib
    import sys

    folder = str(Path(__file__).parents[1] / "scripts")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def _operators_of_a_training_step(layer_combination: str) -> int:
    """The aten operators that the forward and backward of one MLM training step of a 12-layer model (strict-small's
    depth and heads, narrow) dispatch, counted as `scripts/profile_step.py` counts them."""
    count_operators = _script("profile_step").count_operators

    torch.manual_seed(0)
    config = ElcBertConfig(
        **{**TINY, "hidden_size": 48, "num_hidden_layers": 12, "num_attention_heads": 6, "intermediate_size": 64},
        layer_combination=layer_combination,
        sparse_prediction=True,
        attn_implementation="sdpa",
    )
    model = ElcBertForMaskedLM(config).train()
    input_ids = torch.randint(7, config.vocab_size, (2, 16))
    labels = torch.where(torch.arange(16) % 5 == 0, input_ids, -100)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    model_operators, _ = count_operators(model, torch.optim.AdamW(model.parameters()), batch)
    return sum(model_operators.values())


@pytest.mark.parametrize("layer_combination, ceiling", [("elc", 2798), ("residual", 2540)])
def test_operators_per_training_step_do_not_grow_back(layer_combination, ceiling):
    """Each operator is at least one kernel launch on a GPU, where these small models are launch-bound: the count of
    one training step stays at most what it is now (3,368 for ELC-BERT and 2,807 for LTG-BERT before the positional
    terms became one matrix product and one gather, and the layer mixture one matrix-vector product; 2,794 and 2,536
    before the activations were cut: `GatedNorm`, `RelativeBias`; 12 more since `GatedNorm`'s backward recomputes
    through public autograd, one `detach` a block, a view that launches no kernel)."""
    assert _operators_of_a_training_step(layer_combination) <= ceiling


# ================================================================================ activation memory of a training step
def _saved_activations(model, batch) -> int:
    """Bytes of the distinct tensors autograd keeps for the backward pass of one training step, parameters excluded
    (as `scripts/bench_model.py` counts them)."""
    saved_activation_mib = _script("bench_model").saved_activation_mib

    return round(saved_activation_mib(model, batch) * 2**20)


@pytest.mark.parametrize("name", ["elc-bert", "ltg-bert"])
def test_activation_memory_of_a_training_step_is_within_1_3x_berts(name):
    """At strict-small's dims, a training step keeps at most 1.3x the activations of `BertForMaskedLM` of like size
    (1.44x for ELC-BERT before the GeGLU's inner activations and the gather's input were no longer kept)."""
    build = _script("bench_model").build

    torch.manual_seed(0)
    input_ids = torch.randint(7, 6144, (2, 128))
    labels = torch.where(torch.rand(2, 128) < 0.15, input_ids, -100)
    batch = {"input_ids": input_ids, "labels": labels}
    bert = _saved_activations(build("bert", 6144, "sdpa").train(), batch)
    ours = _saved_activations(build(name, 6144, "sdpa").train(), batch)
    assert ours <= 1.3 * bert, (ours / bert, ours, bert)


def test_activation_memory_script_counts_what_the_efficient_attention_keeps():
    """`scripts/activation_memory.py`'s stand-in for CUDA's memory-efficient attention is what our models call; it
    keeps one B x H x T x T tensor per block (the bias, which takes a gradient), and less in all than the CPU math
    path keeps."""
    efficient_attention_saves = _script("activation_memory").efficient_attention_saves

    torch.manual_seed(0)
    config = ElcBertConfig(**TINY, sparse_prediction=True, attn_implementation="sdpa")
    model = ElcBertForMaskedLM(config).train()
    input_ids = torch.randint(7, config.vocab_size, (2, 16))
    labels = torch.where(torch.arange(16) % 3 == 0, input_ids, -100)
    square = (2, config.num_attention_heads, 16, 16)

    def squares_kept() -> int:
        kept = {}

        def pack(tensor):
            if tuple(tensor.shape) == square:
                kept[tensor.untyped_storage().data_ptr()] = tensor
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(input_ids=input_ids, labels=labels).loss.backward()
        return len(kept)

    batch = {"input_ids": input_ids, "labels": labels}
    as_run = _saved_activations(model, batch)
    with efficient_attention_saves():
        assert squares_kept() == config.num_hidden_layers
        assert _saved_activations(model, batch) < as_run


@pytest.mark.parametrize("layer_combination", ["elc", "residual"])
def test_a_training_step_takes_torch_func_grad_and_a_second_derivative(layer_combination):
    """The model's own autograd functions (`WeightedSum`, `RelativeBias`, `GatedNorm`) run under `torch.func.grad`
    (its gradients equal autograd's) and are differentiable twice (a gradient penalty on the input embeddings)."""
    torch.manual_seed(0)
    config = ElcBertConfig(**TINY, layer_combination=layer_combination, attn_implementation="sdpa")
    model = ElcBertForMaskedLM(config).train()  # TINY has no dropout: both runs see the same function
    input_ids = torch.randint(7, config.vocab_size, (2, 9))
    params = dict(model.named_parameters())

    def loss_of(parameters):
        return torch.func.functional_call(model, parameters, (input_ids,), {"labels": input_ids}).loss

    functional = torch.func.grad(loss_of)(params)
    model.zero_grad()
    model(input_ids, labels=input_ids).loss.backward()
    for name, parameter in params.items():
        assert_close(functional[name], parameter.grad, atol=1e-6, rtol=1e-5)

    embeddings = model.get_input_embeddings()(input_ids).detach().requires_grad_()
    loss = model(inputs_embeds=embeddings, labels=input_ids).loss
    (grad,) = torch.autograd.grad(loss, embeddings, create_graph=True)
    model.zero_grad()
    grad.square().sum().backward()
    assert all(parameter.grad is not None for parameter in model.parameters() if parameter.requires_grad)


def test_gated_norm_is_the_geglu_product_normalised_keeping_the_up_projection_alone():
    """`GatedNorm` computes LN(value * GELU(gate)) and its gradient as autograd does from the same operators (bit for
    bit, in float32 and under bf16 autocast), passes gradcheck and gradgradcheck in float64, and keeps nothing but its
    input."""
    torch.manual_seed(0)

    def plain(up):
        value, gate = up.chunk(2, dim=-1)
        return F.layer_norm(value * F.gelu(gate, approximate="tanh"), value.shape[-1:], eps=1e-7)

    up = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u: GatedNorm.apply(u, 1e-7), (up,))
    assert torch.autograd.gradgradcheck(lambda u: GatedNorm.apply(u, 1e-7), (up,))
    for autocast in [False, True]:
        up = torch.randn(3, 7, 2 * 24, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            projected = up.to(torch.bfloat16) if autocast else up * 1
            saved = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t, kept=saved: kept.append(t) or t, lambda t: t):
                ours = GatedNorm.apply(projected, 1e-7)
            expected = plain(projected)
        assert ours.dtype == expected.dtype and torch.equal(ours, expected)
        assert {t.untyped_storage().data_ptr() for t in saved} == {projected.untyped_storage().data_ptr()}
        grad = torch.randn_like(ours)
        (ours_grad,) = torch.autograd.grad(ours, up, grad, retain_graph=True)
        (expected_grad,) = torch.autograd.grad(expected, up, grad)
        assert torch.equal(ours_grad, expected_grad)


def test_relative_bias_is_the_two_terms_at_their_indices_keeping_the_index_alone():
    """`RelativeBias` sums the relative scores at the two flat indices of each pair, against a loop over the pairs;
    gradcheck and gradgradcheck in float64; its backward keeps the index, not the 2 x H x B x T(2P-1) scores."""
    torch.manual_seed(0)
    heads, batch, length, buckets = 3, 2, 5, 7
    relative = torch.randn(2, heads, batch, length * buckets, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, length * buckets, (2, 1, 1, length * length)).expand(2, batch, heads, length * length)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        bias = RelativeBias.apply(relative, index)
    expected = torch.empty(batch, heads, length * length, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for pair in range(length * length):
                expected[b, h, pair] = relative[0, h, b, index[0, b, h, pair]] + relative[1, h, b, index[1, b, h, pair]]
    assert torch.equal(bias, expected) and bias.is_contiguous()
    assert [t.untyped_storage().data_ptr() for t in saved] == [index.untyped_storage().data_ptr()]
    assert torch.autograd.gradcheck(lambda r: RelativeBias.apply(r, index), (relative,))
    assert torch.autograd.gradgradcheck(lambda r: RelativeBias.apply(r, index), (relative,))


def test_flex_kernel_options_fit_the_device(monkeypatch):
    """Without kernel options, FlexAttention runs at its defaults where they fit (CPU; a GPU with the shared memory
    they need) and with one pipeline stage where they do not (an H100's 232,448 bytes per block)."""
    from types import SimpleNamespace

    from elc_bert.models.modeling_elc_bert import FLEX_DEFAULT_SHARED_MEMORY, flex_kernel_options

    assert flex_kernel_options(torch.device("cpu")) is None
    for shared_memory, expected in [(232_448, {"num_stages": 1}), (FLEX_DEFAULT_SHARED_MEMORY, None)]:
        properties = SimpleNamespace(shared_memory_per_block_optin=shared_memory)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device, p=properties: p)
        assert flex_kernel_options(torch.device("cuda")) == expected
