"""A real HTTP server on 127.0.0.1 for download tests: a free port, served from a thread."""

from __future__ import annotations

import http.server
import socket
import threading


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now (for a server or a process group to bind next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalHTTPServer:
    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FileServer(LocalHTTPServer):
    """Serves `files` (path without the leading '/' -> bytes), 404 for anything else; `requests` lists
    the paths asked for."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(self.path)
                body = files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)


class LocalHub(LocalHTTPServer):
    """A stand-in for the Hugging Face Hub API, only the endpoints huggingface_hub's client calls to
    create a repository and a branch, commit files (every file "regular": its bytes base64 in the
    NDJSON commit) and download them (revision info, tree, HEAD/GET resolve). Every commit is kept:
    `commits[sha]` is the repository's files at that commit, `refs[(repo, branch)]` a branch's head,
    so a revision pinned to an old commit still gets its old files. `requests` lists "METHOD path"."""

    def __init__(self) -> None:
        import base64
        import hashlib
        import json
        from urllib.parse import unquote, urlsplit

        self.requests: list[str] = []
        self.repos: set[str] = set()
        self.refs: dict[tuple[str, str], str] = {}
        self.commits: dict[str, dict[str, bytes]] = {}
        outer = self

        def git_sha(data: bytes) -> str:
            return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def send(
                self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False
            ) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def json(self, status: int, obj: object, headers: dict[str, str] | None = None) -> None:
                self.send(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

            def error(self, status: int, code: str, message: str) -> None:
                self.json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

            def body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def commit_of(self, repo: str, revision: str) -> str | None:
                if repo not in outer.repos:
                    self.error(404, "RepoNotFound", f"Repository not found: {repo}")
                    return None
                sha = outer.refs.get((repo, revision)) or (revision if revision in outer.commits else None)
                if sha is None:
                    self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return sha

            def route(self, method: str) -> None:
                outer.requests.append(f"{method} {self.path}")
                parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
                base = f"http://{self.headers['Host']}"
                if method == "POST" and parts == ["api", "repos", "create"]:
                    req = json.loads(self.body())
                    repo = f"{req['organization']}/{req['name']}"
                    if repo in outer.repos:  # the Hub's 409 names the repository too
                        message = "You already created this model repo"
                        headers = {"X-Error-Code": "RepoExists", "X-Error-Message": message}
                        self.json(409, {"error": message, "url": f"{base}/{repo}"}, headers)
                        return
                    outer.repos.add(repo)
                    empty = hashlib.sha1(repo.encode()).hexdigest()
                    outer.commits[empty] = {}
                    outer.refs[(repo, "main")] = empty
                    self.json(200, {"url": f"{base}/{repo}"})
                elif method == "POST" and parts == ["api", "validate-yaml"]:
                    self.body()
                    self.json(200, {"errors": [], "warnings": []})
                elif parts[:2] == ["api", "models"] and len(parts) >= 6:
                    repo, action, revision = f"{parts[2]}/{parts[3]}", parts[4], "/".join(parts[5:])
                    self.api(method, repo, action, revision, base)
                elif method in ("GET", "HEAD") and len(parts) >= 5 and parts[2] == "resolve":
                    repo, revision, name = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
                    sha = self.commit_of(repo, revision)
                    if sha is None:
                        return
                    data = outer.commits[sha].get(name)
                    if data is None:
                        self.send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha})
                        return
                    headers = {"X-Repo-Commit": sha, "ETag": f'"{git_sha(data)}"'}
                    self.send(200, data, headers, head=method == "HEAD")
                else:
                    self.error(404, "NotFound", f"the stand-in has no {method} {self.path}")

            def api(self, method: str, repo: str, action: str, revision: str, base: str) -> None:
                if method == "POST" and action == "preupload":
                    files = json.loads(self.body())["files"]
                    modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                    self.json(200, {"files": modes})
                elif method == "POST" and action == "branch":
                    self.body()
                    if (repo, revision) in outer.refs:
                        self.error(409, "BranchExists", f"branch {revision} exists")
                    elif (sha := self.commit_of(repo, "main")) is not None:
                        outer.refs[(repo, revision)] = sha
                        self.json(200, {})
                elif method == "POST" and action == "commit":
                    lines = [json.loads(line) for line in self.body().splitlines() if line.strip()]
                    parent = self.commit_of(repo, revision)
                    if parent is None:
                        return
                    files = dict(outer.commits[parent])
                    for item in lines:
                        if item["key"] == "file":
                            files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                        elif item["key"] != "header":
                            self.error(400, "BadRequest", f"the stand-in takes regular files only, not {item['key']}")
                            return
                    sha = hashlib.sha1(json.dumps([parent, sorted((k, git_sha(v)) for k, v in files.items())]).encode())
                    oid = sha.hexdigest()
                    outer.commits[oid] = files
                    outer.refs[(repo, revision)] = oid
                    self.json(
                        200, {"commitUrl": f"{base}/{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}
                    )
                elif method == "GET" and action == "revision":
                    if (sha := self.commit_of(repo, revision)) is not None:
                        siblings = [{"rfilename": name} for name in sorted(outer.commits[sha])]
                        self.json(200, {"id": repo, "sha": sha, "private": False, "siblings": siblings})
                elif method == "GET" and action == "tree":
                    if (sha := self.commit_of(repo, revision)) is not None:
                        tree = [
                            {"type": "file", "path": name, "size": len(data), "oid": git_sha(data)}
                            for name, data in sorted(outer.commits[sha].items())
                        ]
                        self.json(200, tree)
                else:
                    self.error(404, "NotFound", f"the stand-in has no {method} {self.path}")

            def do_GET(self) -> None:  # noqa: N802
                self.route("GET")

            def do_HEAD(self) -> None:  # noqa: N802
                self.route("HEAD")

            def do_POST(self) -> None:  # noqa: N802
                self.route("POST")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)
