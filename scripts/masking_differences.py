"""The two masking rules kept different from the reference code, and what they change: measured on one epoch of the
samples of a corpus, as the training collator masks them (`short_p` cuts and all).

- Span starts: drawn over each sample's own length here; the reference draws them over the padded length (128), so
  a span that starts in the padding covers nothing and the next try is drawn.
- At least one masked token: LTG-BERT's reference forces one in every sample; here (as in the reference ELC-BERT) a
  short sample may draw none, and adds nothing to the loss.

Prints, for each rule, the share of maskable tokens masked and the share of samples with no masked token.

    python scripts/masking_differences.py [--data data/samples/wikitext2_train.txt --length 128 --batch 32]
"""

import argparse
import tempfile
from pathlib import Path

from elc_bert.data.corpus import document_dataset, packed_samples
from elc_bert.data.pretraining import SpanMaskingCollator
from elc_bert.data.pretraining_batches import schedule_batches
from elc_bert.data.text import read_documents
from elc_bert.data.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parent.parent


class PaddedStarts(SpanMaskingCollator):
    """The reference's span starts: uniform over the padded length `max_length`, not the sample's."""

    def _draws(self, sequence, maskable, length, draw):
        draws = super()._draws(sequence, maskable, length, draw)
        draws["start"] = (draws["start"].float() / len(sequence) * self.max_length).long()
        return draws


def statistics(collator, samples, batches) -> dict:
    masked = maskable = empty = count = 0
    for step, batch in enumerate(batches):
        collated = collator([samples[i] for i in batch], draw=step)
        chosen = collated["labels"] != -100
        # [CLS] and [SEP] are special tokens, never masked: `real` leaves them out already (no `- len(batch)`)
        real = collated["attention_mask"].bool() & (collated["input_ids"] >= collator.num_special_tokens)
        masked += int(chosen.sum())
        maskable += int(real.sum())
        empty += int((chosen.sum(1) == 0).sum())
        count += len(batch)
    return {"mask_rate": masked / maskable, "no_mask": empty / count}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ROOT / "data" / "samples" / "wikitext2_train.txt"))
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--short-p", type=float, default=0.1)
    args = parser.parse_args()
    lines = [line for document in read_documents([Path(args.data)]) for line in document]
    tokenizer = train_tokenizer(lines, 4096, 2)
    with tempfile.TemporaryDirectory(prefix="masking_") as cache:
        documents = document_dataset(args.data, cache_dir=cache)
        samples = packed_samples(documents, tokenizer, args.length, progress=False)["input_ids"]
    batches = schedule_batches(len(samples), args.batch, len(samples) // args.batch, seed=0)
    options = dict(short_p=args.short_p, max_length=args.length, seed=0)
    rules = {
        "here (starts over the sample)": SpanMaskingCollator(4, 3, len(tokenizer), **options),
        "reference (starts over the padded length)": PaddedStarts(4, 3, len(tokenizer), **options),
    }
    print(f"{len(samples):,} samples of <= {args.length} tokens from {args.data}, short_p {args.short_p}")
    print("| rule | maskable tokens masked | samples with no masked token |")
    print("|---|---:|---:|")
    for name, collator in rules.items():
        result = statistics(collator, samples, batches)
        print(f"| {name} | {result['mask_rate']:.2%} | {result['no_mask']:.2%} |")
    print("| LTG-BERT's reference (at least one masked token) | | 0.00% |")


if __name__ == "__main__":
    main()
