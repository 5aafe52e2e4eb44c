"""What a pretraining corpus entry may name besides files: a `datasets` dataset. Kept apart from `corpus.py` (which
reads it with the `datasets` library, the `data` extra) so that the job configs that name it import without that
library."""

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetSource:
    """A corpus held in a `datasets` dataset: each row's `text_column` is one document, its lines the sentences.

    `path` is a Hub dataset name (online) or a local folder that `datasets.load_dataset` reads, i.e. one holding data
    files (`.txt`, `.jsonl`, `.csv`, `.parquet`, ...; a `train.jsonl` is the train split). A folder written by
    `Dataset.save_to_disk` is not one: write it out with `to_parquet` / `to_json` instead.
    """

    path: str
    name: str | None = None  # the dataset's configuration, e.g. "wikitext-103-raw-v1"
    split: str = "train"
    text_column: str = "text"
