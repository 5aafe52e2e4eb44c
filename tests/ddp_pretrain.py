"""Run by test_pretrain.py under `torchrun --nproc_per_node 2`: the pretraining job, then each rank writes a digest
of its own weights so that the test can check that the ranks agree."""

import hashlib
import sys
from pathlib import Path

import torch.distributed as dist

from elc_bert.training.config import load_config
from elc_bert.training.pretrain import PretrainConfig, pretrain


def main():
    config = load_config(PretrainConfig, sys.argv[1], sys.argv[2:])
    captured = {}
    import elc_bert.training.pretrain as job

    original = job.Trainer

    class RecordingTrainer(original):
        def train(self, *args, **kwargs):
            result = super().train(*args, **kwargs)
            captured["model"] = self.model
            return result

    job.Trainer = RecordingTrainer
    pretrain(config)
    digest = hashlib.sha256()
    for name, tensor in sorted(captured["model"].state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    (Path(config.output_dir) / f"rank{rank}.sha256").write_text(f"{world} {digest.hexdigest()}")


if __name__ == "__main__":
    main()
