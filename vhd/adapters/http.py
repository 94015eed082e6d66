"""Serve one environment over HTTP to many concurrent episodes (sessions), standard library only.

    POST /reset  {"session_id"?: str, "seed"?: int} → {"session_id", "observation", "info"}
    POST /step   {"session_id"?: str, "action": A}  → {"session_id", "observation", "reward",
                                                       "terminated", "truncated", "info"}
    POST /finish {"session_id"?: str}               → {"session_id", "reward", "info"}
    GET  /state?session_id=ID                       → {"session_id", "env_id", "steps", "turn_budget",
                                                       "trajectory", "finished", "result"}

A is the same action TextToolEnv.step takes (a JSON text or an object {"tool", "arguments"}).
Each session is one TextToolEnv with its own episode; `/reset` without a session id opens a new
one and returns its id; requests without one use the session "default". Every request gets
an answer (JSON, `{"error": ...}` with a 4xx/5xx status on failure), whatever thread serves it.
The server binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from vhd.adapters.gym import TextToolEnv, load_module

MAX_BODY = 1 << 20
MAX_SESSIONS = 4096
DEFAULT_SESSION = "default"
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Sessions:
    """The open episodes of one environment, by session id; at most MAX_SESSIONS (the oldest
    finished ones are dropped first)."""

    def __init__(self, row: dict[str, Any], module: Any):
        self.row, self._module = row, module
        self._envs: OrderedDict[str, TextToolEnv] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, session_id: str | None) -> tuple[str, TextToolEnv]:
        session_id = session_id or uuid.uuid4().hex
        with self._lock:
            env = self._envs.get(session_id)
            if env is None:
                if len(self._envs) >= MAX_SESSIONS:
                    self._drop_one()
                env = self._envs[session_id] = TextToolEnv(self.row, self._module)
            self._envs.move_to_end(session_id)
        return session_id, env

    def _drop_one(self) -> None:
        done = next((key for key, env in self._envs.items() if env.finished), None)
        if done is None:
            raise HttpError(503, f"{MAX_SESSIONS} sessions are open and none has finished; finish one first")
        del self._envs[done]

    def get(self, session_id: str) -> TextToolEnv:
        with self._lock:
            env = self._envs.get(session_id)
        if env is None:
            raise HttpError(404, f"no session {session_id!r}; expected the session_id that POST /reset returned")
        return env


def _session_id(body: dict[str, Any], default: str | None) -> str | None:
    value = body.get("session_id", default)
    if value is None:
        return None
    if not isinstance(value, str) or not _SESSION_ID.match(value):
        raise HttpError(400, "session_id must be 1 to 64 letters, digits, '_' or '-'")
    return value


def make_server(source: dict[str, Any] | TextToolEnv, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for the environment of an export row (or of a TextToolEnv)."""
    if isinstance(source, TextToolEnv):
        sessions = Sessions(source.row, source._module)
    else:
        sessions = Sessions(source, load_module(source["module"]))
    env_id = sessions.row["env_id"]

    def reset(body: dict[str, Any]) -> dict[str, Any]:
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise HttpError(400, "seed must be a non-negative integer")
        session_id, env = sessions.open(_session_id(body, None))
        observation, info = env.reset(seed=seed)
        return {"session_id": session_id, "observation": observation, "info": info}

    def step(body: dict[str, Any]) -> dict[str, Any]:
        if "action" not in body:
            raise HttpError(400, 'expected {"session_id": ID, "action": {"tool": NAME, "arguments": {...}}}')
        session_id = _session_id(body, DEFAULT_SESSION)
        env = sessions.get(session_id)
        try:
            observation, r, terminated, truncated, info = env.step(body["action"])
        except RuntimeError as exc:
            raise HttpError(409, str(exc)) from None
        return {"session_id": session_id, "observation": observation, "reward": r, "terminated": terminated,
                "truncated": truncated, "info": info}

    def finish(body: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(body, DEFAULT_SESSION)
        try:
            r, info = sessions.get(session_id).finish()
        except RuntimeError as exc:
            raise HttpError(409, str(exc)) from None
        return {"session_id": session_id, "reward": r, "info": info}

    def state(session_id: str) -> dict[str, Any]:
        env = sessions.get(session_id)
        return {"session_id": session_id, "env_id": env_id, "steps": env.steps, "turn_budget": env.turn_budget,
                "trajectory": env.trajectory, "finished": env.finished, "result": env.result}

    routes = {"/reset": reset, "/step": step, "/finish": finish}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes; without this each step waits ~40 ms for a delayed ACK

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise HttpError(400, "Content-Length is not a number") from None
            if length < 0 or length > MAX_BODY:
                self.close_connection = True
                raise HttpError(413, f"request body of {length} bytes; expected at most {MAX_BODY}")
            raw = self.rfile.read(length) if length else b""
            if not raw.strip():
                return {}
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise HttpError(400, "request body is not JSON (or nested too deeply); expected an object") from None
            if not isinstance(body, dict):
                raise HttpError(400, "request body must be a JSON object")
            return body

        def _answer(self, work) -> None:
            try:
                self._send(200, work())
            except HttpError as exc:
                self._send(exc.status, {"error": str(exc)})
            except Exception as exc:  # a bug must still answer, never drop the connection
                self._send(500, {"error": f"internal error: {type(exc).__name__}: {str(exc)[:200]}"})

        def do_GET(self) -> None:
            url = urlparse(self.path)

            def work() -> dict[str, Any]:
                if url.path != "/state":
                    raise HttpError(404, f"no route GET {url.path}; expected GET /state")
                query = {key: values[-1] for key, values in parse_qs(url.query).items()}
                return state(_session_id(query, DEFAULT_SESSION))

            self._answer(work)

        def do_POST(self) -> None:
            route = routes.get(urlparse(self.path).path)

            def work() -> dict[str, Any]:
                body = self._body()  # read the body even for a bad route, so the connection stays in step
                if route is None:
                    raise HttpError(404, f"no route POST {self.path}; expected POST /reset, /step or /finish")
                return route(body)

            self._answer(work)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


class _Server(ThreadingHTTPServer):
    """socketserver's listen backlog is 5: fifty sessions connecting at once on a busy machine
    overflow it and some connections are reset before they are accepted."""

    request_queue_size = 128


class HttpEnvClient:
    """A small client with the same reset/step/finish as TextToolEnv (standard library only);
    each client is one session."""

    def __init__(self, base_url: str, session_id: str | None = None):
        url = urlparse(base_url)
        self._host, self._port = url.hostname, url.port
        self._conn = None
        self.session_id = session_id

    def _connection(self):
        import http.client

        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        return self._conn

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                payload = json.loads(response.read())
                break
            except (ConnectionError, OSError) as exc:
                conn.close()
                self._conn = None
                if attempt == 2:
                    raise RuntimeError(f"no answer from {self._host}:{self._port}: {exc}") from None
        if response.status != 200:
            raise RuntimeError(payload.get("error", f"HTTP {response.status}"))
        return payload

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"seed": seed}
        if self.session_id:
            body["session_id"] = self.session_id
        out = self._call("POST", "/reset", body)
        self.session_id = out["session_id"]
        return out["observation"], out["info"]

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        out = self._call("POST", "/step", {"session_id": self.session_id, "action": action})
        return out["observation"], out["reward"], out["terminated"], out["truncated"], out["info"]

    def finish(self) -> tuple[float, dict[str, Any]]:
        out = self._call("POST", "/finish", {"session_id": self.session_id})
        return out["reward"], out["info"]

    def state(self) -> dict[str, Any]:
        return self._call("GET", f"/state?session_id={self.session_id or DEFAULT_SESSION}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
