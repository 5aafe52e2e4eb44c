"""A minimal Hugging Face Hub compatible HTTP server for the tests (stdlib only, threaded, in memory).

Just enough of the Hub API that `huggingface_hub` 2.4 uses to push a small folder and `transformers` uses to read it
back through `HF_ENDPOINT`:

- POST /api/repos/create                                  (409 when the repo exists, as the Hub does)
- POST /api/validate-yaml                                 (the README's YAML front matter must parse to a mapping)
- POST /api/models/{repo_id}/preupload/{revision}         (every file "regular": its bytes go in the commit)
- POST /api/models/{repo_id}/commit/{revision}            (NDJSON: header + base64 "file" and "deletedFile" lines; no
                                                           LFS, no Xet)
- POST /api/models/{repo_id}/branch/{branch}              (a new branch at main's head; 409 when it exists)
- GET /api/models/{repo_id}/refs                          (the branches and their commits)
- HEAD/GET /{repo_id}/resolve/{revision}/{path}           (X-Repo-Commit, ETag, Content-Length; X-Error-Code on 404)
- GET /api/models/{repo_id}[/revision/{revision}]         (model info with siblings)
- GET /api/models/{repo_id}/tree/{revision}               (file listing)

A revision is a branch name or the sha of any commit (each commit keeps its files); a repo starts with an empty main.

Writes need `Authorization: Bearer <token>` with the server's token; a private repo is invisible without it.

Also how a test reads back what it published as someone without the package would: `run_without_package` runs a
script in a fresh process in which `elc_bert` cannot be imported, `LOAD_AND_COMPARE` is such a script.
"""

import base64
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml


class HubState:
    def __init__(self, token: str):
        self.token = token
        # repo_id -> {"private", "branches": {name: {"sha", "files": {path: bytes}}}, "commits": [{"sha", "branch",
        # "summary", "files"}]}
        self.repos: dict[str, dict] = {}
        self.unhandled: list[str] = []  # requests this server does not know (for debugging a failing test)
        self.lock = threading.Lock()


def _git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: HubState  # set on the subclass made by `start_hub_server`

    def log_message(self, format, *args):  # quiet
        pass

    # ------------------------------------------------------------------------------------------------ helpers
    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload, headers: dict | None = None):
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(self, status: int, code: str, message: str):
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.state.token}"

    def _repo(self, repo_id: str):
        """The repo when this request may see it, else None (a private repo without the token: not found)."""
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo["private"] and not self._authorized()):
            return None
        return repo

    def _at(self, repo: dict, revision: str) -> dict | None:
        """{"sha", "files"} of a branch, or of the commit whose sha `revision` is; None when neither."""
        if revision in repo["branches"]:
            return repo["branches"][revision]
        return next((commit for commit in repo["commits"] if commit["sha"] == revision), None)

    def _unhandled(self):
        self.state.unhandled.append(f"{self.command} {self.path}")
        self._error(404, "NotFound", f"test hub server: no route for {self.command} {self.path}")

    # ------------------------------------------------------------------------------------------------ routes
    def do_POST(self):
        path = unquote(urlparse(self.path).path)
        body = self._body()
        if not self._authorized():
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        if path == "/api/repos/create":
            request = json.loads(body)
            repo_id = f"{request['organization']}/{request['name']}" if request.get("organization") else request["name"]
            url = f"http://{self.headers['Host']}/{repo_id}"
            with self.state.lock:
                if repo_id in self.state.repos:
                    return self._json(409, {"error": "You already created this model repo", "url": url})
                private = request.get("visibility") == "private" or bool(request.get("private"))
                main = {"sha": "0" * 40, "files": {}}
                self.state.repos[repo_id] = {"private": private, "branches": {"main": main}, "commits": []}
            return self._json(200, {"url": url, "name": repo_id})
        if path == "/api/validate-yaml":
            content = json.loads(body)["content"]
            match = re.match(r"\A---\n(.*?)\n---\n", content, flags=re.DOTALL)
            try:
                metadata = yaml.safe_load(match.group(1)) if match else None
            except yaml.YAMLError as error:
                return self._json(400, {"errors": [{"message": f"YAML does not parse: {error}"}]})
            if not isinstance(metadata, dict):
                return self._json(400, {"errors": [{"message": "no YAML metadata block"}]})
            return self._json(200, {"errors": [], "warnings": []})
        match = re.fullmatch(r"/api/models/(.+)/(preupload|commit|branch)/([^/]+)", path)
        if match is None:
            return self._unhandled()
        repo_id, action, revision = match.groups()
        repo = self._repo(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        if action == "branch":
            with self.state.lock:
                if revision in repo["branches"]:
                    return self._error(409, "Conflict", f"Reference refs/heads/{revision} already exists")
                main = repo["branches"]["main"]
                repo["branches"][revision] = {"sha": main["sha"], "files": dict(main["files"])}
            return self._json(200, {})
        branch = repo["branches"].get(revision)
        if branch is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if action == "preupload":
            files = json.loads(body)["files"]
            return self._json(
                200,
                {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
            )
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        added, deleted = {}, []
        for line in lines:
            if line["key"] == "file":
                value = line["value"]
                added[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] == "deletedFile":
                deleted.append(line["value"]["path"])
            elif line["key"] != "header":
                return self._json(400, {"error": f"test hub server: unsupported commit operation {line['key']}"})
        with self.state.lock:
            for name in deleted:
                branch["files"].pop(name, None)
            branch["files"].update(added)
            branch["sha"] = hashlib.sha1(branch["sha"].encode() + body).hexdigest()
            summary = lines[0]["value"].get("summary")
            commit = {"sha": branch["sha"], "branch": revision, "summary": summary, "files": dict(branch["files"])}
            repo["commits"].append(commit)
        url = f"http://{self.headers['Host']}/{repo_id}/commit/{branch['sha']}"
        return self._json(200, {"commitUrl": url, "commitOid": branch["sha"], "pullRequestUrl": None})

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = unquote(urlparse(self.path).path)
        refs = re.fullmatch(r"/api/models/(.+)/refs", path)
        match = re.fullmatch(r"/api/models/(.+?)(?:/revision/([^/]+))?", path)
        tree = re.fullmatch(r"/api/models/(.+)/tree/([^/]+)(?:/.*)?", path)
        resolve = re.fullmatch(r"/(.+?/[^/]+)/resolve/([^/]+)/(.+)", path)
        repo_id = next((m.group(1) for m in (refs, tree, match, resolve) if m is not None), None)
        if repo_id is None:
            return self._unhandled()
        repo = self._repo(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        if refs is not None:
            branches = [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": branch["sha"]}
                for name, branch in repo["branches"].items()
            ]
            return self._json(200, {"branches": branches, "converts": [], "tags": []})
        revision = (tree or resolve).group(2) if (tree or resolve) else (match.group(2) or "main")
        at = self._at(repo, revision)
        if at is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if tree is not None:
            entries = [
                {"type": "file", "path": name, "size": len(data), "oid": _git_blob_sha(data)}
                for name, data in sorted(at["files"].items())
            ]
            return self._json(200, entries)
        if resolve is None:
            siblings = [{"rfilename": name} for name in sorted(at["files"])]
            return self._json(200, {"id": repo_id, "sha": at["sha"], "private": repo["private"], "siblings": siblings})
        filename = resolve.group(3)
        if filename not in at["files"]:
            headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": at["sha"]}
            return self._send(404, b'{"error": "Entry not found"}', headers)
        data = at["files"][filename]
        headers = {"X-Repo-Commit": at["sha"], "ETag": f'"{_git_blob_sha(data)}"'}
        return self._send(200, data, headers, content_type="application/octet-stream")


def start_hub_server(token: str):
    """Starts the server on 127.0.0.1 (a free port) in a daemon thread; returns (server, state, endpoint URL).
    Stop it with `server.shutdown()`."""
    state = HubState(token)
    handler = type("BoundHubHandler", (HubHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state, f"http://127.0.0.1:{server.server_address[1]}"


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
