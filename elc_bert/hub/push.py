"""`elc-bert push OUT_DIR --repo-id USER/NAME [--private]`: an exported folder to the Hugging Face Hub.

The token comes from the usual places (`HF_TOKEN`, then the token file written by `hf auth login`); the Hub from
`HF_ENDPOINT` (default https://huggingface.co). Files go up with `huggingface_hub`'s `upload_folder`.
"""

from pathlib import Path

from elc_bert import runs

from ..models.errors import InputError, InputNotFoundError

REQUIRED_FILES = ("config.json", "README.md", "model.safetensors")


def resolve_token(token: str | None = None) -> str:
    """`token`, else the one `huggingface_hub` finds; a clear error when there is none."""
    from huggingface_hub import constants, get_token

    token = token or get_token()
    if not token:
        raise PermissionError(
            "no Hugging Face token: set HF_TOKEN, or log in with `hf auth login` "
            f"(which writes {constants.HF_TOKEN_PATH}); pushing needs a token with write access"
        )
    return token


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
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise InputError(f"--repo-id must be USER/NAME (or ORG/NAME), got {repo_id!r}")
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
