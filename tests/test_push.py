"""`elc-bert push` (elc_bert/hub/push.py) through a local Hub-compatible server (tests/hub_server.py, reached through
`HF_ENDPOINT`): the pushed repo holds the exported folder and loads, in a process without the package, with the
original outputs, as do the library's own `push_to_hub` of plain saves; without a token the error says how to get
one. The server, the push and the loading process's report are the session fixture `hub` of conftest.py.
"""

import pytest
from helpers import EXPORTED_MODELS as MODELS

from elc_bert.hub.push import resolve_token


def test_plain_saves_and_push_to_hub_load_without_the_package(hub):
    """Hub-ready without `elc-bert export`: every class's plain `save_pretrained` folder, and `push_to_hub` of an
    ELC-BERT and of fusion models over ELC-BERT and BERT, load with `trust_remote_code` in a process where
    `elc_bert` cannot be imported, with the original outputs."""
    report = hub["report"]
    assert {name for name in report if name.startswith("saved:")} == {f"saved:{name}" for name in MODELS}
    assert {name for name in report if name.startswith("pushed:")} == {
        "pushed:elc_mlm",
        "pushed:fusion_elc_dwatt",
        "pushed:fusion_bert_concat",
    }
    for name, entry in report.items():
        if name.startswith(("saved:", "pushed:")):
            assert entry["module"].startswith("transformers_modules."), (name, entry)
            assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, (name, entry)


def test_push_and_load_through_a_local_hub(exported, hub):
    folder = exported[0]["fusion_elc_dwatt"]
    repo = hub["state"].repos["test-user/fusion"]
    assert repo["private"] and f"{hub['endpoint']}/test-user/fusion/commit/{repo['sha']}" in hub["push_output"]
    assert repo["files"] == {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    # Read back by the fresh process (no package) through the same endpoint; transformers keys the remote code's
    # module by repo and commit, so it came from the pushed commit.
    entry = hub["report"]["hub:fusion_elc_dwatt"]
    assert entry["module"].startswith("transformers_modules.") and repo["sha"] in entry["module"], entry
    assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, entry


def test_push_without_a_token_is_a_clear_error(monkeypatch, tmp_path):
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(PermissionError, match="HF_TOKEN.*hf auth login"):
        resolve_token()
