"""`elc-bert push` (elc_bert/hub/push.py) through a local Hub-compatible server (tests/hub_server.py, reached through
`HF_ENDPOINT`): the pushed repo holds the exported folder and loads, in a process without the package, with the
original outputs, as do the library's own `push_to_hub` of plain saves; without a token the error says how to get
one. The server, the push and the loading process's report are the session fixture `hub` of conftest.py.

`push --revisions`: a tiny pretraining run's words-seen checkpoints become the branches the BabyLM 2025 rules name
(chck_1M, ...) beside main, which `eval-babylm --revision` / `--all-revisions` score as it scores the run's folders; a
second push uploads nothing, a push cut short resumes, a repository of another run is refused before any upload.
"""

import json
import shutil

import huggingface_hub
import pytest
from helpers import EXPORTED_MODELS as MODELS
from helpers import MILESTONES, milestone_run
from hub_server import local_hub, put_branch
from safetensors.torch import load_file

from elc_bert import InputError, runs
from elc_bert.cli import main as cli_main
from elc_bert.hub.push import REVISION_RECORD, resolve_token, run_identity


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
    main = repo["branches"]["main"]
    assert repo["private"] and f"{hub['endpoint']}/test-user/fusion/commit/{main['sha']}" in hub["push_output"]
    assert main["files"] == {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    # Read back by the fresh process (no package) through the same endpoint; transformers keys the remote code's
    # module by repo and commit, so it came from the pushed commit.
    entry = hub["report"]["hub:fusion_elc_dwatt"]
    assert entry["module"].startswith("transformers_modules.") and main["sha"] in entry["module"], entry
    assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, entry


def _no_token(monkeypatch, tmp_path) -> None:
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def test_push_without_a_token_is_a_clear_error(monkeypatch, tmp_path):
    """The user's to fix (InputError, still a PermissionError for callers that catch one), saying how to log in."""
    _no_token(monkeypatch, tmp_path)
    with pytest.raises(InputError, match="HF_TOKEN.*hf auth login.*huggingface-cli login") as error:
        resolve_token()
    assert isinstance(error.value, PermissionError)


# ------------------------------------------------------------------------------------------------ BabyLM revisions
REPO_ID = "test-user/babylm-run"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return milestone_run(tmp_path_factory.mktemp("milestones"), seed=0)


@pytest.fixture
def server(monkeypatch, tmp_path):
    """The local Hub server's state, this process's huggingface_hub and transformers pointed at it."""
    with local_hub(monkeypatch, tmp_path / "hf-cache") as state:
        yield state


def push_revisions(run, capsys, repo_id=REPO_ID) -> dict[str, str]:
    """`elc-bert push RUN --repo-id REPO_ID --revisions`: {revision: what it printed for it}."""
    cli_main(["push", str(run), "--repo-id", repo_id, "--revisions"])
    lines = capsys.readouterr().out.splitlines()
    return dict(line.split(": ", 1) for line in lines)


def commits_by_branch(state, repo_id=REPO_ID) -> dict[str, int]:
    counts = {}
    for commit in state.repos[repo_id]["commits"]:
        counts[commit["branch"]] = counts.get(commit["branch"], 0) + 1
    return counts


def test_push_revisions_names_branches_by_words_and_a_second_push_uploads_nothing(run_dir, server, capsys):
    printed = push_revisions(run_dir, capsys)
    assert list(printed) == [*MILESTONES, "main"] and all(url.startswith("http") for url in printed.values())
    branches = server.repos[REPO_ID]["branches"]
    assert set(branches) == {*MILESTONES, "main"}
    identity = run_identity(run_dir)
    for revision, folder in {**MILESTONES, "main": "."}.items():
        files = branches[revision]["files"]
        assert {"config.json", "README.md", "tokenizer.json", REVISION_RECORD} <= set(files)
        record = json.loads(files[REVISION_RECORD])
        assert record["run"] == identity and record["revision"] == revision
        assert record["model_sha256"] == runs.fingerprint(run_dir / folder)
        if folder != ".":
            assert record["milestone"] == int(revision[len("chck_") : -1]) * 10**6
        pushed = huggingface_hub.hf_hub_download(REPO_ID, "model.safetensors", revision=revision)
        local = load_file(run_dir / folder / "model.safetensors")
        assert {k: v.tolist() for k, v in load_file(pushed).items()} == {k: v.tolist() for k, v in local.items()}
    before = commits_by_branch(server)
    assert before == {revision: 1 for revision in printed}

    assert push_revisions(run_dir, capsys) == {revision: "unchanged" for revision in printed}
    assert commits_by_branch(server) == before


def test_a_push_cut_short_resumes_with_the_revisions_it_had_not_pushed(run_dir, server, capsys, monkeypatch):
    real = huggingface_hub.HfApi.upload_folder
    calls = []

    def cut_after_one(self, **kwargs):
        calls.append(kwargs["revision"])
        if len(calls) == 2:
            raise ConnectionError("connection reset")
        return real(self, **kwargs)

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", cut_after_one)
    with pytest.raises(SystemExit) as exit_:
        push_revisions(run_dir, capsys)
    assert exit_.value.code == 1 and "connection reset" in capsys.readouterr().err
    assert commits_by_branch(server) == {"chck_1M": 1}
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", real)
    printed = push_revisions(run_dir, capsys)
    assert printed["chck_1M"] == "unchanged" and all(printed[r] != "unchanged" for r in ("chck_2M", "chck_3M", "main"))
    assert commits_by_branch(server) == {"chck_1M": 1, "chck_2M": 1, "chck_3M": 1, "main": 1}


def test_push_revisions_without_a_token_exits_2_before_anything_is_exported(run_dir, monkeypatch, tmp_path, capsys):
    _no_token(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exit_:
        push_revisions(run_dir, capsys)
    assert exit_.value.code == 2 and "hf auth login" in capsys.readouterr().err


def test_a_missing_milestone_between_kept_ones_is_refused_before_any_upload(run_dir, server, capsys, tmp_path):
    """words-2M deleted from a run that kept words-1M and words-3M: the push would skip chck_2M silently."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    shutil.rmtree(run / "words-2M")
    with pytest.raises(SystemExit) as exit_:
        push_revisions(run, capsys)
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{run}: the run passed chck_2M" in error and "words-2M missing" in error
    assert REPO_ID not in server.repos
    # the last one gone leaves no gap: the run is pushed as far as it holds checkpoints
    shutil.copytree(run_dir / "words-2M", run / "words-2M")
    shutil.rmtree(run / "words-3M")
    assert list(push_revisions(run, capsys)) == ["chck_1M", "chck_2M", "main"]


def test_a_main_holding_only_a_readme_is_an_empty_main(run_dir, server, capsys):
    """A repository made on the Hub's website has a main with a README alone: the run's model goes there."""
    put_branch(server, REPO_ID, "main", {"README.md": b"---\nlicense: mit\n---\n# babylm-run\n"})
    assert list(push_revisions(run_dir, capsys)) == [*MILESTONES, "main"]
    main = server.repos[REPO_ID]["branches"]["main"]["files"]
    assert json.loads(main[REVISION_RECORD])["revision"] == "main" and "model.safetensors" in main


def test_a_repository_of_another_run_is_refused_before_anything_is_uploaded(run_dir, server, capsys, tmp_path):
    push_revisions(run_dir, capsys)
    before = commits_by_branch(server)
    other = milestone_run(tmp_path / "other", seed=1)
    with pytest.raises(SystemExit) as exit_:
        push_revisions(other, capsys)
    error = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"{REPO_ID} holds revision chck_1M of another run" in error and REVISION_RECORD in error
    assert commits_by_branch(server) == before
    # a revision branch without a record, holding another model, is another run's too
    repo = server.repos[REPO_ID]
    del repo["branches"]["chck_2M"]["files"][REVISION_RECORD]
    del repo["branches"]["chck_1M"]
    with pytest.raises(InputError, match=r"holds revision chck_2M of another run \(no elc_bert_revision.json, and "):
        from elc_bert.hub.push import push_revisions as push_function

        push_function(other, REPO_ID)
    assert commits_by_branch(server) == before
    # main holding this run's own export, pushed without a record by `elc-bert push`, is this run's
    cli_main(["export", str(run_dir), str(tmp_path / "exported")])
    cli_main(["push", str(tmp_path / "exported"), "--repo-id", "test-user/plain"])
    capsys.readouterr()
    assert list(push_revisions(run_dir, capsys, "test-user/plain")) == [*MILESTONES, "main"]
    assert commits_by_branch(server, "test-user/plain")["main"] == 2


def test_revisions_of_a_pushed_run_score_as_its_folders(run_dir, server, capsys, tmp_path):
    """eval-babylm REPO --all-revisions (and --revision R) gives the numbers of --all-checkpoints on the run: the
    branches hold the run's very models, named as the run's words-seen folders are named in eval-babylm."""
    from elc_bert.evaluation.babylm import evaluate_babylm

    push_revisions(run_dir, capsys)
    data = tmp_path / "data" / "blimp_filtered"
    data.mkdir(parents=True)
    pairs = [("The cat is here.", "The cat are here."), ("He ran home.", "He run home."), ("We saw it.", "We seen it.")]
    labels = {"field": "syntax", "linguistics_term": "agreement", "UID": "toy"}
    lines = [json.dumps({"sentence_good": good, "sentence_bad": bad, **labels}) for good, bad in pairs]
    (data / "toy.jsonl").write_text("\n".join(lines) + "\n")
    local = evaluate_babylm(run_dir, data, tmp_path / "local", ["blimp"], all_checkpoints=True, progress=False)
    hub = evaluate_babylm(REPO_ID, data, tmp_path / "hub", ["blimp"], all_revisions=True, progress=False)
    assert list(hub["rows"]) == [*MILESTONES, "main"]
    assert list(local["rows"]) == ["checkpoint-6", *MILESTONES, "main"]
    for revision in hub["rows"]:
        assert hub["rows"][revision]["blimp"] == pytest.approx(local["rows"][revision]["blimp"], abs=1e-9)
    written = tmp_path / "hub" / "babylm-run" / "chck_2M" / "zero_shot" / "mlm" / "blimp" / "blimp_filtered"
    assert (written / "predictions.json").read_text() == (
        tmp_path / "local" / "run" / "chck_2M" / "zero_shot" / "mlm" / "blimp" / "blimp_filtered" / "predictions.json"
    ).read_text()

    one = ["--revision", "chck_2M", "--data", str(data), "--tasks", "blimp", "--out", str(tmp_path / "one")]
    cli_main(["eval-babylm", REPO_ID, *one])
    one = json.loads((tmp_path / "one" / "babylm-run" / "summary.json").read_text())["rows"]
    assert list(one) == ["chck_2M"] and one["chck_2M"]["blimp"] == pytest.approx(local["rows"]["chck_2M"]["blimp"])
    assert [request for request in server.unhandled if "/api/agent-harnesses" not in request] == []
