"""Data benchmarks: the span-masking collator against training, and data preparation with and without its cache.

Default: is the span-masking collator ever the bottleneck? Masked batches per second against training steps per
second, both in this process at the pretraining shape (batch 32 x length 128) with a strict-small ELC-BERT.

--prepare: reading, tokenizing and packing the pretraining corpus of `--config` (its train_files under `--data-dir`:
the local stand-in corpus for configs/pretrain/tiny.yaml; or `--files`), `packed_samples(document_dataset(...))`,
timed in a fresh process with an empty cache folder (first run) and then in another fresh process with that cache
(rerun or resume); with `--prepare-corpus`, the text is prepared first as the reference prepares the BabyLM corpus.
The tokenizer is `--tokenizer`, or one trained on the corpus first with the config's vocab_size / min_frequency.
What one epoch of the samples does with the corpus's tokens: the share that reaches a sample and the share repeated,
beside the reference cache's own rule (which keeps only the first sample's worth of a longer sentence), and the
share of samples filled, both ways. Then `pack_rows` on these samples: the real-token share of the positions of one
epoch of the config's batches (collated by the training collator, short_p cuts and all), one sample per row against
several to a row, and training steps of a strict-small ELC-BERT on `--rounds` such batches both ways: real tokens/s
and their ratio, in this process.

    python scripts/bench_data.py [--batch 32 --length 128 --threads 2]
    python scripts/bench_data.py --prepare [--config configs/pretrain/tiny.yaml --data-dir ../shared/data --rounds 4]
    python scripts/bench_data.py --prepare --files babylm/2023/train_10M [--prepare-corpus] --rounds 0
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import torch
import yaml
from transformers import AutoTokenizer

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.corpus import document_dataset, packed_samples
from elc_bert.data.preparation import prepared_lines
from elc_bert.data.pretraining import SpanMaskingCollator, span_coverage
from elc_bert.data.pretraining_batches import coverage, sample_words, schedule_batches
from elc_bert.data.text import corpus_files, read_documents
from elc_bert.data.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parent.parent


def per_second(function, repeats: int) -> float:
    function()
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return repeats / (time.perf_counter() - start)


def prepare_once(
    sources: list[str], tokenizer_dir: str, seq_length: int, cache_dir: str, packing: str, prepare: bool
) -> dict:
    """One preparation as a run does it (in the calling process); its seconds and what it made."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    start = time.perf_counter()
    documents = document_dataset(sources, "train", cache_dir=cache_dir, prepare=prepare)
    samples = packed_samples(documents, tokenizer, seq_length, packing=packing)
    seconds = time.perf_counter() - start
    lengths = pc.list_value_length(samples.data.column("input_ids"))
    tokens = pc.sum(lengths).as_py()
    full = pc.sum(pc.equal(lengths, seq_length).cast("int64")).as_py()
    result = {"seconds": seconds, "samples": len(samples), "tokens": tokens, "full": full}
    result.update(coverage(samples), words=int(sample_words(samples).sum()), lengths=lengths.to_pylist())
    return result


def reference_rule_reach(sources: list[str], tokenizer_dir: str, seq_length: int, prepare: bool, cache_dir) -> dict:
    """The reference cache's own rule, where a sentence longer than a sample keeps only its first sample's worth
    (written here from its description): the share of the corpus's tokens that reach a sample, and the samples' mean
    length with [CLS] and [SEP]."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    documents = document_dataset(sources, "train", cache_dir=cache_dir, prepare=prepare)
    total = reached = held = samples = full = 0
    for batch in documents.iter(batch_size=1000):
        for document in batch["sentences"]:
            lengths = [len(ids) for ids in tokenizer(document, add_special_tokens=False)["input_ids"]]
            spans, start, end = [], 0, 0
            for length in lengths:
                sentence_start, end = end, end + length
                if end - start > seq_length - 2:
                    spans.append((start, start + seq_length - 2))
                    start = sentence_start
            if end > start:
                spans.append((start, min(end, start + seq_length - 2)))
            new, _ = span_coverage(spans, end)
            total, reached = total + end, reached + sum(new)
            held, samples = held + sum(b - a + 2 for a, b in spans), samples + len(spans)
            full += sum(b - a == seq_length - 2 for a, b in spans)
    return {"reach": reached / total, "mean_length": held / samples, "full": full / samples}


def prepare_in_fresh_process(sources, tokenizer_dir, seq_length, cache_dir, packing, prepare) -> dict:
    """`prepare_once` in a new Python process: nothing of this one (imports, memoised hashes) helps it."""
    job = {"sources": sources, "tokenizer_dir": tokenizer_dir, "seq_length": seq_length, "cache_dir": cache_dir}
    job.update(packing=packing, prepare=prepare)
    result = subprocess.run(
        [sys.executable, __file__, "--prepare-job", json.dumps(job)], stdout=subprocess.PIPE, check=True, text=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_prepare(args):
    with open(args.config, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    names = args.files or config["train_files"]
    sources = [str(Path(args.data_dir) / name) for name in names]
    seq_length, packing = config["seq_length"], config.get("packing", "reference")  # PretrainConfig's default
    with tempfile.TemporaryDirectory(prefix="bench_data_") as scratch:
        tokenizer_dir = args.tokenizer
        if tokenizer_dir is None:
            files = [path for source in sources for path in corpus_files(source, "train")]
            start = time.perf_counter()
            if args.prepare_corpus:
                lines = (line for path in files for line in prepared_lines(path) if line)
            else:
                lines = (line for document in read_documents(files) for line in document)
            tokenizer = train_tokenizer(lines, config["vocab_size"], config["min_frequency"])
            tokenizer_dir = str(Path(scratch) / "tokenizer")
            tokenizer.save_pretrained(tokenizer_dir)
            print(f"tokenizer: trained in {time.perf_counter() - start:.1f} s (vocabulary {len(tokenizer):,})")
        cache_dir = str(Path(scratch) / "cache")  # empty: the first run prepares everything
        first = prepare_in_fresh_process(sources, tokenizer_dir, seq_length, cache_dir, packing, args.prepare_corpus)
        second = prepare_in_fresh_process(sources, tokenizer_dir, seq_length, cache_dir, packing, args.prepare_corpus)
        old_reach = reference_rule_reach(sources, tokenizer_dir, seq_length, args.prepare_corpus, cache_dir)
    if second["samples"] != first["samples"] or second["tokens"] != first["tokens"]:
        raise RuntimeError(f"the cached samples differ from the prepared ones: {first} vs {second}")
    prepared = "prepared as the reference prepares BabyLM" if args.prepare_corpus else "raw lines"
    print(f"corpus: {', '.join(names)} under {args.data_dir} ({prepared}; {first['words']:,} words)")
    print(f"samples: {first['samples']:,} of at most {seq_length} tokens ({first['tokens']:,} tokens)")
    # What a GPU pays for: a batch is padded to seq_length, so the real tokens' share of its positions is this.
    share = first["tokens"] / (first["samples"] * seq_length)
    print(
        f"real-token share of the padded samples: {share:.1%}; samples filled to {seq_length}: "
        f"{first['full'] / first['samples']:.1%} (packing {packing})"
    )
    print(
        f"corpus tokens reaching a sample in one epoch: {first['corpus_token_share']:.2%} (the reference cache's own "
        f"rule: {old_reach['reach']:.2%}); repeated: {first['repeated_token_share']:.2%} of the corpus's tokens"
    )
    mean = first["tokens"] / first["samples"]
    print(
        f"samples' mean length: {mean:.1f} tokens, {first['full'] / first['samples']:.1%} filled (the reference "
        f"cache's own rule: {old_reach['mean_length']:.1f}, {old_reach['full']:.1%})"
    )
    print(f"first run (empty cache, fresh process): {first['seconds']:.2f} s")
    print(f"second run (same cache, fresh process): {second['seconds']:.3f} s")
    print(f"first / second ratio: {first['seconds'] / second['seconds']:,.0f}x (target >= 10x)")
    if args.rounds:
        bench_shared_rows(first["lengths"], config, args)


def bench_shared_rows(lengths: list[int], config: dict, args) -> None:
    """`pack_rows` on the corpus's samples: one epoch of the config's batches (random ids of the samples' lengths),
    collated as training collates them (short_p cuts drawn by the step) one sample per row and several to a row: the
    real-token share of their positions, then training steps on the first `args.rounds` batches both ways."""
    seq_length, batch_size = config["seq_length"], config["batch_size"]
    short_p = config.get("short_p", 0.1)  # PretrainConfig's default
    model_config = ElcBertConfig.from_preset("strict-small", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    vocab_size = model_config.vocab_size
    collators = {
        pack: SpanMaskingCollator(4, 3, vocab_size, short_p=short_p, max_length=seq_length, pack_rows=pack)
        for pack in (False, True)
    }
    generator = torch.Generator().manual_seed(0)
    order = schedule_batches(len(lengths), batch_size, len(lengths) // batch_size, seed=0)
    rows, real, positions = {False: [], True: []}, 0, {False: 0, True: 0}
    for step, batch in enumerate(order):
        examples = [
            [1] + torch.randint(7, vocab_size, (lengths[i] - 2,), generator=generator).tolist() + [2] for i in batch
        ]
        for pack, collator in collators.items():
            collated = collator(examples, draw=step)
            positions[pack] += collated["attention_mask"].numel()
            if step < args.rounds:
                rows[pack].append(collated)
        real += int(collated["attention_mask"].sum())
    print(
        f"pack_rows over one epoch of batches of {batch_size} (short_p {short_p}): real-token share "
        f"{real / positions[False]:.1%} one sample per row, {real / positions[True]:.1%} several to a row "
        f"({positions[False] / positions[True]:.2f}x fewer positions)"
    )
    model = ElcBertForMaskedLM(model_config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seconds = {}
    for pack in (False, True, False, True):  # interleaved, the first pass of each a warm-up
        start = time.perf_counter()
        for batch in rows[pack]:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        seconds[pack] = time.perf_counter() - start
    tokens = sum(int(batch["attention_mask"].sum()) for batch in rows[True])
    print(
        f"training steps (strict-small ELC-BERT, {args.rounds} batches, {args.threads} threads): real tokens/s "
        f"{tokens / seconds[False]:,.0f} one sample per row, {tokens / seconds[True]:,.0f} several to a row: "
        f"{seconds[False] / seconds[True]:.2f}x"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prepare", action="store_true", help="benchmark data preparation and its cache instead")
    parser.add_argument("--config", default=str(ROOT / "configs" / "pretrain" / "tiny.yaml"))
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--tokenizer", help="a saved tokenizer's folder (default: train one on the corpus)")
    parser.add_argument("--files", nargs="+", help="--prepare: these corpus entries instead of the config's")
    parser.add_argument("--prepare-corpus", action="store_true", help="--prepare: prepare the text first")
    parser.add_argument(
        "--rounds", type=int, default=4, help="--prepare: batches timed each way for pack_rows (0: no pack_rows)"
    )
    parser.add_argument("--prepare-job", help=argparse.SUPPRESS)  # a fresh process's run of `prepare_once`
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.prepare_job is not None:
        print(json.dumps(prepare_once(**json.loads(args.prepare_job))))
        return
    if args.prepare:
        bench_prepare(args)
        return
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
