"""The suite's fixtures and its environment (a datasets cache of its own, one intra-op thread). What test files
import lives in helpers.py (and hub_server.py). A fixture that the test files of several modules use is here, at
session scope, so that each worker computes it once; a fixture of one test file stays in that file.
"""

import contextlib
import io
import os
import sys
import tempfile

# The jobs cache their prepared corpora with `datasets`: the suite's go to a folder of its own, not the user's cache
# (set before `datasets` reads its configuration; subprocesses inherit it).
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="elc-bert-tests-datasets-"))

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # `helpers` and `reference_impl` sit next to this file

from helpers import (  # noqa: E402
    EXPORTED_MODELS,
    HANDOFFS_RUN_STEPS,
    TINY,
    TOY_SENTENCES,
    WIKITEXT_SAMPLE,
    build_model,
    main_outputs,
    padded_batch,
    randomise_elc_logits,
    tiny_config_kwargs,
    word_level_tokenizer,
    write_reference_checkpoint,
)
from hub_server import (  # noqa: E402
    LOAD_AND_COMPARE,
    load_report,
    point_hub_client_at,
    run_without_package,
    start_hub_server,
)

import elc_bert  # noqa: E402,F401  (registers the Auto classes)
from elc_bert import ElcBertConfig  # noqa: E402

# Tiny models gain nothing from intra-op threads, and spinning OpenMP workers slow everything down when the machine's
# cores are busy with something else.
torch.set_num_threads(1)


# The session fixtures that take a job or a child process to build, and the xdist group of the tests that use them:
# `make test` runs `pytest -n 2 --dist loadgroup`, so that each is built on one worker only.
# `wheel` (test_distribution.py) builds from the repository's own tree: two builds at once would share its build/.
EXPENSIVE_FIXTURES = {
    "exported": "exports",
    "hub": "exports",
    "pretrain_run": "exports",
    "run": "handoffs-run",
    "wheel": "wheel",
}


def pytest_collection_modifyitems(items):
    for item in items:
        groups = {EXPENSIVE_FIXTURES[name] for name in item.fixturenames if name in EXPENSIVE_FIXTURES}
        if groups:
            item.add_marker(pytest.mark.xdist_group(name="+".join(sorted(groups))))


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
def flex_kernel_options_calls(monkeypatch):
    """A list that records the `kernel_options` of every `flex_attention` call (None where none were given); torch's
    function still does the work."""
    import torch.nn.attention.flex_attention as flex_module

    calls = []
    original = flex_module.flex_attention

    def recording(*args, **kwargs):
        calls.append(kwargs.get("kernel_options"))
        return original(*args, **kwargs)

    monkeypatch.setattr(flex_module, "flex_attention", recording)
    return calls


@pytest.fixture
def reference_checkpoint(tmp_path):
    """Factory: reference_checkpoint(elc=..., weighted_output=..., fmt=..., **kw) -> (folder, state_dict)."""
    counter = iter(range(1000))

    def make(**kwargs):
        folder = tmp_path / f"ref{next(counter)}"
        state_dict = write_reference_checkpoint(folder, **kwargs)
        return str(folder), state_dict

    return make


# ------------------------------------------------------------------------ shared by the test files of several modules
@pytest.fixture(scope="session")
def toy_tokenizer():
    """A tokenizer trained on TOY_SENTENCES (the scoring, loading and BLiMP tests)."""
    from elc_bert.data.tokenizer import train_tokenizer

    return train_tokenizer(TOY_SENTENCES * 3, vocab_size=160, min_frequency=1)


# The BabyLM tests' tokenizer and language models (test_babylm.py, test_reading.py). Module scope, not session: a test
# hands the model to eval-babylm, which moves it to its device.
@pytest.fixture(scope="module")
def tokenizer():
    """A 400-token tokenizer trained on the first 600 lines of the WikiText-2 sample."""
    from elc_bert.data.tokenizer import train_tokenizer

    return train_tokenizer(WIKITEXT_SAMPLE.read_text(encoding="utf-8").splitlines()[:600], 400, 2)


@pytest.fixture(scope="module")
def mlm(tokenizer):
    """A tiny ELC-BERT masked LM over `tokenizer`, its logits randomised (eval mode)."""
    from elc_bert import ElcBertForMaskedLM

    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**{**TINY, "vocab_size": len(tokenizer)}))
    randomise_elc_logits(model)
    return model.eval()


@pytest.fixture(scope="module")
def gpt(tokenizer):
    """A tiny GPT-2 causal LM over `tokenizer` (eval mode)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Every kind of model saved, exported, and its outputs on a padded batch: (folders, expected-outputs file)."""
    from elc_bert.hub.export import export

    root = tmp_path_factory.mktemp("export")
    tokenizer = word_level_tokenizer(TINY["vocab_size"])
    input_ids, attention_mask = padded_batch([9, 5], seed=3)
    expected, folders = {"input_ids": input_ids, "attention_mask": attention_mask}, {}
    for seed, (name, (auto_class, make)) in enumerate(EXPORTED_MODELS.items()):
        torch.manual_seed(seed)
        model = make().eval()
        randomise_elc_logits(model, seed)
        model.save_pretrained(root / f"{name}-saved")
        tokenizer.save_pretrained(root / f"{name}-saved")
        folders[name] = export(root / f"{name}-saved", root / name, repo_id=f"test-user/{name}")
        expected[name] = (auto_class, main_outputs(model, input_ids, attention_mask))
        if name == "elc_mlm":  # the bare encoder through AutoModel, from the same folder
            states = model.elc_bert(input_ids, attention_mask=attention_mask).last_hidden_state
            expected["elc_mlm/AutoModel"] = ("AutoModel", states[attention_mask.bool()])
    torch.save(expected, root / "expected.pt")
    return folders, root / "expected.pt"


@pytest.fixture(scope="session")
def hub(exported, tmp_path_factory):
    """The local Hub server after `elc-bert push` (run here, through HF_ENDPOINT) of the DWAtt fusion folder, and
    the report of ONE fresh process without the package that loads every exported folder from disk and the pushed
    repo through the same endpoint (one child process: importing torch and transformers dominates its time)."""
    import transformers

    from elc_bert.cli import main as cli_main

    folders, expected_file = exported
    root = tmp_path_factory.mktemp("hub")
    server, state, endpoint = start_hub_server(token="hf_test_token")
    try:
        with pytest.MonkeyPatch.context() as patch:
            point_hub_client_at(patch, endpoint, "hf_test_token")
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                cli_main(["push", str(folders["fusion_elc_dwatt"]), "--repo-id", "test-user/fusion", "--private"])
            # Without `elc-bert export`: the library's own `push_to_hub` of a model loaded from a plain save.
            pushed = {}
            for name in ("elc_mlm", "fusion_elc_dwatt", "fusion_bert_concat"):
                saved = folders[name].parent / f"{name}-saved"
                auto_class = getattr(transformers, EXPORTED_MODELS[name][0])
                auto_class.from_pretrained(saved).push_to_hub(f"test-user/plain-{name}", token="hf_test_token")
                transformers.AutoTokenizer.from_pretrained(saved).push_to_hub(
                    f"test-user/plain-{name}", token="hf_test_token"
                )
                pushed[f"pushed:{name}"] = f"test-user/plain-{name}"
        sources = {name: str(folder) for name, folder in folders.items()}
        sources["elc_mlm/AutoModel"] = str(folders["elc_mlm"])
        sources["hub:fusion_elc_dwatt"] = "test-user/fusion"
        # Plain `save_pretrained` folders (no export) load the same way.
        sources.update({f"saved:{name}": str(folder.parent / f"{name}-saved") for name, folder in folders.items()})
        sources.update(pushed)
        script = f"SOURCES = {sources!r}\nEXPECTED = {str(expected_file)!r}\n" + LOAD_AND_COMPARE
        env = {"HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_test_token", "HF_HOME": str(root / "hf")}
        report = load_report(run_without_package(script, env, root))
    finally:
        server.shutdown()
    return {"state": state, "endpoint": endpoint, "push_output": output.getvalue(), "report": report}


@pytest.fixture(scope="session")
def pretrain_run(tmp_path_factory):
    """A real (tiny) pretraining run directory, with validation, on the bundled WikiText-2 sample."""
    from elc_bert.training.pretrain import PretrainConfig, pretrain

    run = tmp_path_factory.mktemp("pretrain") / "run"
    config = PretrainConfig(
        output_dir=str(run),
        data_dir=str(WIKITEXT_SAMPLE.parent),
        train_files=[WIKITEXT_SAMPLE.name],
        validation_files=[WIKITEXT_SAMPLE.name],
        max_eval_samples=16,
        preset="tiny",
        vocab_size=300,
        min_frequency=2,
        seq_length=32,
        max_steps=3,
        batch_size=8,
        training={"save_steps": 100, "logging_steps": 1, "dataloader_num_workers": 0, "disable_tqdm": True},
    )
    pretrain(config)
    return run


@pytest.fixture(scope="session")
def run(tmp_path_factory):
    """A tiny pretraining run on the first 900 paragraphs of the WikiText-2 sample, keeping checkpoint-3 and
    checkpoint-6 (the final weights) and words-seen checkpoints; and the sentences of the other paragraphs."""
    from elc_bert.training.pretrain import PretrainConfig, pretrain

    root = tmp_path_factory.mktemp("handoffs")
    lines = WIKITEXT_SAMPLE.read_text(encoding="utf-8").splitlines()
    (root / "train.txt").write_text("\n".join(lines[:900]) + "\n", encoding="utf-8")
    config = PretrainConfig(
        output_dir=str(root / "run"),
        data_dir=str(root),
        train_files=["train.txt"],
        preset="tiny",
        vocab_size=1000,
        min_frequency=2,
        seq_length=32,
        max_steps=HANDOFFS_RUN_STEPS,
        batch_size=8,
        checkpoint_words=[200, 500, 10**9],
        training={"save_steps": 3, "logging_steps": 1, "dataloader_num_workers": 0, "disable_tqdm": True},
    )
    pretrain(config)
    held_out = [sentence + " ." for line in lines[900:] for sentence in line.split(" . ") if sentence.strip()]
    return root / "run", [s for s in held_out if not any(mark in s for mark in ("@", "<unk>", "="))]
