"""ELC-BERT and LTG-BERT behave like transformers' own encoders: attention implementations chosen through the config,
attention probabilities that are part of the graph, hidden states selected by index, `torch.export`,
`torch.compile(fullgraph=True)` of a training step, B x T x V MLM logits through the Trainer (and the opt-in
`sparse_prediction`), non-persistent buffers set by `_init_weights`, `ignore_mismatched_sizes`.

The layer-fusion classes have their own file, tests/test_layer_fusion_conformance.py.
"""

import numpy as np
import pytest
import torch
from helpers import (
    AUTO,
    TASK_CLASSES,
    TINY,
    arch_id,
    build_model,
    class_id,
    padded_batch,
    task_inputs,
    task_model,
    task_outputs,
)
from transformers import Trainer, TrainingArguments

from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForSequenceClassification,
    ElcBertModel,
    InputError,
)
from elc_bert.models.modeling_elc_bert import relative_position_buckets

IMPLEMENTATIONS = ["eager", "sdpa"]


# ============================================================================== attention implementations
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base"), ("elc", "weighted_output")], ids=arch_id)
@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_attn_implementation_through_from_config_and_from_pretrained(model_class, arch, tmp_path):
    """`attn_implementation="eager" | "sdpa"` is accepted by `from_config` and `from_pretrained`, lands in
    `config._attn_implementation`, and both give the same outputs to 1e-5 in float32."""
    task_model(model_class, arch).save_pretrained(tmp_path)
    input_ids, attention_mask = task_inputs(model_class)
    outputs = {}
    for implementation in IMPLEMENTATIONS:
        loaded = AUTO[model_class].from_pretrained(tmp_path, attn_implementation=implementation)
        assert type(loaded) is model_class
        assert loaded.config._attn_implementation == implementation
        fresh = AUTO[model_class].from_config(loaded.config, attn_implementation=implementation)
        assert fresh.config._attn_implementation == implementation
        with torch.no_grad():
            outputs[implementation] = task_outputs(model_class, loaded(input_ids, attention_mask=attention_mask))
    for eager, sdpa in zip(outputs["eager"], outputs["sdpa"]):
        torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_class, arch",
    [
        (ElcBertForMaskedLM, ("elc", "weighted_output")),
        (ElcBertForMaskedLM, ("residual", "base")),
        (ElcBertForMultipleChoice, ("elc", "base")),
    ],
    ids=["MaskedLM-elc-weighted_output", "MaskedLM-residual", "MultipleChoice-elc-base"],
)
def test_flex_attention_equals_eager_without_a_dense_bias(model_class, arch, tmp_path, monkeypatch):
    """`attn_implementation="flex_attention"` (the relative terms as FlexAttention's score_mod over bucket indices,
    padding as its block mask) gives the explicit softmax's outputs to 1e-5 on padded batches, and never builds the
    B x H x T x T bias (no `gather` of the bucket table, which the other implementations use to build it). On CPU
    FlexAttention runs without gradients only, as torch says."""
    task_model(model_class, arch).save_pretrained(tmp_path)
    input_ids, attention_mask = task_inputs(model_class)
    eager = AUTO[model_class].from_pretrained(tmp_path, attn_implementation="eager")
    flex = AUTO[model_class].from_pretrained(tmp_path, attn_implementation="flex_attention")
    assert flex.config._attn_implementation == "flex_attention"
    gathers = []
    original_gather = torch.Tensor.gather
    monkeypatch.setattr(torch.Tensor, "gather", lambda *a, **k: gathers.append(1) or original_gather(*a, **k))
    with torch.no_grad():
        expected = task_outputs(model_class, eager(input_ids, attention_mask=attention_mask))
        gathers.clear()
        actual = task_outputs(model_class, flex(input_ids, attention_mask=attention_mask))
    assert gathers == []
    for ours, theirs in zip(actual, expected):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_flex_attention_refuses_attention_dropout_in_training():
    model = task_model(ElcBertForMaskedLM, attn_implementation="flex_attention", attention_probs_dropout_prob=0.1)
    input_ids, attention_mask = padded_batch([7, 4])
    with pytest.raises(InputError, match="no attention dropout"):
        model.train()(input_ids, attention_mask=attention_mask)


@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "normalized")], ids=arch_id)
def test_both_implementations_train_to_the_same_gradients(arch):
    """Dropout off, the backward of "sdpa" equals that of the explicit softmax."""
    input_ids, attention_mask = padded_batch([11, 7, 4])
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    grads = {}
    for implementation in IMPLEMENTATIONS:
        model = task_model(ElcBertForMaskedLM, arch, attn_implementation=implementation).train()
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads[implementation] = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert grads["eager"].keys() == grads["sdpa"].keys()
    for name, grad in grads["eager"].items():
        torch.testing.assert_close(grads["sdpa"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sdpa_returns_no_attentions_and_says_so(caplog):
    model = task_model(ElcBertModel, attn_implementation="sdpa")
    input_ids, attention_mask = padded_batch([5, 3])
    with caplog.at_level("WARNING"):
        out = model(input_ids, attention_mask=attention_mask, output_attentions=True)
    assert out.attentions is None
    assert "eager" in caplog.text


@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base")], ids=arch_id)
def test_attentions_are_the_tensors_the_output_is_computed_from(arch):
    """`retain_grad` on the returned attention probabilities gets a gradient: they are in the graph, not a copy."""
    model = task_model(ElcBertForMaskedLM, arch, attn_implementation="eager").train()
    input_ids, attention_mask = padded_batch([11, 7, 4])
    out = model(input_ids, attention_mask=attention_mask, output_attentions=True)
    for probabilities in out.attentions:
        probabilities.retain_grad()
    out.logits.sum().backward()
    for layer, probabilities in enumerate(out.attentions):
        assert probabilities.grad is not None, f"layer {layer}: no gradient reached the returned attentions"
        assert probabilities.grad.abs().sum() > 0


# ============================================================================== hidden states
@pytest.mark.parametrize("selection", [[0, 2], 1, 0, [-1]], ids=str)
def test_output_hidden_states_selects_by_index(selection):
    """As in transformers 5, `output_hidden_states` may be an index or a list of indices: those states are kept,
    the others are None, negative indices count from the end."""
    model = task_model(ElcBertModel)
    input_ids, attention_mask = padded_batch([7, 4])
    with torch.no_grad():
        every = model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        some = model(input_ids, attention_mask=attention_mask, output_hidden_states=selection).hidden_states
    count = TINY["num_hidden_layers"] + 1
    wanted = {i % count for i in ([selection] if isinstance(selection, int) else selection)}
    assert len(some) == count
    for i, state in enumerate(some):
        if i in wanted:
            torch.testing.assert_close(state, every[i], rtol=0, atol=0)
        else:
            assert state is None, f"state {i} was not asked for"


def test_output_hidden_states_from_the_config():
    model = task_model(ElcBertForSequenceClassification, output_hidden_states=True)
    input_ids, attention_mask = padded_batch([7, 4])
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask)
    assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1


# ============================================================================== buffers, mismatched sizes
def test_bucket_table_is_a_non_persistent_buffer_set_by_init_weights(tmp_path):
    """The bucket table is not saved, and a model loaded from a checkpoint (built on the meta device, then
    initialised by `_init_weights`) has the table of the equations."""
    model = task_model(ElcBertForMaskedLM)
    assert "elc_bert.position_bucket_table" not in model.state_dict()
    model.save_pretrained(tmp_path)
    loaded = ElcBertForMaskedLM.from_pretrained(tmp_path)
    expected = relative_position_buckets(
        loaded.config.max_position_embeddings, loaded.config.position_bucket_size, loaded.config.max_position_embeddings
    )
    assert torch.equal(loaded.elc_bert.position_bucket_table, expected)


def test_ignore_mismatched_sizes_loads_another_label_count(tmp_path):
    task_model(ElcBertForSequenceClassification).save_pretrained(tmp_path)
    with pytest.raises(RuntimeError):
        ElcBertForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    model, info = ElcBertForSequenceClassification.from_pretrained(
        tmp_path, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert model.classifier.out_proj.out_features == 5
    assert {key for key, *_ in info["mismatched_keys"]} == {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    input_ids, attention_mask = padded_batch([7, 4])
    assert model(input_ids, attention_mask=attention_mask).logits.shape == (2, 5)


# ============================================================================== torch.export and torch.compile
@pytest.mark.parametrize("model_class", TASK_CLASSES, ids=class_id)
def test_torch_export_with_an_attention_mask(model_class):
    model = task_model(model_class)
    input_ids, attention_mask = task_inputs(model_class)
    program = torch.export.export(model, (input_ids,), {"attention_mask": attention_mask})
    with torch.no_grad():
        expected = task_outputs(model_class, model(input_ids, attention_mask=attention_mask))
        exported = program.module()(input_ids, attention_mask=attention_mask)
    for ours, theirs in zip(task_outputs(model_class, exported), expected):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "arch, sparse", [(("elc", "base"), True), (("elc", "weighted_output"), False)], ids=["elc-sparse", "elc-wo"]
)
def test_torch_compile_fullgraph_training_step(arch, sparse):
    """A padded training batch compiles into one graph (fullgraph=True refuses any graph break), a second batch
    with other labels runs without recompiling, and loss and gradients equal the eager ones."""
    torch._dynamo.reset()
    eager = task_model(ElcBertForMaskedLM, arch, sparse_prediction=sparse).train()
    compiled_model = task_model(ElcBertForMaskedLM, arch, sparse_prediction=sparse).train()
    compiled = torch.compile(compiled_model, fullgraph=True)
    input_ids, attention_mask = padded_batch([11, 7, 4])
    generator = torch.Generator().manual_seed(0)
    for step in range(2):
        labels = torch.where(torch.rand(input_ids.shape, generator=generator) < 0.4, input_ids, -100)
        labels[0, 1] = input_ids[0, 1]
        eager.zero_grad()
        compiled_model.zero_grad()
        expected = eager(input_ids, attention_mask=attention_mask, labels=labels).loss
        expected.backward()
        with torch._dynamo.config.patch(error_on_recompile=step > 0):
            loss = compiled(input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
        for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch._dynamo.reset()


# ============================================================================== the Trainer and MLM logits
class _Rows(torch.utils.data.Dataset):
    def __init__(self, input_ids, attention_mask, labels):
        self.rows = [
            {"input_ids": i, "attention_mask": m, "labels": label}
            for i, m, label in zip(input_ids, attention_mask, labels)
        ]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _mlm_rows(count=6):
    input_ids, attention_mask = padded_batch([9] * count, seed=5)
    generator = torch.Generator().manual_seed(1)
    labels = torch.where(torch.rand(input_ids.shape, generator=generator) < 0.3, input_ids, -100)
    labels[:, 1] = input_ids[:, 1]
    return input_ids, attention_mask, labels


def test_trainer_predict_and_run_mlm_accuracy(tmp_path):
    """B x T x V logits by default: `Trainer.evaluate` with a run_mlm-style `compute_metrics` (accuracy over the
    labelled positions) works and agrees with the model called directly."""
    model = task_model(ElcBertForMaskedLM)
    input_ids, attention_mask, labels = _mlm_rows()

    def accuracy(prediction):
        predicted = prediction.predictions.argmax(-1)
        scored = prediction.label_ids != -100
        return {"accuracy": float((predicted[scored] == prediction.label_ids[scored]).mean())}

    args = TrainingArguments(str(tmp_path), per_device_eval_batch_size=4, report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args, compute_metrics=accuracy)
    metrics = trainer.evaluate(_Rows(input_ids, attention_mask, labels))
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    scored = labels != -100
    expected = (logits.argmax(-1)[scored] == labels[scored]).float().mean().item()
    assert metrics["eval_accuracy"] == pytest.approx(expected)
    predictions = trainer.predict(_Rows(input_ids, attention_mask, labels)).predictions
    assert predictions.shape == (len(input_ids), input_ids.shape[1], TINY["vocab_size"])
    np.testing.assert_allclose(predictions, logits.numpy(), atol=1e-5)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse_prediction"])
def test_trainer_trains_with_and_without_sparse_prediction(sparse, tmp_path):
    """Both heads train through the Trainer to the same weights (the loss reads the same positions)."""
    weights = {}
    for run in ("a", "b"):
        model = build_model(ElcBertForMaskedLM, seed=0, sparse_prediction=sparse if run == "a" else not sparse)
        input_ids, attention_mask, labels = _mlm_rows()
        args = TrainingArguments(
            str(tmp_path / run),
            max_steps=3,
            per_device_train_batch_size=3,
            learning_rate=1e-3,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            seed=0,
        )
        result = Trainer(model=model, args=args, train_dataset=_Rows(input_ids, attention_mask, labels)).train()
        assert np.isfinite(result.training_loss)
        weights[run] = {name: p.detach().clone() for name, p in model.named_parameters()}
    for name, value in weights["a"].items():
        torch.testing.assert_close(weights["b"][name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_sparse_prediction_is_a_config_field(tmp_path):
    model = ElcBertForMaskedLM(ElcBertConfig(**TINY, sparse_prediction=True))
    model.save_pretrained(tmp_path)
    assert ElcBertForMaskedLM.from_pretrained(tmp_path).config.sparse_prediction is True
    assert ElcBertConfig(**TINY).sparse_prediction is False


def test_flex_attention_takes_a_mask_tensor_as_older_transformers_give_it(monkeypatch):
    """Where `create_bidirectional_mask` gives a boolean (or additive) B x 1 x 1 x T tensor instead of a BlockMask (a
    transformers without flex masks, running the exported remote code), the model makes the block mask itself: the
    same outputs as with the BlockMask."""
    from elc_bert.models import modeling_elc_bert

    model = task_model(ElcBertModel, attn_implementation="flex_attention").eval()
    input_ids, attention_mask = padded_batch([9, 5])
    real = attention_mask.bool()
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).last_hidden_state[real]
    for tensor_mask in (real[:, None, None, :], torch.zeros(2, 1, 1, 9).masked_fill(~real[:, None, None, :], -1e9)):
        monkeypatch.setattr(modeling_elc_bert, "create_bidirectional_mask", lambda *a, mask=tensor_mask, **k: mask)
        with torch.no_grad():
            actual = model(input_ids, attention_mask=attention_mask).last_hidden_state[real]
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)


def test_kernel_options_reach_every_flex_attention_call(flex_kernel_options_calls):
    """`kernel_options` passed to the model's forward, as transformers' own FlexAttention models take them, reach each
    block's `flex_attention` call, under a layer plan too (the compiled bf16 forward on an H100 with torch 2.11 needed
    `{"num_stages": 1}`: docs/benchmarks.md); without them the calls get None."""
    calls = flex_kernel_options_calls
    model = task_model(ElcBertForMaskedLM, ("elc", "base"), attn_implementation="flex_attention").eval()
    input_ids, attention_mask = padded_batch([9, 5])
    options = {"num_stages": 1}
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask, kernel_options=options)
        assert calls == [options] * model.config.num_hidden_layers
        calls.clear()
        with model.elc_bert.encoder.use_layer_plan([0, 1, 1, 2]):
            model(input_ids, attention_mask=attention_mask, kernel_options=options)
        assert calls == [options] * 4
        calls.clear()
        model(input_ids, attention_mask=attention_mask)
        assert calls == [None] * model.config.num_hidden_layers


# ============================================================================== packed sequences
def packed_rows(sequences: list[list[list[int]]]):
    """Rows of several sequences each, as transformers' `DataCollatorWithFlattening` lays one row out (position ids
    restarting at each sequence), right-padded to the longest row: input_ids, attention_mask, position_ids."""
    from transformers import DataCollatorWithFlattening

    flatten = DataCollatorWithFlattening(return_tensors="pt")
    rows = [flatten([{"input_ids": ids} for ids in row]) for row in sequences]
    length = max(row["input_ids"].shape[1] for row in rows)
    input_ids = torch.full((len(rows), length), 3)
    attention_mask = torch.zeros(len(rows), length, dtype=torch.long)
    position_ids = torch.arange(length).repeat(len(rows), 1)  # padding: any positions
    for k, row in enumerate(rows):
        n = row["input_ids"].shape[1]
        input_ids[k, :n], attention_mask[k, :n], position_ids[k, :n] = row["input_ids"][0], 1, row["position_ids"][0]
    return input_ids, attention_mask, position_ids


@pytest.mark.parametrize("implementation", [*IMPLEMENTATIONS, "flex_attention"])
@pytest.mark.parametrize("arch", [("residual", "base"), ("elc", "base"), ("elc", "weighted_output")], ids=arch_id)
def test_packed_sequences_get_the_outputs_each_has_alone(arch, implementation):
    """Several sequences in one row, told apart by position ids as transformers' `DataCollatorWithFlattening` makes
    them (with padding after some rows): every token's last hidden state and every layer's state equal those of its
    sequence run alone, to 1e-5. Attention stays inside each sequence (relative positions need no reset)."""
    model = task_model(ElcBertModel, arch, attn_implementation=implementation).eval()
    generator = torch.Generator().manual_seed(1)
    lengths = [[5, 9, 3], [7], [4, 4]]
    sequences = [
        [torch.randint(7, TINY["vocab_size"], (n,), generator=generator).tolist() for n in row] for row in lengths
    ]
    input_ids, attention_mask, position_ids = packed_rows(sequences)
    with torch.no_grad():
        packed = model(input_ids, attention_mask=attention_mask, position_ids=position_ids, output_hidden_states=True)
        for k, row in enumerate(sequences):
            start = 0
            for ids in row:
                alone = model(torch.tensor([ids]), output_hidden_states=True)
                for ours, theirs in zip(
                    (packed.last_hidden_state, *packed.hidden_states), (alone.last_hidden_state, *alone.hidden_states)
                ):
                    torch.testing.assert_close(ours[k, start : start + len(ids)], theirs[0], rtol=0, atol=1e-5)
                start += len(ids)


def test_position_ids_counting_up_change_nothing_and_a_wrong_shape_is_named():
    model = task_model(ElcBertForMaskedLM).eval()
    input_ids, attention_mask = padded_batch([9, 5])
    real = attention_mask.bool()
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        for position_ids in (torch.arange(9)[None], torch.arange(9).repeat(2, 1)):
            actual = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
            torch.testing.assert_close(actual[real], expected[real], rtol=0, atol=1e-5)
    with pytest.raises(InputError, match=r"position_ids has shape \(2, 8\)"):
        model(input_ids, attention_mask=attention_mask, position_ids=torch.arange(8).repeat(2, 1))


def test_multiple_choice_takes_position_ids_per_choice_and_flattening_markers_need_them():
    """B x C x T position ids reach each choice (as B x C x T input_ids do); `DataCollatorWithFlattening`'s other
    markers (cu_seq_lens, seq_idx) without position ids are refused rather than ignored."""
    model = task_model(ElcBertForMultipleChoice).eval()
    input_ids, attention_mask = task_inputs(ElcBertForMultipleChoice)
    position_ids = torch.arange(input_ids.shape[-1]).expand(input_ids.shape)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        actual = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
    masked_lm = task_model(ElcBertForMaskedLM).eval()
    with pytest.raises(InputError, match="seq_idx alone: pass position_ids"):
        masked_lm(torch.tensor([[1, 9, 2, 1, 8, 2]]), seq_idx=torch.tensor([[0, 0, 0, 1, 1, 1]]))
