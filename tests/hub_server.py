"""A local HTTP server speaking enough of the Hugging Face Hub's protocol for the real huggingface_hub client.

It serves fake repositories named like the real ones (branches listed by `HfApi.list_repo_refs`,
revisions resolved by `model_info`, recursive tree listings with LFS sha256, and `resolve` URLs
answering HEAD and GET with the hub's headers: X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size,
Accept-Ranges, and 206 partial content for Range requests, which the client uses to resume).

Faults are injected through `HubServer.inject(Fault(...))` or `POST /_control/faults` with the
same fields as JSON: an HTTP status burst (500, 429, ...), a connection dropped mid-file, a
truncated body, corrupted content (right length, wrong hash) and a bandwidth throttle. Every
request is logged (`HubServer.requests`, `GET /_control/log`).

Run it by hand: `PYTHONPATH=src:tests python tests/hub_server.py` prints its URL (for HF_ENDPOINT).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin")
PYTHIA_BRANCHES = (
    ["main"]
    + [f"step{s}" for s in (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    + [f"step{s}" for s in range(1000, 143001, 1000)]
)
OLMO_BRANCHES = [
    "main",
    "step1000-tokens2B",
    "step2000-tokens4B",
    "step5000-tokens10B",
    "step11000-tokens23B",
    "step25000-tokens52B",
    "step56000-tokens117B",
    "step126000-tokens264B",
    "step285000-tokens597B",
    "step644000-tokens1350B",
    "step1454000-tokens3048B",
]


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    ).encode()


def saved_files(model) -> dict[str, bytes]:
    """The files `save_pretrained` writes for a model (config.json, model.safetensors, ...)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def tiny_checkpoint(arch: str, seed: int) -> Callable[[], dict[str, bytes]]:
    """A lazily built tiny random checkpoint (tests/models_zoo.py) of one architecture."""

    def build() -> dict[str, bytes]:
        from models_zoo import tiny_model

        return saved_files(tiny_model(arch, seed))

    return build


class FakeRepo:
    """A model repository: branch name -> files, each branch built on first use. `same_commit` makes a
    branch point at another's commit (as `main` and the last step branch can), so it serves its files."""

    def __init__(
        self,
        repo_id: str,
        branches: dict[str, Callable[[], dict[str, bytes]]],
        same_commit: dict[str, str] | None = None,
    ):
        self.repo_id = repo_id
        self._builders = branches
        self._same = same_commit or {}
        self._files: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()

    @property
    def branches(self) -> list[str]:
        return list(self._builders)

    def commit(self, branch: str) -> str:
        return hashlib.sha1(f"{self.repo_id}@{self._same.get(branch, branch)}".encode()).hexdigest()

    def resolve(self, revision: str) -> str | None:
        """The branch a revision (branch name or commit) names, or None."""
        if revision in self._builders:
            return revision
        return next((b for b in self._builders if self.commit(b) == revision), None)

    def files(self, branch: str) -> dict[str, bytes]:
        branch = self._same.get(branch, branch)
        with self._lock:
            if branch not in self._files:
                self._files[branch] = self._builders[branch]()
            return self._files[branch]


def fake_repo(repo_id: str, arch: str, branches: list[str], same_as: dict[str, str] | None = None) -> FakeRepo:
    """Tiny random checkpoints on every branch; `same_as` makes a branch serve another's files."""
    seeds = {b: i for i, b in enumerate(branches)}
    same_as = same_as or {}
    return FakeRepo(repo_id, {b: tiny_checkpoint(arch, seeds[same_as.get(b, b)]) for b in branches})


@dataclass
class Fault:
    """One injected fault, hitting the next `count` matching requests (count < 0: all of them).

    kind: "status" (answer with `status`; the only kind that also hits HEAD and API requests),
    "drop" (send `after_bytes` of the body, then close the connection), "truncate" (a complete
    response whose body stops after `after_bytes`), "corrupt" (full length, bytes flipped),
    "throttle" (send each response at `bytes_per_s`, and all the responses it hits together at
    `shared_bytes_per_s` when set: one link shared by parallel streams). `target` is an fnmatch
    pattern on the URL path."""

    kind: str
    target: str = "*"
    count: int = 1
    status: int = 500
    after_bytes: int = 1024
    bytes_per_s: float = 0.0
    shared_bytes_per_s: float = 0.0
    hits: int = field(default=0)

    def matches(self, method: str, path: str) -> bool:
        if self.count >= 0 and self.hits >= self.count:
            return False
        if self.kind != "status" and method != "GET":
            return False
        return fnmatch.fnmatchcase(path, self.target)


class HubServer:
    """The server, in a background thread: `with HubServer([repo, ...]) as hub: ... hub.url`."""

    def __init__(self, repos: list[FakeRepo] = ()):
        self.repos = {r.repo_id: r for r in repos}
        self.faults: list[Fault] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._link_free_at: dict[int, float] = {}  # per throttle fault: when its shared link is next free
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: FakeRepo) -> None:
        self.repos[repo.repo_id] = repo

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def take_fault(self, method: str, path: str, kinds: tuple[str, ...]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.kind in kinds and fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def pace(self, fault: Fault, n: int) -> float:
        """Book `n` bytes on a throttle's shared link; returns the time they have been sent by."""
        now = time.monotonic()
        with self._lock:
            start = max(now, self._link_free_at.get(id(fault), now))
            self._link_free_at[id(fault)] = start + n / fault.shared_bytes_per_s
            return self._link_free_at[id(fault)]

    def log(self, **entry) -> None:
        with self._lock:
            self.requests.append(entry)

    def downloads(self, suffix: str = "") -> list[dict]:
        """Logged GET requests of repository files (resolve URLs) ending in `suffix`."""
        return [
            r for r in self.requests if r["method"] == "GET" and "/resolve/" in r["path"] and r["path"].endswith(suffix)
        ]

    def start(self) -> "HubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _handler_for(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_HubHandler):
        server_state = hub

    return Handler


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: HubServer

    def log_message(self, *args) -> None:  # keep test output clean; requests go to HubServer.requests
        pass

    # -- routing ----------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        self._route(method, urlsplit(self.path).path)

    def _log(self, status: int) -> None:
        """Log the request before its response goes out: a client never sees an unlogged answer."""
        path = unquote(urlsplit(self.path).path)
        self.server_state.log(method=self.command, path=path, range=self.headers.get("Range"), status=status)

    def _route(self, method: str, path: str) -> int:
        hub = self.server_state
        if path.startswith("/_control/"):
            return self._control(method, path)
        fault = hub.take_fault(method, unquote(path), ("status",))
        if fault is not None:
            return self._error(fault.status, "InjectedFault", f"injected HTTP {fault.status}")
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
            return self._api(method, "/".join(parts[2:4]), parts[4:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(method, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), unquote(path))
        return self._error(404, "RepoNotFound", "not found")

    # -- API --------------------------------------------------------------------------------

    def _api(self, method: str, repo_id: str, rest: list[str]) -> int:
        repo = self.server_state.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        if rest == ["refs"]:
            branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": repo.commit(b)} for b in repo.branches]
            return self._json({"branches": branches, "tags": [], "converts": [], "pullRequests": []})
        revision = rest[1] if len(rest) >= 2 else "main"
        branch = repo.resolve(revision)
        if branch is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = repo.files(branch)
        if not rest or rest[0] == "revision":
            return self._json(
                {
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": repo.commit(branch),
                    "private": False,
                    "siblings": [{"rfilename": name} for name in sorted(files)],
                }
            )
        if rest[0] == "tree":
            return self._json([_tree_entry(name, data) for name, data in sorted(files.items())])
        return self._error(404, "EntryNotFound", "unknown API route")

    # -- files ------------------------------------------------------------------------------

    def _resolve(self, method: str, repo_id: str, revision: str, filename: str, url_path: str) -> int:
        hub = self.server_state
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        branch = repo.resolve(revision)
        if branch is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        data = repo.files(branch).get(filename)
        commit = repo.commit(branch)
        if data is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist", {"X-Repo-Commit": commit})
        headers = {
            "X-Repo-Commit": commit,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if filename.endswith(LFS_SUFFIXES):
            headers |= {
                "ETag": f'"{git_blob_sha1(lfs_pointer(data))}"',
                "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                "X-Linked-Size": str(len(data)),
            }
        else:
            headers["ETag"] = f'"{git_blob_sha1(data)}"'
        start, end, status = 0, len(data), 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[len("bytes=") :].partition("-")
            start, end, status = int(first), (int(last) + 1 if last else len(data)), 206
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        body = data[start:end]
        if method == "HEAD":
            return self._send(status, b"", headers, content_length=len(body))
        fault = hub.take_fault(method, url_path, ("drop", "truncate", "corrupt", "throttle"))
        if fault is None:
            return self._send(status, body, headers)
        if fault.kind == "truncate":
            return self._send(status, body[: fault.after_bytes], headers)
        if fault.kind == "corrupt":
            middle = len(body) // 2
            return self._send(status, body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :], headers)
        if fault.kind == "drop":
            self._send(status, body[: fault.after_bytes], headers, content_length=len(body))
            self.close_connection = True
            return status
        return self._send(status, body, headers, throttle=fault)

    # -- control ----------------------------------------------------------------------------

    def _control(self, method: str, path: str) -> int:
        hub = self.server_state
        if path == "/_control/faults" and method == "POST":
            length = int(self.headers.get("Content-Length", 0))
            fault = hub.inject(Fault(**json.loads(self.rfile.read(length))))
            return self._json(asdict(fault))
        if path == "/_control/faults" and method == "DELETE":
            hub.clear_faults()
            return self._json({"cleared": True})
        if path == "/_control/log":
            return self._json(hub.requests)
        return self._error(404, "EntryNotFound", "unknown control route")

    # -- responses --------------------------------------------------------------------------

    def _json(self, payload) -> int:
        return self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str, message: str, extra: dict | None = None) -> int:
        headers = {
            "X-Error-Code": code,
            "X-Error-Message": message,
            "Content-Type": "application/json",
            **(extra or {}),
        }
        return self._send(status, json.dumps({"error": message}).encode(), headers)

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict,
        content_length: int | None = None,
        throttle: Fault | None = None,
    ) -> int:
        self._log(status)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if content_length is None else content_length))
        self.end_headers()
        if self.command == "HEAD":
            return status
        rates = [r for r in (throttle.bytes_per_s, throttle.shared_bytes_per_s) if r] if throttle else []
        chunk = max(int(min(rates) / 20), 1) if rates else len(body) or 1
        try:
            for offset in range(0, len(body), chunk):
                started = time.monotonic()
                piece = body[offset : offset + chunk]
                self.wfile.write(piece)
                done_by = started + len(piece) / throttle.bytes_per_s if rates and throttle.bytes_per_s else 0.0
                if rates and throttle.shared_bytes_per_s:
                    done_by = max(done_by, self.server_state.pace(throttle, len(piece)))
                if done_by:
                    time.sleep(max(done_by - time.monotonic(), 0.0))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return status


def _tree_entry(name: str, data: bytes) -> dict:
    if name.endswith(LFS_SUFFIXES):
        pointer = lfs_pointer(data)
        return {
            "type": "file",
            "path": name,
            "size": len(data),
            "oid": git_blob_sha1(pointer),
            "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(pointer)},
        }
    return {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)}


if __name__ == "__main__":
    server = HubServer(
        [
            fake_repo("EleutherAI/pythia-1b", "gpt_neox", PYTHIA_BRANCHES),
            fake_repo("allenai/OLMo-1B-0724-hf", "olmo", OLMO_BRANCHES),
        ]
    ).start()
    print(f"HF_ENDPOINT={server.url}", flush=True)
    threading.Event().wait()
