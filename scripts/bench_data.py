"""Is the span-masking collator ever the bottleneck? Masked batches per second against training steps per second.

Both run in this process at the pretraining shape (batch 32 x length 128) with a strict-small ELC-BERT.

    python scripts/bench_data.py [--batch 32 --length 128 --threads 2]
"""

import argparse
import time

import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.pretraining import SpanMaskingCollator


def per_second(function, repeats: int) -> float:
    function()
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return repeats / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = ElcBertConfig.from_preset("strict-small")
    generator = torch.Generator().manual_seed(0)
    examples = [
        [1] + torch.randint(7, config.vocab_size, (args.length - 2,), generator=generator).tolist() + [2]
        for _ in range(args.batch)
    ]
    collator = SpanMaskingCollator(4, 3, config.vocab_size)
    batches_per_second = per_second(lambda: collator(examples), repeats=50)

    model = ElcBertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = collator(examples)

    def step():
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    steps_per_second = per_second(step, repeats=3)
    print(f"batch {args.batch} x length {args.length}, {args.threads} threads")
    print(f"masked batches/s: {batches_per_second:,.1f}")
    print(f"training steps/s (strict-small ELC-BERT): {steps_per_second:.3f}")
    ratio = batches_per_second / steps_per_second
    print(f"collator / training ratio: {ratio:,.0f}x (above 1, the collator is not the bottleneck)")


if __name__ == "__main__":
    main()
