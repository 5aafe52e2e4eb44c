"""`elc-bert push OUT_DIR --repo-id USER/NAME [--private]`: an exported folder to the Hugging Face Hub; with
`--revisions`, a pretraining run's words-seen checkpoints as the branches of one repository that the BabyLM 2025 rules
name (`chck_1M`, ...) and its final model as `main` (`push_revisions`).

The token comes from the usual places (`HF_TOKEN`, then the token file written by `hf auth login`, formerly
`huggingface-cli login`); the Hub from `HF_ENDPOINT` (default https://huggingface.co). Files go up with
`huggingface_hub`'s `upload_folder`.
"""

import json
import logging
import shutil
import tempfile
from pathlib import Path

from huggingface_hub.utils.sha import git_hash, sha_fileobj

from elc_bert import runs

from ..data.jsonl import read_json
from ..job_configs import PretrainConfig, saved_config
from ..models.errors import InputError, InputNotFoundError, InputPermissionError
from ..models.loading import is_hub_id
from ..runs.layout import (
    REVISION_RECORD,
    REVISION_WORDS,
    read_words_seen,
    revision_name,
    words_checkpoint,
    words_checkpoints,
)

REQUIRED_FILES = ("config.json", "README.md", "model.safetensors")

logger = logging.getLogger(__name__)


def resolve_token(token: str | None = None) -> str:
    """`token`, else the one `huggingface_hub` finds; without one, InputPermissionError (the user's to fix: exit 2)
    saying how to log in."""
    from huggingface_hub import constants, get_token

    token = token or get_token()
    if not token:
        raise InputPermissionError(
            "no Hugging Face token: set HF_TOKEN, or log in with `hf auth login` (`huggingface-cli login` in older "
            f"huggingface_hub; it writes {constants.HF_TOKEN_PATH}); pushing needs a token with write access"
        )
    return token


def check_repo_id(repo_id: str) -> None:
    if not is_hub_id(repo_id, owner=True):
        raise InputError(f"--repo-id must be USER/NAME (or ORG/NAME), got {repo_id!r}")


def push(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str = "Upload model exported with elc-bert export",
) -> str:
    """Creates `repo_id` (kept when it exists) and uploads `folder` in one commit; returns the commit URL."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise InputNotFoundError(f"{folder} lacks {missing}: push a folder written by `elc-bert export`")
    check_repo_id(repo_id)
    links = runs.links_out_of(folder)
    if links:
        raise InputError(
            f"{links[0]} is a symbolic link to {links[0].resolve()}, outside {folder}: push uploads only the folder's "
            "own files"
        )
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="model", commit_message=commit_message)
    return commit.commit_url


# ------------------------------------------------------------------------------------------------------- revisions
def run_identity(run_dir: str | Path) -> str:
    """What tells a pretraining run from another: the sha256 of its first words-seen checkpoint's weights, which
    nothing later in the run changes (a resumed run keeps the folders it has, and passes no milestone twice)."""
    kept = words_checkpoints(run_dir)
    if not kept:
        raise InputNotFoundError(
            f"{run_dir} holds no words-seen checkpoint ({runs.WORDS_CHECKPOINT}1M/, ... with {runs.WORDS_SEEN}): "
            "pretrain with checkpoint_words (e.g. `checkpoint_words: strict-small`) to keep the BabyLM checkpoints"
        )
    return runs.fingerprint(next(iter(kept.values())))


def same_file(path: Path, entry) -> bool:
    """Whether the Hub's `entry` (a `huggingface_hub.RepoFile`) holds the bytes of the local file `path`: by the
    sha256 of an LFS (or Xet) file, by the git blob id of a regular one."""
    if entry.size != path.stat().st_size:
        return False
    with open(path, "rb") as file:
        if entry.lfs is not None:
            return entry.lfs.sha256 == sha_fileobj(file).hex()
        return entry.blob_id == git_hash(file.read())  # a regular file: small, read whole


def same_files(folder: Path, remote: dict) -> bool:
    """Whether `remote` ({path: RepoFile} of a branch, without .gitattributes) holds exactly the files of `folder`."""
    local = {path.relative_to(folder).as_posix(): path for path in folder.rglob("*") if path.is_file()}
    return local.keys() == remote.keys() and all(same_file(path, remote[name]) for name, path in local.items())


def _refuse_gaps(run_dir: Path, sources: dict[str, Path]) -> None:
    """InputError naming the revisions between the first and the last words-seen checkpoint in `sources` that the
    run kept (its saved `checkpoint_words`; without a saved config, every BabyLM revision) and that are gone: the
    repository's revisions would skip them, and nothing could push them later."""
    kept = [REVISION_WORDS[name] for name in sources if name != "main"]
    milestones = REVISION_WORDS.values()
    if runs.config_file(run_dir, PretrainConfig.job).is_file():
        milestones = saved_config(run_dir, PretrainConfig.job).checkpoint_words
    missing = [
        words
        for words in sorted(set(milestones))
        if min(kept) < words < max(kept) and revision_name(words) and revision_name(words) not in sources
    ]
    if missing:
        raise InputError(
            f"{run_dir}: the run passed {', '.join(map(revision_name, missing))} but holds no words-seen checkpoint "
            f"for them ({', '.join(words_checkpoint(run_dir, words).name for words in missing)} missing, or without "
            f"{runs.WORDS_SEEN}): restore those folders before pushing the run's revisions"
        )


def push_revisions(
    run_dir: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
) -> dict[str, str | None]:
    """Exports each words-seen checkpoint of the pretraining run in `run_dir` whose words the BabyLM 2025 rules name
    (`runs.layout.revision_name`; others are passed over with a warning) and its final model, and pushes each as a
    branch of `repo_id` (words-1M as chck_1M, ..., the final model as main, with the run's metrics on its card), each
    with `REVISION_RECORD`. Returns {revision: commit URL, or None where the branch already held these very files}.

    Before anything is uploaded, the run must hold every revision it passed between its first and last words-seen
    checkpoint (`_refuse_gaps`), and every revision branch of the repository (and a main holding more than a README)
    must be this run's: its record names this run (`run_identity`), or, without a record, it holds the
    model.safetensors this push would put there; else InputError naming the repository and the branch. A branch that
    already holds the files this push would put there is left as it is, so that a second push uploads nothing and a
    push that failed part way resumes where it stopped (each branch is one upload)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    from .export import export, has_model

    run_dir = Path(run_dir)
    check_repo_id(repo_id)
    if not run_dir.is_dir():
        raise InputNotFoundError(f"{run_dir} is not a folder: --revisions pushes a pretraining run")
    identity = run_identity(run_dir)
    sources = {}
    for words, folder in words_checkpoints(run_dir).items():
        name = revision_name(words)
        if name is None:
            logger.warning("%s: %s words is no BabyLM 2025 checkpoint (chck_1M, ...): not pushed", folder, f"{words:,}")
        else:
            sources[name] = folder
    if not sources:
        raise InputNotFoundError(
            f"{run_dir}: none of its words-seen checkpoints is one the BabyLM 2025 rules name (1M ... 10M, 20M ... "
            "100M, 200M ... 1000M words): pretrain with `checkpoint_words: strict-small` (or strict)"
        )
    _refuse_gaps(run_dir, sources)
    scales = {read_words_seen(folder).get("checkpoint_words_scale", 1) for folder in sources.values()}
    if scales != {1}:
        logger.warning(
            "%s kept its milestones at %s of their words (checkpoint_words_scale): a dry run, whose revisions are not "
            "a submission",
            run_dir,
            ", ".join(f"{scale:g}" for scale in sorted(scales)),
        )
    if has_model(run_dir):
        sources["main"] = run_dir
    else:
        logger.warning("%s holds no final model yet: main is not pushed (push again when the run ends)", run_dir)
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    names = {ref.name for ref in api.list_repo_refs(repo_id).branches}
    branches = [name for name in REVISION_WORDS if name in names] + ["main"] * ("main" in names)  # in words order
    pushed = {}
    with tempfile.TemporaryDirectory(prefix="elc-bert-push-") as scratch:
        scratch = Path(scratch)
        exported = {}

        def exported_folder(name: str) -> Path:
            """`sources[name]` exported with its record (once), into a folder named as the repository."""
            if name not in exported:
                out = scratch / name / repo_id.split("/")[1]
                export(sources[name], out, repo_id=repo_id)  # a words-seen folder holds no run metrics
                record = {"run": identity, "revision": name, "model_sha256": runs.fingerprint(sources[name])}
                record.update(read_words_seen(sources[name]) if name != "main" else {})
                record_text = json.dumps(record, indent=2, sort_keys=True) + "\n"
                (out / REVISION_RECORD).write_text(record_text, encoding="utf-8")
                exported[name] = out
            return exported[name]

        remote = {}
        for branch in branches:
            entries = api.list_repo_tree(repo_id, revision=branch, recursive=True)
            files = {e.path: e for e in entries if isinstance(e, RepoFile) and e.path != ".gitattributes"}
            remote[branch] = files
            # A new repository's main: empty, or a card alone where the Hub's website created the repository.
            if not files or (branch == "main" and files.keys() == {"README.md"}):
                continue
            if REVISION_RECORD in files:
                record_file = api.hf_hub_download(repo_id, REVISION_RECORD, revision=branch, cache_dir=scratch / "hf")
                run = read_json(record_file, "a revision record of elc-bert push").get("run")
                if run == identity:
                    continue
                why = f"its {REVISION_RECORD} names run {str(run)[:16]}..., this run is {identity[:16]}..."
            elif branch in sources and "model.safetensors" in files:
                if same_file(exported_folder(branch) / "model.safetensors", files["model.safetensors"]):
                    continue  # this run's model, pushed without a record (`elc-bert push` of its export)
                why = f"no {REVISION_RECORD}, and another model.safetensors than this run's"
            else:
                why = f"no {REVISION_RECORD}, and this run has no {branch}"
            raise InputError(
                f"{repo_id} holds revision {branch} of another run ({why}): push {run_dir} to another repository, "
                "or delete that branch first"
            )
        for name in sources:
            folder = exported_folder(name)
            if name in remote and same_files(folder, remote[name]):
                logger.info("%s: %s already holds these files: not pushed again", repo_id, name)
                pushed[name] = None
            else:
                if name != "main":
                    api.create_branch(repo_id, branch=name, exist_ok=True)
                where = run_dir.name if name == "main" else f"{run_dir.name}/{sources[name].name}"
                message = f"{name}: {where}, exported by elc-bert"
                commit = api.upload_folder(
                    folder_path=folder,
                    repo_id=repo_id,
                    repo_type="model",
                    revision=name,
                    commit_message=message,
                    delete_patterns="*",  # the branch holds this export alone (a branch starts as a copy of main)
                )
                pushed[name] = commit.commit_url
                logger.info("%s: pushed %s", repo_id, name)
            shutil.rmtree(folder.parent)  # one export on disk at a time
    return pushed
