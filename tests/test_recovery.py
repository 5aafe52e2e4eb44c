"""Recovery speed, weight predictability and the weight-manipulation sweep (issue 69): numerics against naive
implementations written here, exact restoration, resumption, bad input refused before any work, the CLI."""

import copy
import json
import math

import numpy as np
import pytest
import torch
from helpers import analysis_batch as batch
from helpers import naive_spearman, tiny_bert, tiny_llama, word_level_tokenizer
from transformers import BertForMaskedLM, LlamaForCausalLM

import elc_bert_cli
from elc_bert import InputError
from elc_bert.analysis import (
    TaskMetric,
    add_weight_noise,
    leave_one_out,
    magnitude_prune,
    manipulation_sweep,
    recover_layer,
    recovery_speed,
    scale_layer_weights,
    substitute_predicted_weights,
    truncate_rank,
    weight_predictability,
)
from elc_bert.analysis import recovery as recovery_module
from elc_bert.analysis.recovery import RecoverySettings
from elc_bert.cli import main
from elc_bert.models import ElcBertConfig, ElcBertModel

SENTENCES = ["w0 w1 w2 w3 w4 w5", "w5 w4 w3 w2 w1 w0", "w0 w0 w1 w1 w2 w2", "w3 w4 w5 w3 w4 w5"]


def _tokenizer():
    return word_level_tokenizer(64)


def _elc(combination="elc"):
    torch.manual_seed(0)
    return ElcBertModel(ElcBertConfig.from_preset("tiny", vocab_size=64, layer_combination=combination)).eval()


def masked_metric(model=None):
    model = model or tiny_bert(cls=BertForMaskedLM)
    tokenizer = _tokenizer()
    batches = [dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))]
    return model, TaskMetric(model, tokenizer, batches, seed=0, mask_p=0.5)


def causal_metric():
    model = tiny_llama()
    return model, TaskMetric(model, _tokenizer(), [batch()])


def test_predictability_against_a_naive_float64_loop():
    """R^2_l = 1 - ||W_l - pred||^2 / ||W_l - mean(W_l)||^2 with pred the mean of the neighbours (one at the ends)."""
    model = tiny_bert(layers=4)
    with torch.no_grad():  # a LayerNorm weight that differs from 1 has a spread, so an R^2
        for layer in model.encoder.layer:
            layer.output.LayerNorm.weight.uniform_(0.5, 1.5)
    result = weight_predictability(model)
    state = {k: v.double().numpy() for k, v in model.state_dict().items()}
    types = [k[len("encoder.layer.0.") :] for k in state if k.startswith("encoder.layer.0.")]
    assert result["tensor_types"] == types
    for layer in range(4):
        neighbours = [i for i in (layer - 1, layer + 1) if 0 <= i < 4]
        residual = spread = 0.0
        for name in types:
            w = state[f"encoder.layer.{layer}.{name}"]
            prediction = sum(state[f"encoder.layer.{i}.{name}"] for i in neighbours) / len(neighbours)
            r, s = ((w - prediction) ** 2).sum(), ((w - w.mean()) ** 2).sum()
            expected = 1 - r / s if s > 0 else None
            got = result["layers"][layer]["r2_by_type"][name]
            assert (got is None) == (expected is None) and (got is None or got == pytest.approx(expected, abs=1e-9))
            residual, spread = residual + r, spread + s
        assert result["layers"][layer]["r2"] == pytest.approx(1 - residual / spread, abs=1e-9)
    assert result["layers"][0]["r2_by_type"]["attention.output.LayerNorm.bias"] is None  # zeros: no spread
    # a layer that is the mean of its neighbours is predicted exactly
    with torch.no_grad():
        for p1, p0, p2 in zip(
            model.encoder.layer[1].parameters(),
            model.encoder.layer[0].parameters(),
            model.encoder.layer[2].parameters(),
        ):
            p1.copy_((p0 + p2) / 2)
    exact = weight_predictability(model)["layers"][1]
    assert exact["r2"] == pytest.approx(1.0, abs=1e-6)


def test_predictability_of_elc_leaves_out_the_per_layer_logits():
    """ELC-BERT's prev_layer_weights has one logit per earlier state: its shape differs by layer, so it is no tensor
    type (and substitution leaves it as it is)."""
    model = _elc()
    result = weight_predictability(model)
    assert "prev_layer_weights" not in result["tensor_types"] and len(result["layers"]) == 4
    logits = model.encoder.layers[2].prev_layer_weights.detach().clone()
    with substitute_predicted_weights(model, 2):
        assert torch.equal(model.encoder.layers[2].prev_layer_weights, logits)
        name = result["tensor_types"][0]
        expected = (
            dict(model.encoder.layers[1].named_parameters())[name]
            + dict(model.encoder.layers[3].named_parameters())[name]
        ) / 2
        assert torch.allclose(dict(model.encoder.layers[2].named_parameters())[name], expected, atol=1e-7)


@pytest.mark.parametrize("make", [lambda: tiny_bert(), tiny_llama, _elc], ids=["bert", "llama", "elc"])
def test_every_manipulation_restores_the_model_bit_for_bit(make):
    model, inputs = make(), batch()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(**inputs, **({"use_cache": False} if isinstance(model, LlamaForCausalLM) else {}))[0]
    for manipulation in (
        lambda: substitute_predicted_weights(model, 0),
        lambda: substitute_predicted_weights(model, 3),
        lambda: add_weight_noise(model, 1, 0.1, seed=3),
        lambda: magnitude_prune(model, 2, 0.5),
        lambda: truncate_rank(model, 1, 0.5),
    ):
        with manipulation():
            assert any(not torch.equal(state[k], v) for k, v in model.state_dict().items())
        with pytest.raises(RuntimeError, match="inside"), manipulation():
            raise RuntimeError("an error inside the block")
        assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        after = model(**inputs, **({"use_cache": False} if isinstance(model, LlamaForCausalLM) else {}))[0]
    assert torch.equal(before, after)


def test_manipulations_against_naive_edits():
    model = tiny_bert()
    layer = model.encoder.layer[1]
    query = layer.attention.self.query.weight.detach().clone()
    with magnitude_prune(model, 1, 0.25):
        pruned = layer.attention.self.query.weight
        cut = query.abs().flatten().sort().values[int(0.25 * query.numel())]  # the smallest |w| kept
        assert int((pruned == 0).sum()) == query.numel() // 4
        assert torch.equal(pruned, torch.where(query.abs() < cut, torch.zeros_like(query), query))
        assert torch.equal(layer.attention.output.LayerNorm.weight, torch.ones(32))  # 1-D: not pruned
    with truncate_rank(model, 1, 0.25):  # 32 x 32: rank 8
        u, s, vh = np.linalg.svd(query.double().numpy())
        expected = (u[:, :8] * s[:8]) @ vh[:8]
        got = layer.attention.self.query.weight.detach().double().numpy()
        assert np.abs(got - expected).max() < 1e-6 and np.linalg.matrix_rank(got, tol=1e-4) == 8
    with add_weight_noise(model, 1, 0.1, seed=5):
        first = layer.attention.self.query.weight.detach().clone()
    with add_weight_noise(model, 1, 0.1, seed=5):
        assert torch.equal(layer.attention.self.query.weight, first)  # seeded
        noise = (first - query) / (0.1 * query.pow(2).mean().sqrt())
        assert float(noise.std()) == pytest.approx(1.0, abs=0.1) and float(noise.mean()) == pytest.approx(0, abs=0.1)


@pytest.mark.parametrize("make", [masked_metric, causal_metric], ids=["masked", "causal"])
def test_manipulation_sweep_against_the_metric_under_each_context(make):
    model, metric = make()
    sweep = manipulation_sweep(model, metric, layers=[0, 3])
    assert sweep["manipulations"] == ["scale 0.8", "scale 0.9", "scale 1.1", "noise 0.1", "prune 50%", "rank 50%"] + [
        "predicted"
    ]
    assert sweep["baseline"] == metric()
    row = sweep["layers"][1]
    with scale_layer_weights(model, 3, 0.9):
        assert row["metric"]["scale 0.9"] == metric()
    with substitute_predicted_weights(model, 3):
        assert row["metric"]["predicted"] == metric()
    with add_weight_noise(model, 3, 0.1, seed=3):  # the sweep seeds layer l's noise with seed + l
        assert row["metric"]["noise 0.1"] == metric()
    change = row["change_percent"]["rank 50%"]
    assert change == pytest.approx(100 * (row["metric"]["rank 50%"] - metric()) / metric(), rel=1e-9)


def naive_recovery(model, metric, layer, steps, lr, seed):
    """Re-initialise `layer` of a copy with `_init_weights` under `seed`, then plain SGD on that layer alone."""
    work = copy.deepcopy(model)
    block = work.bert.encoder.layer[layer]
    torch.manual_seed(seed)
    block.apply(work._init_weights)
    same = metric.for_model(work)
    curve = []
    for _ in range(steps):
        loss = same.loss()
        curve.append(float(loss.detach()))
        grads = torch.autograd.grad(loss, list(block.parameters()))
        with torch.no_grad():
            for p, g in zip(block.parameters(), grads):
                p -= lr * g
    curve.append(same())
    return curve, work


def test_recovery_curve_against_a_naive_sgd_loop_and_the_callers_model_untouched():
    model, metric = masked_metric()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    settings = RecoverySettings(steps=4, lr=0.5, optimizer="sgd", baseline=metric())
    curve = recover_layer(model, metric, 2, settings)
    expected, _ = naive_recovery(model, metric, 2, 4, 0.5, seed=2)
    assert curve == pytest.approx(expected, rel=1e-5)
    assert curve[-1] < curve[0]  # training helps
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert metric.model is model


def test_recovery_rows_resume_and_refuse_other_settings(tmp_path, monkeypatch):
    model, metric = masked_metric()
    calls = []
    real = recovery_module.recover_layer
    monkeypatch.setattr(recovery_module, "recover_layer", lambda *a: calls.append(a[2]) or real(*a))
    loo = leave_one_out(model, metric)
    first = recovery_speed(model, metric, tmp_path, steps=3, lr=0.5, optimizer="sgd", layers=[1])
    assert calls == [1] and first["spearman"] is None
    result = recovery_speed(model, metric, tmp_path, steps=3, lr=0.5, optimizer="sgd", importance=loo)
    assert calls == [1, 0, 2, 3]  # layer 1 read back, not measured again
    assert result["layers"][1] == first["layers"][0]
    saved = json.loads((tmp_path / "recovery.json").read_text())
    assert [row["layer"] for row in saved["layers"]] == [0, 1, 2, 3] and saved["settings"]["steps"] == 3
    assert (tmp_path / "recovery.png").stat().st_size > 0
    baseline = metric.split()[1]()  # measured on the held-out half of the sentences
    assert result["settings"]["baseline"] == pytest.approx(baseline, rel=1e-12)
    for row in result["layers"]:  # steps and area against their definitions
        threshold = baseline * 1.05
        assert row["steps_to_recover"] == next((t for t, v in enumerate(row["curve"]) if v <= threshold), None)
        gaps = [v - baseline for v in row["curve"]]
        assert row["area"] == pytest.approx(sum((gaps[t] + gaps[t + 1]) / 2 for t in range(3)), rel=1e-9)

    losses, areas = [row["metric"] for row in loo["layers"]], [row["area"] for row in result["layers"]]
    assert result["spearman"]["area"]["rho"] == pytest.approx(naive_spearman(losses, areas), abs=1e-9)
    with pytest.raises(InputError, match=r"recovery\.json holds a recovery run with other settings \(lr: 0\.5 there"):
        recovery_speed(model, metric, tmp_path, steps=3, lr=0.1, optimizer="sgd")
    assert calls == [1, 0, 2, 3]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(steps=0), r"recovery steps 0: must be a whole number >= 1"),
        (dict(steps=2, lr=-1.0), r"recovery learning rate -1\.0: must be > 0"),
        (dict(steps=2, tolerance_percent=-5), r"recovery tolerance -5%: must be >= 0"),
        (dict(steps=2, optimizer="adam"), r"recovery optimizer 'adam': choose from sgd, adamw"),
        (dict(steps=2, train="head"), r"recovery train 'head': choose from layer, all"),
        (dict(steps=2, reset="random"), r"recovery reset 'random': choose from reinit, zero"),
        (dict(steps=2, layers=[4]), r"recovery layers \[4\]: must be ints in 0\.\.3 \(4 layers\)"),
        (dict(steps=2, layers=[]), r"recovery layers \[\]: must be ints in 0\.\.3"),
    ],
)
def test_bad_recovery_settings_are_refused_before_any_work(tmp_path, options, message):
    model, metric = masked_metric()
    model.register_forward_pre_hook(lambda *args: pytest.fail("the model ran before the settings were checked"))
    with pytest.raises(InputError, match=message):
        recovery_speed(model, metric, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("make", [causal_metric, lambda: masked_metric(None)], ids=["llama", "bert"])
@pytest.mark.parametrize("train, reset", [("all", "zero"), ("layer", "reinit")])
def test_recovery_runs_on_decoders_and_encoders(tmp_path, make, train, reset):
    model, metric = make()
    result = recovery_speed(model, metric, tmp_path, steps=2, lr=1e-3, train=train, reset=reset, layers=[0, 3])
    assert [len(row["curve"]) for row in result["layers"]] == [3, 3]
    assert all(math.isfinite(v) for row in result["layers"] for v in row["curve"])


def test_a_loaded_layer_is_re_initialised_as_a_fresh_one(tmp_path):
    """transformers' init functions skip tensors flagged as loaded by from_pretrained: the reset must not."""
    fresh, metric = masked_metric()
    fresh.save_pretrained(tmp_path)
    loaded = BertForMaskedLM.from_pretrained(tmp_path).eval()
    settings = RecoverySettings(steps=1, lr=1e-3, baseline=metric())
    expected = recover_layer(fresh, metric, 2, settings)[0]
    assert abs(expected - metric()) > 1e-5  # the reset changes the loss
    assert recover_layer(loaded, metric.for_model(loaded), 2, settings)[0] == pytest.approx(expected, rel=1e-6)


def test_a_zeroed_pre_ln_decoder_layer_starts_as_the_layer_skipped():
    """Zeroing sets weights and biases to 0 and norm gains to 1: a pre-LN residual block then adds nothing."""
    model, metric = causal_metric()
    settings = RecoverySettings(steps=1, lr=1e-3, reset="zero", baseline=metric())
    skipped = leave_one_out(model, metric)["layers"][1]["metric"]
    assert recover_layer(model, metric, 1, settings)[0] == pytest.approx(skipped, rel=1e-5)


@pytest.mark.parametrize("combination", ["elc", "residual"])
def test_recovery_of_our_encoders_and_the_drift_metric(tmp_path, combination):
    """ELC-BERT / LTG-BERT (bare: the drift metric, baseline 0, tolerance absolute); re-initialising a loaded layer
    really changes it (transformers' init functions skip tensors flagged as loaded)."""
    model = _elc(combination=combination)
    for parameter in model.parameters():
        parameter._is_hf_initialized = True
    metric = TaskMetric(model, _tokenizer(), [batch()])
    assert metric() == pytest.approx(0.0, abs=1e-6)
    result = recovery_speed(model, metric, tmp_path, steps=2, lr=1e-3, layers=[1], tolerance_percent=1)
    row = result["layers"][0]
    assert row["curve"][0] > 1e-3  # the reset layer moved the output
    threshold = result["settings"]["baseline"] + 0.01
    assert row["steps_to_recover"] == next((t for t, v in enumerate(row["curve"]) if v <= threshold), None)


def test_recovery_refuses_a_metric_without_a_loss(tmp_path):
    from elc_bert.analysis import CustomMetric

    model = tiny_bert()
    with pytest.raises(InputError, match="accuracy has none"):
        recovery_speed(model, CustomMetric("accuracy", lambda: 1.0), tmp_path, steps=2)


def test_the_parser_copies_of_the_recovery_choices_match_the_package():
    assert elc_bert_cli.RECOVERY_OPTIMIZERS == recovery_module.OPTIMIZERS
    assert elc_bert_cli.RECOVERY_TRAINED == recovery_module.TRAINED
    assert elc_bert_cli.RECOVERY_RESETS == recovery_module.RESETS


def test_analyze_cli_with_recovery_and_manipulations(tmp_path, capsys):
    model = tiny_bert(cls=BertForMaskedLM)
    model.save_pretrained(tmp_path / "model")
    _tokenizer().save_pretrained(tmp_path / "model")
    (tmp_path / "text.txt").write_text("\n".join(SENTENCES * 3))
    command = ["analyze", str(tmp_path / "model"), "--data", str(tmp_path / "text.txt"), "--out", str(tmp_path / "out")]
    command += ["--strategies", "--recovery", "2", "--recovery-optimizer", "sgd", "--recovery-lr", "0.5"]
    main(command)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["recovery"]["settings"]["optimizer"] == "sgd" and len(report["recovery"]["layers"]) == 4
    assert set(report["recovery"]["spearman"]) == {"area", "steps_to_recover"}
    assert len(report["manipulations"]["layers"]) == 4 and len(report["weight_predictability"]["layers"]) == 4
    for name in ("recovery.json", "recovery.png", "weight_predictability.png", "weight_manipulations.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    text = capsys.readouterr().out
    assert "## Recovery speed" in text and "## Weight manipulations" in text and "## Weight predictability" in text
    with pytest.raises(SystemExit) as exit_info:  # the same folder, another learning rate
        main(command[:-1] + ["0.1"])
    assert exit_info.value.code == 2
    assert "recovery.json holds a recovery run with other settings (lr: 0.5 there, 0.1 now)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(command[:6] + ["--recovery-layers", "1"])
    assert exit_info.value.code == 2
    assert "--recovery-layers given without --recovery K" in capsys.readouterr().err
    main(command[:4] + ["--strategies", "--no-manipulations"] + ["--out", str(tmp_path / "plain")])
    assert json.loads((tmp_path / "plain" / "report.json").read_text())["manipulations"] is None


def test_recovery_trains_on_half_of_the_sentences_and_measures_on_the_other_half():
    """`TaskMetric.split`: alternate sentences, the same masks; recovery's curve is the held-out half's metric of
    the model trained on the other half (a naive loop here), so fitting the trained sentences' masks cannot show."""
    model, metric = masked_metric()
    trained, held = metric.split()
    rows = len(metric.batches[0]["input_ids"])
    assert [len(part.batches[0]["input_ids"]) for part in (trained, held)] == [(rows + 1) // 2, rows // 2]
    assert torch.equal(held.labels[0], metric.labels[0][1::2]) and torch.equal(trained.inputs[0], metric.inputs[0][::2])
    settings = RecoverySettings(steps=3, lr=0.5, optimizer="sgd", baseline=held())
    curve = recover_layer(model, trained, 2, settings, held)
    work = copy.deepcopy(model).eval()
    layer = work.bert.encoder.layer[2]
    recovery_module._reset_layer(work, layer, "reinit", 2)
    for parameter in work.parameters():
        parameter.requires_grad_(False)
    for parameter in layer.parameters():
        parameter.requires_grad_(True)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    expected = []
    for _ in range(3):
        expected.append(held.for_model(work)())
        optimizer.zero_grad()
        trained.for_model(work).loss().backward()
        optimizer.step()
    expected.append(held.for_model(work)())
    assert curve == pytest.approx(expected, rel=1e-6)
    with pytest.raises(InputError, match="2 or more"):
        one = TaskMetric(model, _tokenizer(), [dict(_tokenizer()(SENTENCES[:1], return_tensors="pt"))], mask_p=0.5)
        recovery_speed(model, one, "unused", steps=2)
