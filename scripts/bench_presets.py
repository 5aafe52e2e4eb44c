"""Which ELC-BERT fits a 2.5-hour pretraining run on this machine? Training-step tokens/s of candidate sizes.

Each candidate trains a few steps (ELC-BERT `base`, LAMB, sparse MLM head, batch 32 x length 128, 2 threads) in this
process; the table gives tokens/s, the tokens a 2.5-hour run would see and how many epochs of the stand-in corpus
(5.25 M tokens at length 128: BabyLM 2023 pieces + WikiText-2 train, see `scripts/bench_data.py --prepare`) that is.

    python scripts/bench_presets.py [--hours 2.5 --threads 2 --steps 4]
"""

import argparse
import time

import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.training.optim import Lamb

CORPUS_TOKENS = 5_247_757  # the stand-in corpus packed at length 128 (scripts/bench_data.py --prepare)
CANDIDATES = {
    "192 x 6": dict(hidden_size=192, num_hidden_layers=6, num_attention_heads=3, intermediate_size=512),
    "256 x 8": dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=4, intermediate_size=683),
    "320 x 10": dict(hidden_size=320, num_hidden_layers=10, num_attention_heads=5, intermediate_size=853),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=2.5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    input_ids = torch.randint(7, args.vocab_size, (32, 128))
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.where(torch.rand(input_ids.shape) < 0.15, input_ids, -100),
    }
    print(f"threads {args.threads}, batch 32 x 128, vocabulary {args.vocab_size}, best of {args.steps} steps")
    print("| candidate (width x layers) | parameters | tokens/s | tokens in a run | epochs of the corpus |")
    print("|---|---|---|---|---|")
    for name, dims in CANDIDATES.items():
        config = ElcBertConfig(vocab_size=args.vocab_size, sparse_prediction=True, **dims)
        model = ElcBertForMaskedLM(config).train()
        optimizer = Lamb(model.parameters(), lr=1e-3)
        times = []
        for _ in range(args.steps + 1):
            start = time.perf_counter()
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        speed = input_ids.numel() / min(times[1:])
        tokens = speed * args.hours * 3600
        parameters = sum(p.numel() for p in model.parameters())
        epochs = tokens / CORPUS_TOKENS
        print(f"| {name} | {parameters / 1e6:.1f} M | {speed:,.0f} | {tokens / 1e6:.1f} M | {epochs:.1f} |")


if __name__ == "__main__":
    main()
