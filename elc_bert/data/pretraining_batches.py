"""Pretraining batches: which packed samples each step trains on, cut into the micro-batch rows the Trainer reads.

The job names the phases of its run (`Phase`) and how many parts each global batch is shared over (processes x
accumulation steps); this module draws the batches (`schedule_batches`, or consecutive samples of a shuffled stream),
cuts them into rows (`BatchRows`, `StreamedRows`), masks a row's samples as one batch (`BatchRowCollator`) and
counts what the samples hold (tokens, words, padded positions, the corpus's coverage).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..extras import needs
from ..models.errors import InputError
from .corpus import naming_damaged_files, streamed_samples
from .pretraining import SpanMaskingCollator, first_fit_rows
from .sources import DatasetSource

with needs("data", "pretraining batches (elc_bert.data.pretraining_batches)"):
    import datasets
    import pyarrow.compute


@dataclass
class Phase:
    """A stretch of a run: `steps` global batches of `batch_size` packed `samples`, each of at most `max_length`
    tokens (`samples` None until they are packed, and when streaming)."""

    max_length: int
    batch_size: int
    steps: int
    samples: datasets.Dataset | None = None


def schedule_batches(num_samples: int, batch_size: int, num_batches: int, seed: int) -> list[list[int]]:
    """Sample indices of `num_batches` full batches: successive seeded permutations of range(num_samples) (one per
    epoch), read in consecutive chunks of `batch_size`, so that every sample is seen once per epoch."""
    if num_samples == 0:
        raise InputError("cannot schedule batches from an empty dataset")
    generator = torch.Generator().manual_seed(seed)
    needed = num_batches * batch_size
    epochs = -(-needed // num_samples)
    order = torch.cat([torch.randperm(num_samples, generator=generator) for _ in range(epochs)])[:needed]
    return order.view(num_batches, batch_size).tolist() if num_batches else []


def split_batches(batches: list[list[int]], parts: int) -> list[list[int]]:
    """Each global batch cut into `parts` equal micro-batches, in order. The Trainer (through accelerate) hands
    process w of W the rows w, w + W, w + 2W, ... and accumulates G rows per step, so with parts = W x G chunk
    g x W + w of every global batch goes to process w at accumulation step g: the processes share each global batch
    and see disjoint samples."""
    rows = []
    for batch in batches:
        if len(batch) % parts:
            raise InputError(f"a batch of {len(batch)} cannot be split into {parts} equal parts")
        size = len(batch) // parts
        rows.extend(batch[k * size : (k + 1) * size] for k in range(parts))
    return rows


def evenly_spaced(samples: list, count: int) -> list:
    """`count` samples spread evenly over the list (all when it is shorter), so that a capped validation set still
    draws from every source file."""
    if count >= len(samples):
        return samples
    stride = len(samples) / count
    return [samples[int(i * stride)] for i in range(count)]


class BatchRows(torch.utils.data.Dataset):
    """Row k: the samples of (micro-)batch k, `batches[k]` being their indices into the packed `samples`, read when
    the Trainer asks for the row. The batches are drawn here (`training_rows`, `validation_rows`), not by the
    Trainer, which reads the rows in order, one per micro-step and process.

    With `parts` (micro-batches per global batch), each row also names the step that draws it (`first_step` plus
    k // parts: the masks are drawn anew at each step, `SpanMaskingCollator`) and the phase's sample length
    `max_length`; without (validation), rows draw nothing: their masks stay the same."""

    def __init__(self, samples, batches: list[list[int]], parts=None, first_step: int = 0, max_length=None):
        self.samples, self.batches = samples, batches
        self.parts, self.first_step, self.max_length = parts, first_step, max_length

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        row = {"input_ids": self.samples[self.batches[index]]["input_ids"]}
        if self.parts is not None:
            row.update(draw=self.first_step + index // self.parts, max_length=self.max_length)
        return row


class StreamedRows(torch.utils.data.IterableDataset):
    """The rows of a streamed corpus: consecutive samples of the shuffled stream form each global batch of
    `batch_size`, cut into `parts` micro-batch rows in the order `split_batches` uses; `num_steps` batches in all
    (the stream starts over when it ends). `sources`: the `DatasetSource`s streamed, for naming a damaged data file
    (`naming_damaged_files`)."""

    def __init__(
        self, samples: datasets.IterableDataset, batch_size: int, parts: int, num_steps: int, max_length, sources=()
    ):
        self.samples, self.batch_size, self.parts, self.num_steps = samples, batch_size, parts, num_steps
        self.max_length, self.sources = max_length, list(sources)

    def __iter__(self):
        with naming_damaged_files(self.sources):
            yield from self._rows()

    def _rows(self) -> Iterator[dict]:
        batches, batch, epoch = 0, [], 0
        while batches < self.num_steps:
            self.samples.set_epoch(epoch)
            seen = 0
            for sample in self.samples:
                seen += 1
                batch.append(sample["input_ids"])
                if len(batch) == self.batch_size:
                    for rows in split_batches([batch], self.parts):
                        yield {"input_ids": rows, "draw": batches, "max_length": self.max_length}
                    batches, batch = batches + 1, []
                    if batches == self.num_steps:
                        return
            if not seen:  # it would start over forever
                named = ", ".join(f"{s.path} ({s.split} split, text column {s.text_column!r})" for s in self.sources)
                raise InputError(
                    f"{named or 'the streamed corpus'}: yielded no sample in a whole pass (no text in its text column?)"
                )
            epoch += 1


@dataclass
class BatchRowCollator:
    """Masks the samples of the batch rows of `BatchRows` (or `StreamedRows`) as one batch, drawn by the rows' step."""

    masking: SpanMaskingCollator

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        samples = [sample for row in rows for sample in row["input_ids"]]
        return self.masking(samples, draw=rows[0].get("draw"), max_length=rows[0].get("max_length"))


def sample_lengths(samples: datasets.Dataset) -> list[int]:
    """The number of tokens of every packed sample, read off the Arrow column without building the samples."""
    return pyarrow.compute.list_value_length(samples.data.column("input_ids")).to_pylist()


def sample_words(samples: datasets.Dataset) -> np.ndarray:
    """The words of every packed sample, as BabyLM counts them (whitespace-separated, in the text as released): each
    document's words go with its tokens to the samples that first hold them (corpus.SAMPLE_FEATURES), so one epoch
    of samples counts every word of the corpus once, whatever preparation did to the text."""
    return samples.data.column("words").to_numpy()


def padded_positions(lengths: list[int], row_capacity: int | None = None) -> int:
    """The positions a micro-batch of samples of these lengths occupies: one sample per row, padded to the longest,
    or laid several to a row of `row_capacity` tokens (`first_fit_rows`)."""
    if row_capacity is None:
        return len(lengths) * max(lengths)
    rows = first_fit_rows(lengths, row_capacity)
    return len(rows) * max(sum(lengths[i] for i in row) for row in rows)


def coverage(samples: datasets.Dataset) -> dict[str, float]:
    """What one epoch of packed samples does with the corpus's tokens: the share that reaches a sample, and the
    positions holding a token that an earlier sample already held (the reference rule repeats the cut part of a
    sentence) as a share of the corpus's tokens."""
    table = samples.data
    new = pyarrow.compute.sum(table.column("new_tokens")).as_py() or 0
    missed = pyarrow.compute.sum(table.column("missed_tokens")).as_py() or 0
    held = sum(sample_lengths(samples)) - 2 * len(samples)  # without [CLS] and [SEP]
    corpus_tokens = max(1, new + missed)
    return {"corpus_token_share": new / corpus_tokens, "repeated_token_share": (held - new) / corpus_tokens}


def training_rows(phases: list[Phase], parts: int, seed: int, pack_rows: bool = False, count_words: bool = False):
    """The training rows of packed phases (micro-batches of `parts` per global batch; phase p's batches drawn with
    `seed` + p), the tokens of each step, the words of each step (with `count_words`, else []) and the share of real
    tokens among the padded micro-batches' positions (before `short_p` cuts; with `pack_rows`, samples laid several
    to a row of the phase's `max_length`)."""
    rows, step_tokens, step_words, padded = [], [], [], 0
    for number, phase in enumerate(phases):
        batches = schedule_batches(len(phase.samples), phase.batch_size, phase.steps, seed + number)
        lengths = sample_lengths(phase.samples)
        step_tokens += [sum(lengths[i] for i in batch) for batch in batches]
        padded += sum(
            padded_positions([lengths[i] for i in micro], phase.max_length if pack_rows else None)
            for batch in batches
            for micro in split_batches([batch], parts)
        )
        if count_words:
            words = sample_words(phase.samples)
            step_words += [int(words[batch].sum()) for batch in batches]
        first_step = len(step_tokens) - phase.steps
        rows.append(BatchRows(phase.samples, split_batches(batches, parts), parts, first_step, phase.max_length))
    return torch.utils.data.ConcatDataset(rows), step_tokens, step_words, sum(step_tokens) / padded


def streamed_rows(
    sources: list[DatasetSource],
    tokenizer,
    phase: Phase,
    parts: int,
    *,
    seed: int,
    shuffle_buffer: int,
    cache_dir,
    packing: str,
    prepare: bool,
) -> StreamedRows:
    """The training rows of corpora streamed from `sources` (their samples packed as `streamed_samples` packs them,
    to `phase.max_length` tokens), shuffled in a buffer of `shuffle_buffer` samples with `seed`."""
    streams = [streamed_samples(source, tokenizer, phase.max_length, cache_dir, packing, prepare) for source in sources]
    stream = streams[0] if len(streams) == 1 else datasets.concatenate_datasets(streams)
    stream = stream.shuffle(seed=seed, buffer_size=shuffle_buffer)
    return StreamedRows(stream, phase.batch_size, parts, phase.steps, phase.max_length, sources)


def validation_rows(samples: datasets.Dataset, batch_size: int, max_samples: int | None = None) -> BatchRows:
    """Batches of `batch_size` validation samples (at most `max_samples`, evenly spaced), in order."""
    chosen = list(range(len(samples)))
    if max_samples is not None:
        chosen = evenly_spaced(chosen, max_samples)
    return BatchRows(samples, [chosen[i : i + batch_size] for i in range(0, len(chosen), batch_size)])
