"""The suite's fixtures and its environment (a datasets cache of its own, one intra-op thread). What test files
import lives in helpers.py.
"""

import os
import sys
import tempfile

# The jobs cache their prepared corpora with `datasets`: the suite's go to a folder of its own, not the user's cache
# (set before `datasets` reads its configuration; subprocesses inherit it).
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="elc-bert-tests-datasets-"))

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # `helpers` and `reference_impl` sit next to this file

from helpers import build_model, padded_batch, tiny_config_kwargs, write_reference_checkpoint  # noqa: E402

import elc_bert  # noqa: E402,F401  (registers the Auto classes)
from elc_bert import ElcBertConfig  # noqa: E402

# Tiny models gain nothing from intra-op threads, and spinning OpenMP workers slow everything down when the machine's
# cores are busy with something else.
torch.set_num_threads(1)


@pytest.fixture
def tiny_config():
    """Factory: a tiny ElcBertConfig with all dropouts 0; keyword arguments override fields."""

    def make(**overrides):
        return ElcBertConfig(**tiny_config_kwargs(**overrides))

    return make


@pytest.fixture
def make_model():
    """Factory: make_model(cls, seed=0, **config_overrides) -> seeded tiny model (eval mode, dropout 0)."""
    return build_model


@pytest.fixture
def batch():
    """A padded batch of 3 sequences of lengths 11, 7 and 4."""
    return padded_batch([11, 7, 4])


@pytest.fixture
def reference_checkpoint(tmp_path):
    """Factory: reference_checkpoint(elc=..., weighted_output=..., fmt=..., **kw) -> (folder, state_dict)."""
    counter = iter(range(1000))

    def make(**kwargs):
        folder = tmp_path / f"ref{next(counter)}"
        state_dict = write_reference_checkpoint(folder, **kwargs)
        return str(folder), state_dict

    return make
