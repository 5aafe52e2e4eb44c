"""A minimal Hugging Face Hub compatible HTTP server for the tests (stdlib only, threaded, in memory).

Just enough of the Hub API that `huggingface_hub` 2.4 uses to push a small folder and `transformers` uses to read it
back through `HF_ENDPOINT`:

- POST /api/repos/create                                  (409 when the repo exists, as the Hub does)
- POST /api/validate-yaml                                 (the README's YAML front matter must parse to a mapping)
- POST /api/models/{repo_id}/preupload/{revision}         (every file "regular": its bytes go in the commit)
- POST /api/models/{repo_id}/commit/{revision}            (NDJSON: header + base64 "file" lines; no LFS, no Xet)
- HEAD/GET /{repo_id}/resolve/{revision}/{path}           (X-Repo-Commit, ETag, Content-Length; X-Error-Code on 404)
- GET /api/models/{repo_id}[/revision/{revision}]         (model info with siblings)
- GET /api/models/{repo_id}/tree/{revision}               (file listing)

Writes need `Authorization: Bearer <token>` with the server's token; a private repo is invisible without it.

Also how a test reads back what it published as someone without the package would: `run_without_package` runs a
script in a fresh process in which `elc_bert` cannot be imported, `LOAD_AND_COMPARE` is such a script.
"""

import base64
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
        self.repos: dict[str, dict] = {}  # repo_id -> {"private", "sha", "files": {path: bytes}, "commits": [...]}
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
                self.state.repos[repo_id] = {"private": private, "sha": "0" * 40, "files": {}, "commits": []}
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
        match = re.fullmatch(r"/api/models/(.+)/(preupload|commit)/([^/]+)", path)
        if match is None:
            return self._unhandled()
        repo_id, action, _revision = match.groups()
        repo = self._repo(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        if action == "preupload":
            files = json.loads(body)["files"]
            return self._json(
                200,
                {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
            )
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        added = {}
        for line in lines:
            if line["key"] == "file":
                value = line["value"]
                added[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] != "header":
                return self._json(400, {"error": f"test hub server: unsupported commit operation {line['key']}"})
        with self.state.lock:
            repo["files"].update(added)
            repo["sha"] = hashlib.sha1(repo["sha"].encode() + body).hexdigest()
            repo["commits"].append({"sha": repo["sha"], "summary": lines[0]["value"].get("summary")})
        url = f"http://{self.headers['Host']}/{repo_id}/commit/{repo['sha']}"
        return self._json(200, {"commitUrl": url, "commitOid": repo["sha"], "pullRequestUrl": None})

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = unquote(urlparse(self.path).path)
        match = re.fullmatch(r"/api/models/(.+?)(?:/revision/([^/]+))?", path)
        tree = re.fullmatch(r"/api/models/(.+)/tree/([^/]+)(?:/.*)?", path)
        resolve = re.fullmatch(r"/(.+?/[^/]+)/resolve/([^/]+)/(.+)", path)
        if tree is not None:
            repo = self._repo(tree.group(1))
            if repo is None:
                return self._error(404, "RepoNotFound", f"Repository {tree.group(1)} not found")
            entries = [
                {"type": "file", "path": name, "size": len(data), "oid": _git_blob_sha(data)}
                for name, data in sorted(repo["files"].items())
            ]
            return self._json(200, entries)
        if match is not None and "/tree/" not in path:
            repo_id = match.group(1)
            repo = self._repo(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            siblings = [{"rfilename": name} for name in sorted(repo["files"])]
            return self._json(
                200, {"id": repo_id, "sha": repo["sha"], "private": repo["private"], "siblings": siblings}
            )
        if resolve is not None:
            repo_id, _revision, filename = resolve.groups()
            repo = self._repo(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            if filename not in repo["files"]:
                headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo["sha"]}
                return self._send(404, b'{"error": "Entry not found"}', headers)
            data = repo["files"][filename]
            headers = {"X-Repo-Commit": repo["sha"], "ETag": f'"{_git_blob_sha(data)}"'}
            return self._send(200, data, headers, content_type="application/octet-stream")
        return self._unhandled()


def start_hub_server(token: str):
    """Starts the server on 127.0.0.1 (a free port) in a daemon thread; returns (server, state, endpoint URL).
    Stop it with `server.shutdown()`."""
    state = HubState(token)
    handler = type("BoundHubHandler", (HubHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state, f"http://127.0.0.1:{server.server_address[1]}"


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
