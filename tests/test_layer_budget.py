"""A training budget by layer importance (`layer_budget`): the k least important layers stop training after W steps,
their weights stay as they were, a resumed run freezes the same layers, bad settings are refused by key."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import tiny_config_kwargs, tiny_pretrain_config
from safetensors.torch import load_file

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError
from elc_bert.analysis.layer_importance import leave_one_out_importance
from elc_bert.job_configs.layer_budget import LayerBudget
from elc_bert.training.layer_budget import RECORD, FreezeLeastImportantLayers, measurement_batches, step_flops
from elc_bert.training.optim import Lamb
from elc_bert.training.pretrain import pretrain

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"


def _config(tmp_path, **overrides):
    """`helpers.tiny_pretrain_config` with validation samples to measure importance on and a budget: 2 layers frozen
    after 3 steps."""
    budget = dict(
        validation_files=[SAMPLE.name],
        max_eval_samples=8,
        learning_rate=5e-3,
        layer_budget={"after_steps": 3, "freeze": 2, "samples": 8},
    )
    return tiny_pretrain_config(tmp_path, **{**budget, **overrides})


def _fixed_importance(scores):
    calls = []

    def importance(model, tokenizer, batches, seed):
        calls.append(len(batches))
        return scores

    importance.calls = calls
    return importance


def _layer_tensors(weights: dict, layer: int) -> dict:
    prefix = f"elc_bert.encoder.layers.{layer}."
    return {key: value for key, value in weights.items() if key.startswith(prefix)}


def test_the_callback_freezes_exactly_the_k_least_important_layers(tmp_path):
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(num_hidden_layers=4)))
    importance = _fixed_importance([5.0, 0.1, 3.0, -1.0])  # layer 3: skipping it helps
    budget = LayerBudget(after_steps=2, freeze=2)
    callback = FreezeLeastImportantLayers(budget, tmp_path, importance, None, [], (8, 16, 0.15))
    state = type("State", (), {"global_step": 1, "is_world_process_zero": True})()
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_step_begin(None, state, None)
        callback.on_step_end(None, state, None, model=model)
    assert importance.calls == [0]  # measured once, at step 2
    layers = model.elc_bert.encoder.layers
    assert [i for i, layer in enumerate(layers) if not any(p.requires_grad for p in layer.parameters())] == [1, 3]
    assert [i for i, layer in enumerate(layers) if all(p.requires_grad for p in layer.parameters())] == [0, 2]
    assert model.elc_bert.embeddings.word_embeddings.weight.requires_grad
    record = json.loads((tmp_path / RECORD).read_text())
    assert record["frozen"] == [1, 3] and record["importance"] == [5.0, 0.1, 3.0, -1.0]


def test_lamb_leaves_parameters_without_gradient_as_they_are():
    frozen, trained = torch.nn.Parameter(torch.ones(4, 4)), torch.nn.Parameter(torch.ones(4, 4))
    optimizer = Lamb([{"params": [frozen, trained], "weight_decay": 0.1}], lr=0.1)
    frozen.requires_grad_(False)
    trained.grad = torch.ones(4, 4)
    optimizer.step()
    assert torch.equal(frozen, torch.ones(4, 4)) and not torch.equal(trained.detach(), torch.ones(4, 4))
    assert frozen not in optimizer.state


def test_frozen_weights_do_not_change_after_the_warm_up_and_a_resume_keeps_the_choice(tmp_path):
    config = _config(tmp_path)
    pretrain(config, _fixed_importance([0.5, -2.0, 7.0, 0.0]))  # tiny: 4 layers; least important: 1 and 3
    run = Path(config.output_dir)
    record = json.loads((run / RECORD).read_text())
    assert record["frozen"] == [1, 3] and record["step_seconds"]["after"]["steps"] == 3
    at_warm_up = load_file(run / "checkpoint-3" / "model.safetensors")
    final = load_file(run / "model.safetensors")
    for layer in (1, 3):  # bit for bit: no gradient step, no weight decay
        for key, value in _layer_tensors(at_warm_up, layer).items():
            assert torch.equal(value, final[key]), key
    for layer in (0, 2):
        assert any(not torch.equal(v, final[k]) for k, v in _layer_tensors(at_warm_up, layer).items())

    # Resume from the warm-up checkpoint with a measure that would now choose layers 0 and 2: the record decides.
    (run / "model.safetensors").unlink()
    (run / "metrics.json").unlink()
    shutil.rmtree(run / "checkpoint-6")
    other = _fixed_importance([-5.0, 1.0, -5.0, 1.0])
    pretrain(config, other)
    assert other.calls == []  # not measured again
    assert json.loads((run / RECORD).read_text())["frozen"] == [1, 3]
    resumed = load_file(run / "model.safetensors")
    for layer in (1, 3):
        for key, value in _layer_tensors(at_warm_up, layer).items():
            assert torch.equal(value, resumed[key]), key
    for key, value in final.items():  # and the resumed run trains as the first one did
        torch.testing.assert_close(resumed[key], value, atol=1e-6, rtol=0)


def test_pretrain_measures_importance_with_leave_one_out(tmp_path):
    config = _config(tmp_path, max_steps=4, layer_budget={"after_steps": 2, "freeze": 1, "samples": 8})
    pretrain(config, leave_one_out_importance)
    record = json.loads((Path(config.output_dir) / RECORD).read_text())
    assert len(record["importance"]) == 4 and len(record["frozen"]) == 1
    assert record["frozen"] == [min(range(4), key=lambda layer: record["importance"][layer])]


def test_a_layer_that_does_nothing_has_no_importance():
    """LTG-BERT (residual) with layer 1's output projections zeroed: the layer is the identity, skipping it changes
    nothing, while the others matter."""
    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(layer_combination="residual"))).eval()
    with torch.no_grad():
        layer = model.elc_bert.encoder.layers[1]
        for name, parameter in layer.named_parameters():
            if name.startswith(("attention.out_proj", "attention.post_layer_norm", "mlp.down_proj")):
                parameter.zero_()

    class Tokenizer:
        mask_token_id = 4

        def get_special_tokens_mask(self, ids, already_has_special_tokens=True):
            return [int(i < 5) for i in ids]

    samples = [{"input_ids": torch.randint(5, model.config.vocab_size, (12,)).tolist()} for _ in range(8)]
    batches = measurement_batches(samples, pad_id=3, count=8, batch_size=4)
    scores = leave_one_out_importance(model, Tokenizer(), batches)
    assert abs(scores[1]) < 1e-6, scores
    assert all(abs(score) > 1e-4 for i, score in enumerate(scores) if i != 1), scores


def test_step_flops_count_the_weight_gradients_of_the_frozen_layers():
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(num_hidden_layers=4)))
    matrices = sum(p.numel() for p in model.elc_bert.encoder.layers[0].parameters() if p.dim() >= 2)
    flops = step_flops(model, batch_size=8, seq_length=16, mask_p=0.15, frozen=[0, 2])
    assert flops["saved_per_step"] == 2 * (8 * 16) * 2 * matrices
    assert 0 < flops["saved_share"] < 1 / 3  # at most the weight-gradient third of the frozen layers' matmuls


@pytest.mark.parametrize(
    "budget, named",
    [
        ({"after_steps": 0, "freeze": 1}, "layer_budget.after_steps"),
        ({"freeze": 1}, "layer_budget.after_steps"),  # missing
        ({"after_steps": 2, "freeze": 0}, "layer_budget.freeze"),
        ({"after_steps": 2, "freeze": 4}, "layer_budget.freeze"),  # tiny has 4 layers: one must train
        ({"after_steps": 6, "freeze": 1}, "layer_budget.after_steps"),  # not below max_steps
        ({"after_steps": 2, "frezee": 1}, "layer_budget.freeze"),  # did you mean
        ({"after_steps": 2, "freeze": 1, "samples": 0}, "layer_budget.samples"),
    ],
)
def test_bad_layer_budgets_are_refused_naming_the_key(tmp_path, budget, named):
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        _config(tmp_path, layer_budget=budget)


def test_a_layer_budget_needs_validation_files(tmp_path):
    with pytest.raises(InputError, match="validation_files"):
        _config(tmp_path, validation_files=[])


def test_a_record_for_other_settings_is_refused_on_resume(tmp_path):
    (tmp_path / RECORD).write_text(json.dumps({"after_steps": 5, "freeze": 1, "frozen": [0]}))
    callback = FreezeLeastImportantLayers(LayerBudget(after_steps=3, freeze=2), tmp_path, None, None, [], (8, 16, 0.15))
    state = type("State", (), {"global_step": 4})()
    with pytest.raises(InputError, match=RECORD):
        callback.on_train_begin(None, state, None, model=None)
