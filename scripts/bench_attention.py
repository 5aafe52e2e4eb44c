"""The attention implementations of ELC-BERT side by side: eager (explicit softmax), sdpa (the relative bias as a
dense B x H x T x T float mask) and flex_attention (the bias as a score_mod over bucket indices, padding as a block
mask), each eager and under `torch.compile`, on the same padded batches in this process.

On CPU FlexAttention runs forward only (torch has no CPU backward for it), so the rows are inference: tokens/s over
the real tokens of padded batches of lengths drawn between --length/4 and --length. On CUDA the training step
(forward, backward) is timed too, with peak memory. The first call of a compiled model (its compile time) is reported
apart; the ratios are against sdpa in the same process.

    python scripts/bench_attention.py [--preset strict-small --batch 16 --length 128 --rounds 3 --threads 2]
    python scripts/bench_attention.py --device cuda --dtype bfloat16
"""

import argparse
import json
import time

import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM

IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")


def batches(count: int, batch: int, length: int, vocab: int, device) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    made = []
    for _ in range(count):
        lengths = torch.randint(length // 4, length + 1, (batch,), generator=generator)
        lengths[0] = length
        ids = torch.randint(5, vocab, (batch, length), generator=generator)
        mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        labels = torch.where(torch.rand(batch, length, generator=generator) < 0.15, ids, -100).masked_fill(
            mask == 0, -100
        )
        made.append({"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)})
    return made


def run(model, data: list[dict], train: bool, extra: dict) -> None:
    for batch in data:
        if train:
            model(**batch, **extra).loss.backward()
        else:
            with torch.no_grad():
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **extra)


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(model, data, rounds: int, train: bool, device, extra: dict) -> tuple[float, float, float]:
    """(seconds of the first call, best seconds of a later round, peak MiB on CUDA or nan); `extra`: keyword
    arguments of every call."""
    start = time.perf_counter()
    run(model, data[:1], train, extra)
    synchronize(device)
    first = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run(model, data, train, extra)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
    return first, best, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="strict-small")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=4, help="batches per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument(
        "--kernel-options",
        type=json.loads,
        help="FlexAttention's kernel options, as JSON (e.g. '{\"num_stages\": 1}', which torch 2.11 needed on an H100)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    modes = [False] + ([True] if device.type == "cuda" else [])  # train: CUDA only (no CPU backward for flex)
    config = ElcBertConfig.from_preset(args.preset, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    data = batches(args.batches, args.batch, args.length, config.vocab_size, device)
    real = sum(int(batch["attention_mask"].sum()) for batch in data)
    torch.manual_seed(0)
    weights = ElcBertForMaskedLM(config).state_dict()
    rows, reference = [], None
    for train in modes:
        for compiled in [False] + ([] if args.no_compile else [True]):
            for implementation in IMPLEMENTATIONS:
                model = ElcBertForMaskedLM._from_config(config, attn_implementation=implementation, dtype=dtype)
                model.load_state_dict(weights)
                model.to(device).train(train)
                runner = torch.compile(model) if compiled else model
                extra = {"kernel_options": args.kernel_options} if implementation == "flex_attention" else {}
                first, best, peak = measure(runner, data, args.rounds, train, device, extra)
                with torch.no_grad():
                    batch = {key: data[0][key] for key in ("input_ids", "attention_mask")}
                    logits = runner.eval()(**batch, **extra).logits[batch["attention_mask"].bool()].float()
                reference = logits if implementation == "eager" and not compiled else reference
                error = (logits - reference).abs().max().item()
                rows.append((train, compiled, implementation, real / best, first, peak, error))
    print(
        f"{args.preset}, batch {args.batch} x <= {args.length}, {args.device} {args.dtype}, {args.threads} threads"
        + (f", flex_attention kernel options {json.dumps(args.kernel_options)}" if args.kernel_options else "")
    )
    print("| step | compiled | attention | real tokens/s | / sdpa | first call (s) | peak MiB | max diff to eager |")
    print("|---|---|---|---|---|---|---|---|")
    for train, compiled, implementation, speed, first, peak, error in rows:
        sdpa = next(r[3] for r in rows if r[:2] == (train, compiled) and r[2] == "sdpa")
        step = "train" if train else "forward"
        print(
            f"| {step} | {'yes' if compiled else 'no'} | {implementation} | {speed:,.0f} | {speed / sdpa:.2f}x "
            f"| {first:.1f} | {peak:,.0f} | {error:.1e} |"
        )


if __name__ == "__main__":
    main()
