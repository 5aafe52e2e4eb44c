"""Writes the small data samples that ship with the repository (data/samples/) from ../shared/data.

Only data whose licence allows redistribution is sampled: WikiText-2 (CC BY-SA 3.0, Merity et al. 2016) and the
English WikiAnn (Rahimi split): Wikipedia sentences whose tags come from Wikipedia's own links (CC BY-SA 3.0 as
Wikipedia text; cite Pan et al. 2017, Rahimi et al. 2019). CoNLL-03 (Reuters text) is never sampled.
"""

import argparse
import gzip
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared-data", default=Path(__file__).resolve().parents[2] / "shared" / "data", type=Path)
    parser.add_argument("--out", default=Path(__file__).resolve().parents[1] / "data" / "samples", type=Path)
    parser.add_argument("--max-bytes", type=int, default=400_000)
    parser.add_argument("--wikiann-sentences", type=int, nargs=3, default=(2000, 500, 500), help="train dev test")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    source = args.shared_data / "wikitext2" / "wikitext-2-v1_tokenized" / "train.txt.gz"
    written = 0
    with gzip.open(source, "rt", encoding="utf-8") as lines, open(args.out / "wikitext2_train.txt", "w") as out:
        for line in lines:
            if written + len(line) > args.max_bytes:
                break
            out.write(line)
            written += len(line)
    print(f"wrote {written:,} bytes of WikiText-2 train to {args.out / 'wikitext2_train.txt'}")

    # The first sentences of each split, in the original layout (tab-separated, `en:` prefixes kept).
    for split, count in zip(("train", "dev", "test"), args.wikiann_sentences):
        source = args.shared_data / "wikiann" / "rahimi" / "en" / f"{split}.gz"
        target = args.out / "wikiann" / "rahimi" / "en" / split
        target.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(source, "rt", encoding="utf-8") as lines:
            sentences = "".join(lines).strip("\n").split("\n\n")[:count]
        target.write_text("\n\n".join(sentences) + "\n")
        print(f"wrote {len(sentences):,} WikiAnn en {split} sentences to {target}")


if __name__ == "__main__":
    main()
