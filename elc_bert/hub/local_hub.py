"""A local, in-memory stand-in for the Hugging Face Hub, for dry runs of publishing and evaluating revisions.

`elc-bert local-hub` serves on 127.0.0.1 and prints the two environment variables that point
`huggingface_hub`, `transformers` and every `elc-bert` command at it (`HF_ENDPOINT`, `HF_TOKEN`), so that the BabyLM
submission guide's `push --revisions` and `eval-babylm --all-revisions` can be tried at toy scale on one machine
before anything goes to the real Hub. What is pushed lives in the server's memory and is gone when it stops. The
package's tests run against the same server.

It speaks just enough of the Hub API that `huggingface_hub` 2.x uses to push a small folder and `transformers` uses to
read it back (stdlib only, threaded):

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
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

from huggingface_hub import RepoCard
from huggingface_hub.utils.sha import git_hash

DEFAULT_TOKEN = "hf_local_hub_token"


class HubState:
    def __init__(self, token: str):
        self.token = token
        # repo_id -> {"private", "branches": {name: {"sha", "files": {path: bytes}}}, "commits": [{"sha", "branch",
        # "summary", "files"}]}
        self.repos: dict[str, dict] = {}
        self.unhandled: list[str] = []  # requests this server does not know (for debugging a failing test)
        self.lock = threading.Lock()


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
        visible = repo is not None and (not repo["private"] or self._authorized())
        return repo if visible else None

    def _at(self, repo: dict, revision: str) -> dict | None:
        """{"sha", "files"} of a branch, or of the commit whose sha `revision` is; None when neither."""
        branch = repo["branches"].get(revision)
        return branch or next((commit for commit in repo["commits"] if commit["sha"] == revision), None)

    def _unhandled(self):
        self.state.unhandled.append(f"{self.command} {self.path}")
        self._error(404, "NotFound", f"local hub: no route for {self.command} {self.path}")

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
            if re.match(r"\A---\n(.*?)\n---\n", content, flags=re.DOTALL) is None:
                return self._json(400, {"errors": [{"message": "no YAML metadata block"}]})
            try:  # huggingface_hub's own parse of a card's metadata (a YAML mapping)
                RepoCard(content)
            except Exception as error:
                return self._json(400, {"errors": [{"message": f"YAML metadata does not parse: {error}"}]})
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
            regular = {"uploadMode": "regular", "shouldIgnore": False}
            return self._json(200, {"files": [{"path": f["path"], **regular} for f in json.loads(body)["files"]]})
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        added, deleted = {}, []
        for line in lines:
            if line["key"] == "file":
                added[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
            elif line["key"] == "deletedFile":
                deleted.append(line["value"]["path"])
            elif line["key"] != "header":
                return self._json(400, {"error": f"local hub: unsupported commit operation {line['key']}"})
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
                {"type": "file", "path": name, "size": len(data), "oid": git_hash(data)}
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
        headers = {"X-Repo-Commit": at["sha"], "ETag": f'"{git_hash(data)}"'}
        return self._send(200, data, headers, content_type="application/octet-stream")

    do_HEAD = do_GET  # the same answer; `_send` leaves out the body


def make_server(token: str, port: int = 0, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, HubState, str]:
    """A server bound to `host`:`port` (0: a free port), not yet serving; returns (server, state, endpoint URL)."""
    state = HubState(token)
    handler = type("BoundHubHandler", (HubHandler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server, state, f"http://{host}:{server.server_address[1]}"


def start_hub_server(token: str = DEFAULT_TOKEN, port: int = 0):
    """Starts a server (`make_server`) in a daemon thread; returns (server, state, endpoint URL). Stop it with
    `server.shutdown()`."""
    server, state, endpoint = make_server(token, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state, endpoint
