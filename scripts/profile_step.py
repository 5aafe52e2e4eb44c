"""Where one training step of ELC-BERT, LTG-BERT and BERT spends its work: operators dispatched and kernels.

On any device, counts the aten operators one training step (forward, backward, AdamW step) dispatches, with a
`TorchDispatchMode`: each is at least one kernel launch on a GPU, so on a CPU the count is the proxy for launch-bound
work. With `--top N` it also lists each model's N most frequent operators. On CUDA (`--kernels`) it adds
`torch.profiler`'s table of one step's kernels: GPU time and calls per operator, top 20.

    python scripts/profile_step.py [--batch 4 --length 128 --top 15]
    python scripts/profile_step.py --device cuda --bf16 --batch 32 --kernels

Models as `scripts/bench_model.py` builds them (strict-small dims: 384 wide, 12 layers, 6 heads; BERT with SDPA and
an intermediate size of 1536; ours with `sparse_prediction` and sdpa); 15% of the tokens carry MLM labels.
"""

import argparse
import contextlib
from collections import Counter

import torch
from bench_model import build, make_batch
from torch.utils._python_dispatch import TorchDispatchMode

from elc_bert import ElcBertConfig


class OperatorCounter(TorchDispatchMode):
    """Counts every aten operator dispatched inside the `with` block, by name (`aten.mm.default`, ...)."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def forward_backward(model, batch, bf16: bool) -> None:
    device_type = batch["input_ids"].device.type
    with torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        loss = model(**batch).loss
    loss.backward()


def training_step(model, optimizer, batch, bf16: bool) -> None:
    forward_backward(model, batch, bf16)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def count_operators(model, optimizer, batch, bf16: bool = False) -> tuple[Counter, Counter]:
    """The aten operators of one training step's forward and backward, and of its optimizer step (after a warm-up
    step, so that the optimizer's state exists)."""
    training_step(model, optimizer, batch, bf16)
    with OperatorCounter() as model_counter:
        forward_backward(model, batch, bf16)
    with OperatorCounter() as optimizer_counter:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model_counter.counts, optimizer_counter.counts


def kernel_table(model, optimizer, batch, bf16: bool, rows: int = 20) -> str:
    """torch.profiler's table of one CUDA training step, by GPU time."""
    from torch.profiler import ProfilerActivity, profile

    training_step(model, optimizer, batch, bf16)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        training_step(model, optimizer, batch, bf16)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--top", type=int, default=0, help="list each model's N most frequent operators")
    parser.add_argument("--kernels", action="store_true", help="CUDA: torch.profiler's kernel table of one step")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    vocab_size = ElcBertConfig.from_preset("strict-small").vocab_size
    batch = make_batch(args.batch, args.length, vocab_size, device)

    counts = {}
    for name in ("bert", "ltg-bert", "elc-bert"):
        model = build(name, vocab_size, "sdpa").to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        counts[name] = count_operators(model, optimizer, batch, args.bf16)
        if args.kernels:
            print(f"## {name}: kernels of one training step (batch {args.batch} x {args.length})\n")
            print(kernel_table(model, optimizer, batch, args.bf16))
            print()

    print(
        f"device {device}, batch {args.batch} x length {args.length}"
        + (", bf16 autocast" if args.bf16 else "")
        + ": aten operators dispatched by one training step"
    )
    print("| model | forward + backward | / BERT | AdamW step |")
    print("|---|---|---|---|")
    bert = sum(counts["bert"][0].values())
    for name, (counter, optimizer_counter) in counts.items():
        total = sum(counter.values())
        print(f"| {name} | {total:,} | {total / bert:.2f}x | {sum(optimizer_counter.values()):,} |")
    if args.top:
        for name, (counter, _) in counts.items():
            print(f"\n{name}: the {args.top} most frequent operators")
            for operator, count in counter.most_common(args.top):
                print(f"  {count:6,}  {operator}")


if __name__ == "__main__":
    main()
