"""`make demo`: a small ELC-BERT from nothing on the bundled WikiText-2 sample.

Trains the reference tokenizer on the sample, builds a tiny ELC-BERT, trains it for a few hundred masked-LM steps
(about a minute on two CPU cores), saves it, reloads it through `AutoModelForMaskedLM` and prints its predictions
for a masked sentence and its learned layer weights (the alpha matrix).
"""

import argparse
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoModelForMaskedLM, AutoTokenizer

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def mask_tokens(input_ids: torch.Tensor, special: torch.Tensor, mask_id: int, vocab_size: int, p: float = 0.15):
    """Token-level BERT masking (80% [MASK], 10% random, 10% unchanged); labels -100 where not masked."""
    chosen = (torch.rand(input_ids.shape) < p) & ~special
    labels = torch.where(chosen, input_ids, -100)
    roll = torch.rand(input_ids.shape)
    masked = torch.where(chosen & (roll < 0.8), mask_id, input_ids)
    random_ids = torch.randint(7, vocab_size, input_ids.shape)
    masked = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, masked)
    return masked, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text", default=ROOT / "data" / "samples" / "wikitext2_train.txt", type=Path)
    parser.add_argument("--out", default=ROOT / "outputs" / "demo", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)

    lines = [line.strip() for line in args.text.open(encoding="utf-8") if line.strip() and not line.startswith(" =")]
    tokenizer = train_tokenizer(lines, vocab_size=2048, min_frequency=2)
    ids = torch.tensor([i for line in lines for i in tokenizer(line, add_special_tokens=False).input_ids])
    body = args.length - 2
    blocks = ids[: len(ids) // body * body].view(-1, body)
    blocks = torch.cat(
        [
            torch.full((len(blocks), 1), tokenizer.cls_token_id),
            blocks,
            torch.full((len(blocks), 1), tokenizer.sep_token_id),
        ],
        dim=1,
    )
    print(f"{len(lines)} lines, {len(ids):,} tokens, {len(blocks)} blocks of {args.length}")

    config = ElcBertConfig.from_preset("tiny", vocab_size=len(tokenizer), hidden_dropout_prob=0.0)
    model = ElcBertForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=args.steps, pct_start=0.1)
    model.train()
    progress = tqdm(range(args.steps), desc="masked-LM training")
    for _ in progress:
        batch = blocks[torch.randint(len(blocks), (args.batch,))]
        special = batch < 7
        input_ids, labels = mask_tokens(batch, special, tokenizer.mask_token_id, len(tokenizer))
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        progress.set_postfix(loss=f"{loss.item():.3f}")

    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    model = AutoModelForMaskedLM.from_pretrained(args.out)
    tokenizer = AutoTokenizer.from_pretrained(args.out)
    print(f"saved to {args.out} and reloaded as {type(model).__name__}")

    for sentence in ["The game was [MASK] in Japan .", "He was born in the [MASK] of London ."]:
        encoded = tokenizer(sentence, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**encoded).logits
        position = (encoded.input_ids[0] == tokenizer.mask_token_id).nonzero()[0, 0]
        top = logits[0, position].softmax(-1).topk(5)
        guesses = ", ".join(
            f"{tokenizer.decode([i]).strip()!r} {p:.2f}" for p, i in zip(top.values.tolist(), top.indices.tolist())
        )
        print(f"{sentence}\n  -> {guesses}")

    print("alpha (row n: how block n mixes the embedding y_0 and earlier block outputs):")
    alpha = model.layer_weights()
    print("        " + " ".join(f"  y{i}" for i in range(alpha.shape[1])))
    for n, row in enumerate(alpha, start=1):
        print(f"block {n} " + " ".join(f"{value:.2f}" if i < n else "  - " for i, value in enumerate(row.tolist())))


if __name__ == "__main__":
    main()
