"""Runs the pretraining job in its own process for test_pretrain.py.

    python tests/run_pretrain.py CONFIG [--die-after-checkpoint STEP] [key=value ...]

With --die-after-checkpoint the process kills itself (os._exit, no clean-up) right after the Trainer has saved the
checkpoint of that step: an interrupted run. Every run writes rank<r>.sha256, a digest of that process's final
weights and the world size, so that a test can compare ranks (under torchrun) or runs, and rank<r>.samples.json, the
sequences that process trained on, in order.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist
from transformers import TrainerCallback

import elc_bert.training.pretrain as job
from elc_bert.data.pretraining_batches import BatchRowCollator
from elc_bert.job_configs import load_config


class DieAfterCheckpoint(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os._exit(17)


def main():
    arguments = sys.argv[1:]
    die_after = None
    if "--die-after-checkpoint" in arguments:
        position = arguments.index("--die-after-checkpoint")
        die_after = int(arguments[position + 1])
        del arguments[position : position + 2]
    config = load_config(job.PretrainConfig, arguments[0], arguments[1:])
    captured = {}

    class InstrumentedTrainer(job.Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if die_after is not None:
                self.add_callback(DieAfterCheckpoint(die_after))

        def train(self, *args, **kwargs):
            result = super().train(*args, **kwargs)
            captured["model"] = self.model
            return result

    # Every sequence this process trains on (its ids, unmasked), in order: a test can tell which samples each rank saw.
    seen = []
    collate = BatchRowCollator.__call__

    def recording_collate(self, rows):
        seen.extend(sample for row in rows for sample in row["input_ids"])
        return collate(self, rows)

    BatchRowCollator.__call__ = recording_collate
    job.Trainer = InstrumentedTrainer
    job.pretrain(config)
    digest = hashlib.sha256()
    for name, tensor in sorted(captured["model"].state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    (Path(config.output_dir) / f"rank{rank}.sha256").write_text(f"{world} {digest.hexdigest()}")
    (Path(config.output_dir) / f"rank{rank}.samples.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
