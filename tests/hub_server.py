"""The tests' Hub: `elc_bert.hub.local_hub` (the package's local, in-memory stand-in for the Hugging Face Hub) started
in this process, with huggingface_hub and transformers pointed at it.

Also how a test reads back what it published as someone without the package would: `run_without_package` runs a
script in a fresh process in which `elc_bert` cannot be imported, `LOAD_AND_COMPARE` is such a script.
"""

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from elc_bert.hub.local_hub import HubState, start_hub_server  # noqa: F401  (start_hub_server: for conftest)


@contextlib.contextmanager
def local_hub(patch, cache_dir: Path, token: str = "hf_test_token"):
    """A server (`start_hub_server`) for the block, with this process's huggingface_hub and transformers pointed at
    it (`point_hub_client_at`; `patch`: a pytest MonkeyPatch) and downloading into `cache_dir`; yields its state."""
    import huggingface_hub.constants

    server, state, endpoint = start_hub_server(token)
    try:
        point_hub_client_at(patch, endpoint, token)
        patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache_dir))
        yield state
    finally:
        server.shutdown()


def put_branch(state: HubState, repo_id: str, branch: str, files: dict[str, bytes]) -> str:
    """Makes `branch` of the (public) repo `repo_id` hold `files` in one commit, as if pushed; returns its sha."""
    with state.lock:
        repo = state.repos.setdefault(repo_id, {"private": False, "branches": {}, "commits": []})
        sha = hashlib.sha1(f"{repo_id}@{branch}:{len(repo['commits'])}".encode()).hexdigest()
        repo["branches"][branch] = {"sha": sha, "files": dict(files)}
        repo["commits"].append({"sha": sha, "branch": branch, "summary": "put_branch", "files": dict(files)})
    return sha


# Run in a child process before anything else: `import elc_bert` (and any submodule) raises ImportError from there on.
BLOCK_PACKAGE = """
import sys
sys.modules["elc_bert"] = None
try:
    import elc_bert  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("elc_bert is importable in the child process")
"""


def point_hub_client_at(patch, endpoint: str, token: str) -> None:
    """Makes this process's `huggingface_hub` talk to `endpoint` with `token` (`patch`: a pytest MonkeyPatch)."""
    import huggingface_hub.constants

    # huggingface_hub read HF_ENDPOINT into its constants when it was imported ...
    patch.setenv("HF_ENDPOINT", endpoint)
    patch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    # ... and the download URL template built from it (`push_to_hub` reads the repo's model card back).
    template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    patch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    patch.setenv("HF_TOKEN", token)
    # ... and so did the shared clients made before (huggingface_hub's behind `create_repo`, `upload_folder`, ...;
    # transformers' behind `push_to_hub`), perhaps under another test's server, gone since.
    import huggingface_hub.hf_api
    import transformers.utils.hub

    patch.setattr(huggingface_hub.hf_api.api, "endpoint", endpoint)
    patch.setattr(transformers.utils.hub, "_hf_api", None, raising=False)  # made again, at `endpoint`, when next used


def run_without_package(script: str, env: dict, cwd: Path, timeout=240) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh Python process in which `elc_bert` cannot be imported (`BLOCK_PACKAGE`), with this
    environment less its HF_ variables, plus `env`; asserts that it succeeds."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + textwrap.dedent(script)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


# Run after `SOURCES = {name: folder or repo id}` and `EXPECTED = path of the expected outputs`: loads every source
# with `trust_remote_code` and prints "REPORT" and, per source, the module of its class and its largest difference.
LOAD_AND_COMPARE = """
import json, sys
import torch
import transformers

expected = torch.load(EXPECTED)
ids, mask = expected["input_ids"], expected["attention_mask"]
report = {}
for name, source in SOURCES.items():
    auto_class, want = expected[name.split(":", 1)[-1]]
    model = getattr(transformers, auto_class).from_pretrained(source, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    assert tokenizer.mask_token_id == 4 and tokenizer.pad_token_id == 3, name
    with torch.no_grad():
        if auto_class == "AutoModelForMultipleChoice":
            got = model(ids[None], attention_mask=mask[None]).logits
        else:
            out = model(ids, attention_mask=mask)
            got = out.start_logits if hasattr(out, "start_logits") else getattr(out, "logits", None)
            got = out.last_hidden_state if got is None else got
            got = got[mask.bool()] if got.dim() == 3 else got
    report[name] = {"module": type(model).__module__, "max_abs_diff": (got - want).abs().max().item(),
                    "shape_ok": got.shape == want.shape}
assert not [m for m in sys.modules if m == "elc_bert" or m.startswith("elc_bert.") if sys.modules[m] is not None]
print("REPORT" + json.dumps(report))
"""


def load_report(result) -> dict:
    """What `LOAD_AND_COMPARE` printed, from the finished process `result`."""
    return json.loads(result.stdout.split("REPORT", 1)[1])
