"""The feature cache of a layer-fusion model in feature extraction (a frozen backbone): the backbone's states of each
example, computed once and reused in every later epoch. `LayerFusionModel.enable_feature_cache` turns it on; the model
asks it for the states (`FeatureCache.states`) with the function that runs its backbone.
"""

import torch
from tqdm.auto import tqdm


class FeatureCache:
    """The frozen backbone's states of each example, keyed by the example's real (unpadded) token ids and token types
    (`key`); values are S x n x D tensors on the CPU. Correct only while the backbone is frozen, in eval mode and
    right-padded inputs give the same states at real positions.

    `run_backbone(input_ids, attention_mask, token_type_ids)` returns the states z_0..z_L of a batch (each B x T x D).
    """

    def __init__(self):
        self.store: dict[bytes, torch.Tensor] = {}
        self.hits = self.misses = 0

    @staticmethod
    def key(input_ids: torch.Tensor, mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> bytes:
        """The real tokens' ids, and their token types unless all 0 (the backbones' default when none are given)."""
        mask = mask.bool()
        key = input_ids[mask].long().cpu().numpy().tobytes()
        if token_type_ids is not None and bool(token_type_ids[mask].any()):
            key += b"|" + token_type_ids[mask].long().cpu().numpy().tobytes()
        return key

    def __len__(self):
        return len(self.store)

    def states(self, run_backbone, input_ids, attention_mask, token_type_ids=None, positions=None) -> list:
        """z_0..z_L of the batch, each B x T x D (zeros at padding), or with `positions` (B x T bool, real tokens only)
        each N x D for those N positions in row-major order: cached rows from the store, the others computed with
        `run_backbone` and stored."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        types = token_type_ids if token_type_ids is not None else [None] * len(input_ids)
        keys = [self.key(*row) for row in zip(input_ids, attention_mask, types)]
        missing = [i for i, key in enumerate(keys) if key not in self.store]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            rows = torch.tensor(missing, device=input_ids.device)
            types = token_type_ids[rows] if token_type_ids is not None else None
            self._store(run_backbone, [keys[i] for i in missing], input_ids[rows], attention_mask[rows], types)
        real = attention_mask.bool().cpu()
        if positions is not None:
            wanted = positions.cpu()
            # Each cached S x n x D holds the n real tokens of its example: keep those among them that are wanted.
            pieces = [self.store[key][:, wanted[i][real[i]]] for i, key in enumerate(keys)]
            return list(torch.cat(pieces, dim=1).to(input_ids.device).unbind(0))  # S tensors N x D
        first = self.store[keys[0]]
        batch, length = input_ids.shape
        states = first.new_zeros((first.shape[0], batch, length, first.shape[-1]))
        for i, key in enumerate(keys):
            states[:, i, real[i]] = self.store[key]
        return list(states.to(input_ids.device).unbind(0))

    @torch.no_grad()
    def fill(self, run_backbone, examples, pad_id: int, device, batch_size: int = 64, progress: bool = True) -> None:
        """Stores the states of the `examples` not yet cached (dicts with unpadded `input_ids` and optional
        `token_type_ids`), in batches of like lengths padded with `pad_id`, on `device`."""
        todo = {}
        for example in examples:
            input_ids = torch.as_tensor(example["input_ids"], dtype=torch.long)
            types = example.get("token_type_ids")
            types = torch.as_tensor(types, dtype=torch.long) if types is not None else None
            key = self.key(input_ids, torch.ones_like(input_ids), types)
            if key not in self.store:
                todo[key] = (input_ids, types)
        order = sorted(todo, key=lambda key: len(todo[key][0]))
        with tqdm(total=len(order), desc="feature cache", unit="example", disable=not progress) as bar:
            for start in range(0, len(order), batch_size):
                keys = order[start : start + batch_size]
                length = len(todo[keys[-1]][0])
                input_ids = torch.full((len(keys), length), pad_id, dtype=torch.long)
                attention_mask = torch.zeros_like(input_ids)
                token_type_ids = torch.zeros_like(input_ids)
                for row, key in enumerate(keys):
                    ids, types = todo[key]
                    input_ids[row, : len(ids)] = ids
                    attention_mask[row, : len(ids)] = 1
                    if types is not None:
                        token_type_ids[row, : len(ids)] = types
                has_types = any(todo[key][1] is not None for key in keys)
                types = token_type_ids.to(device) if has_types else None
                self._store(run_backbone, keys, input_ids.to(device), attention_mask.to(device), types)
                bar.update(len(keys))

    @torch.no_grad()
    def _store(self, run_backbone, keys, input_ids, attention_mask, token_type_ids) -> None:
        """Runs the backbone on a batch and stores each row's states at its real tokens (S x n x D) under its key."""
        stacked = torch.stack(run_backbone(input_ids, attention_mask, token_type_ids))  # S x b x T x D
        for row, key in enumerate(keys):
            self.store[key] = stacked[:, row, attention_mask[row].bool()].cpu()
