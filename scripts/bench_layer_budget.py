"""The time a training step saves when `layer_budget` has frozen k of a model's L layers: the same model and batch
trained with all layers training and with k frozen (`elc_bert.training.layer_budget.freeze_layers`), in rounds that
alternate the two in one process, so that both see the same machine; prints the median step time of each and their
ratio (frozen / all), beside the analytic FLOP share `step_flops` counts.

    OMP_NUM_THREADS=1 python scripts/bench_layer_budget.py --layers 8 --freeze 4 [--batch 32 --length 128]
"""

import argparse
import copy
import statistics
import time

import torch
from bench_model import make_batch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.training.layer_budget import freeze_layers, step_flops
from elc_bert.training.optim import Lamb


def step_seconds(model, optimizer, batch, steps: int) -> float:
    """The median seconds of `steps` training steps (forward, backward, optimizer step)."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--freeze", type=int, default=4, help="layers frozen (the middle ones)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ElcBertConfig.from_preset(args.preset, num_hidden_layers=args.layers, vocab_size=args.vocab)
    frozen_layers = list(range(args.layers))[(args.layers - args.freeze) // 2 :][: args.freeze]
    models = {"all layers": ElcBertForMaskedLM(config).train()}
    models["frozen"] = copy.deepcopy(models["all layers"])
    freeze_layers(models["frozen"], frozen_layers)
    optimizers = {
        name: Lamb([p for p in model.parameters() if p.requires_grad], lr=1e-3) for name, model in models.items()
    }
    batch = make_batch(args.batch, args.length, args.vocab, "cpu")
    for name in models:  # warm-up
        step_seconds(models[name], optimizers[name], batch, 1)
    times = {name: [] for name in models}
    for _ in range(args.rounds):
        for name in models:
            times[name].append(step_seconds(models[name], optimizers[name], batch, args.steps))
    medians = {name: statistics.median(values) for name, values in times.items()}
    flops = step_flops(models["frozen"], args.batch, args.length, 0.15, frozen=frozen_layers)
    print(
        f"{args.preset} ELC-BERT, {args.layers} layers, {args.freeze} frozen {frozen_layers}, batch {args.batch} x "
        f"{args.length}, {torch.get_num_threads()} thread(s), median of {args.rounds} rounds of {args.steps} steps"
    )
    print("| arm | seconds per step |")
    print("|---|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.3f} |")
    print(f"ratio frozen / all: {medians['frozen'] / medians['all layers']:.3f} "
          f"(analytic FLOPs: {1 - flops['saved_share']:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
