"""The client: one HTTP connection per call, over TCP or a unix socket."""

import http.client
import json
import os
import socket
import urllib.parse
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Union

from .errors import SandboxdError, from_answer

Observation = Dict[str, Any]
Event = Dict[str, Any]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("sandboxd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """A client of one daemon.

    ``url`` is ``http://HOST:PORT``, ``https://HOST:PORT`` or
    ``unix:///PATH``; default ``$SANDBOXD_ADDR``. Over TCP the daemon wants
    ``token`` (default ``$SANDBOXD_TOKEN``); on the unix socket it needs
    none. ``timeout`` bounds each socket operation, not an action (which
    the daemon bounds with the action's own timeout).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 600.0) -> None:
        url = url or os.environ.get("SANDBOXD_ADDR") or "http://127.0.0.1:7070"
        self.token = token if token is not None else os.environ.get("SANDBOXD_TOKEN")
        self.timeout = timeout
        u = urllib.parse.urlsplit(url)
        if u.scheme == "unix":
            self._unix: Optional[str] = u.path
        elif u.scheme in ("http", "https", "tcp"):
            self._unix = None
        else:
            raise ValueError("sandboxd address %r: want http://HOST:PORT, https://HOST:PORT or unix:///PATH" % url)
        self._scheme = "https" if u.scheme == "https" else "http"
        self._netloc = u.netloc
        self.url = url

    # -- plumbing --------------------------------------------------------

    def _conn(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, self.timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._netloc, timeout=self.timeout)
        return http.client.HTTPConnection(self._netloc, timeout=self.timeout)

    def _request(
        self,
        method: str,
        path: str,
        body: Union[None, bytes, IO[bytes]] = None,
        content_type: Optional[str] = None,
        accept: Optional[str] = None,
        length: Optional[int] = None,
    ) -> http.client.HTTPResponse:
        conn = self._conn()
        headers = {}
        if self.token and self._unix is None:
            headers["Authorization"] = "Bearer " + self.token
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        if length is not None:
            headers["Content-Length"] = str(length)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            raise Unreachable("sandboxd at %s does not answer: %s" % (self.url, e)) from e
        if resp.status >= 300:
            raw = resp.read()
            conn.close()
            code, message = None, raw.decode("utf-8", "replace").strip() or resp.reason
            try:
                err = json.loads(raw)["error"]
                code, message = err.get("code"), err.get("message", message)
            except (ValueError, KeyError, TypeError):
                pass
            raise from_answer(resp.status, code, message)
        # The connection closes with the response.
        resp._sandboxd_conn = conn  # type: ignore[attr-defined]
        return resp

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        resp = self._request(method, path, data, "application/json" if data is not None else None)
        try:
            raw = resp.read()
        finally:
            resp.close()
        return json.loads(raw) if raw else None

    # -- service ---------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """GET /v1/health."""
        return self._json("GET", "/v1/health")

    def info(self) -> Dict[str, Any]:
        """GET /v1/info: version and backends."""
        return self._json("GET", "/v1/info")

    # -- sandboxes -------------------------------------------------------

    def create_sandbox(
        self,
        backend: Optional[str] = None,
        *,
        image: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        limits: Optional[Dict[str, Any]] = None,
        network: Optional[str] = None,
        idle_timeout_s: Optional[float] = None,
        labels: Optional[Dict[str, str]] = None,
    ) -> "Sandbox":
        """Create a sandbox (the process backend unless ``backend``)."""
        body = {
            k: v
            for k, v in (
                ("backend", backend),
                ("image", image),
                ("env", env),
                ("workdir", workdir),
                ("limits", limits),
                ("network", network),
                ("idle_timeout_s", idle_timeout_s),
                ("labels", labels),
            )
            if v is not None
        }
        return Sandbox(self, self._json("POST", "/v1/sandboxes", body))

    def sandbox(self, sandbox_id: str) -> "Sandbox":
        """The sandbox ``sandbox_id`` (raises NotFound)."""
        return Sandbox(self, self._json("GET", "/v1/sandboxes/" + _q(sandbox_id)))

    def list_sandboxes(self) -> List["Sandbox"]:
        return [Sandbox(self, s) for s in self._json("GET", "/v1/sandboxes")["sandboxes"]]

    def delete_sandbox(self, sandbox_id: str) -> None:
        self._json("DELETE", "/v1/sandboxes/" + _q(sandbox_id))

    # -- actions ---------------------------------------------------------

    def act(self, sandbox_id: str, action: Dict[str, Any]) -> Observation:
        """Run one action (a dict of the API's Action) and return its
        observation. A command that failed is an observation, not an
        exception."""
        return self._json("POST", "/v1/sandboxes/" + _q(sandbox_id) + "/actions", action)

    def act_stream(self, sandbox_id: str, action: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        """Run one action, yielding ``{"type": "output", "stream", "data"}``
        lines as output arrives, then ``{"type": "observation",
        "observation": {...}}``."""
        resp = self._request(
            "POST",
            "/v1/sandboxes/" + _q(sandbox_id) + "/actions",
            json.dumps(action).encode(),
            "application/json",
            accept="application/x-ndjson",
        )
        return _lines(resp)

    def events(self, sandbox_id: str, after: int = 0, follow: bool = False) -> Iterator[Event]:
        """The sandbox's event log after seq ``after``; with ``follow`` it
        keeps waiting for new events until the sandbox is deleted or the
        daemon stops."""
        path = "/v1/sandboxes/%s/events?after=%d" % (_q(sandbox_id), after)
        if follow:
            path += "&follow=1"
        return _lines(self._request("GET", path))

    def output(self, sandbox_id: str, seq: int, stream: str = "") -> bytes:
        """The whole recorded output of the action at ``seq``."""
        path = "/v1/sandboxes/%s/events/%d/output" % (_q(sandbox_id), seq)
        if stream:
            path += "?stream=" + _q(stream)
        resp = self._request("GET", path)
        try:
            return resp.read()
        finally:
            resp.close()

    # -- files -----------------------------------------------------------

    def upload(self, sandbox_id: str, path: str, data: Union[bytes, IO[bytes]], *, tar: bool = False, length: Optional[int] = None) -> Dict[str, Any]:
        """Write ``data`` (bytes or a binary file) to ``path``; with ``tar``
        extract the tar archive into directory ``path``."""
        if isinstance(data, (bytes, bytearray)):
            length = len(data)
        elif length is None:
            try:
                length = os.fstat(data.fileno()).st_size - data.tell()
            except (AttributeError, OSError, ValueError):
                data = data.read()
                length = len(data)
        resp = self._request(
            "PUT",
            "/v1/sandboxes/%s/files?path=%s" % (_q(sandbox_id), _q(path)),
            data,
            "application/x-tar" if tar else "application/octet-stream",
            length=length,
        )
        try:
            return json.loads(resp.read())
        finally:
            resp.close()

    def download(self, sandbox_id: str, path: str, into: Optional[IO[bytes]] = None) -> bytes:
        """A file's bytes, or a directory as a tar archive. With ``into``
        the bytes are streamed there and b"" is returned."""
        resp = self._request("GET", "/v1/sandboxes/%s/files?path=%s" % (_q(sandbox_id), _q(path)))
        try:
            if into is None:
                return resp.read()
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    return b""
                into.write(chunk)
        finally:
            resp.close()


class Unreachable(SandboxdError):
    """The daemon did not answer at all."""

    code = "unavailable"


class Sandbox:
    """One sandbox: ``id``, ``info`` (the API's Sandbox object) and its
    actions."""

    def __init__(self, client: Client, info: Dict[str, Any]) -> None:
        self.client = client
        self.info = info
        self.id: str = info["id"]

    def __repr__(self) -> str:
        return "Sandbox(%r, backend=%r)" % (self.id, self.info.get("backend"))

    def act(self, action: Dict[str, Any]) -> Observation:
        return self.client.act(self.id, action)

    def delete(self) -> None:
        self.client.delete_sandbox(self.id)

    def run(
        self,
        command: str,
        *,
        session: Optional[str] = None,
        timeout: Optional[float] = None,
        hard_timeout: Optional[float] = None,
        input: bool = False,
        id: Optional[str] = None,
    ) -> Observation:
        """A command in a stateful bash session (``default`` unless
        ``session``)."""
        return self.act(_run(command, session, timeout, hard_timeout, input, id))

    def run_stream(
        self,
        command: str,
        *,
        session: Optional[str] = None,
        timeout: Optional[float] = None,
        hard_timeout: Optional[float] = None,
    ) -> Iterator[Dict[str, Any]]:
        """Like run, yielding output lines as they arrive, then the
        observation line."""
        return self.client.act_stream(self.id, _run(command, session, timeout, hard_timeout, False, None))

    def interrupt(self, session: Optional[str] = None) -> Observation:
        a: Dict[str, Any] = {"kind": "interrupt"}
        if session:
            a["session"] = session
        return self.act(a)

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        stdin: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Observation:
        """One process, no shell: argv as given."""
        a: Dict[str, Any] = {"kind": "exec", "argv": list(argv)}
        if cwd:
            a["cwd"] = cwd
        if env:
            a["env"] = env
        if stdin is not None:
            a["stdin"] = stdin
        if timeout is not None:
            a["timeout_s"] = timeout
        return self.act(a)

    def ipython(self, code: str, *, timeout: Optional[float] = None) -> Observation:
        """A cell in the sandbox's IPython kernel."""
        a: Dict[str, Any] = {"kind": "ipython", "code": code}
        if timeout is not None:
            a["timeout_s"] = timeout
        return self.act(a)

    def read_file(self, path: str, start_line: Optional[int] = None, end_line: Optional[int] = None) -> Observation:
        a: Dict[str, Any] = {"kind": "file.read", "path": path}
        if start_line is not None:
            a["start_line"] = start_line
        if end_line is not None:
            a["end_line"] = end_line
        return self.act(a)

    def write_file(self, path: str, content: str, mode: Optional[str] = None) -> Observation:
        a: Dict[str, Any] = {"kind": "file.write", "path": path, "content": content}
        if mode:
            a["mode"] = mode
        return self.act(a)

    def edit(self, command: str, path: str, **fields: Any) -> Observation:
        """The str_replace_editor: ``command`` is view, create, str_replace,
        insert or undo_edit; ``fields`` are file_text, old_str, new_str,
        insert_line, view_range."""
        return self.act(dict(kind="file.edit", command=command, path=path, **fields))

    def browser(self, op: str, **fields: Any) -> Observation:
        """A browser op (goto, click, fill, press, scroll, back, forward,
        select, snapshot, screenshot, evaluate); ``fields`` are url, target,
        text, key, script, screenshot, timeout_s."""
        return self.act(dict(kind="browser", op=op, **fields))

    def browse(self, url: str) -> Observation:
        return self.browser("goto", url=url)

    def upload(self, path: str, data: Union[bytes, IO[bytes]], *, tar: bool = False) -> Dict[str, Any]:
        return self.client.upload(self.id, path, data, tar=tar)

    def download(self, path: str, into: Optional[IO[bytes]] = None) -> bytes:
        return self.client.download(self.id, path, into)

    def events(self, after: int = 0, follow: bool = False) -> Iterator[Event]:
        return self.client.events(self.id, after, follow)


def _run(command: str, session: Optional[str], timeout: Optional[float], hard_timeout: Optional[float], input: bool, id: Optional[str]) -> Dict[str, Any]:
    a: Dict[str, Any] = {"kind": "run", "command": command}
    if session:
        a["session"] = session
    if timeout is not None:
        a["timeout_s"] = timeout
    if hard_timeout is not None:
        a["hard_timeout_s"] = hard_timeout
    if input:
        a["input"] = True
    if id:
        a["id"] = id
    return a


def _lines(resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    try:
        while True:
            line = resp.readline()
            if not line:
                return
            line = line.strip()
            if line:
                obj = json.loads(line)
                if isinstance(obj, dict) and obj.get("type") == "error" and "error" in obj:
                    err = obj["error"]
                    raise from_answer(0, err.get("code"), err.get("message", ""))
                yield obj
    finally:
        resp.close()


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")
