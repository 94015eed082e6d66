"""Serve one environment over HTTP to many concurrent episodes (sessions), standard library only.

    POST /reset  {"session_id"?: str, "seed"?: int} → {"session_id", "observation", "info"}
    POST /step   {"session_id"?: str, "action": A}  → {"session_id", "observation", "reward",
                                                       "terminated", "truncated", "info"}
    POST /finish {"session_id"?: str}               → {"session_id", "reward", "info"}
    GET  /state?session_id=ID                       → {"session_id", "env_id", "steps", "turn_budget",
                                                       "trajectory", "finished", "result"}
    GET  /health                                    → {"env_id", "sessions", "max_sessions",
                                                       "idle_timeout", "read_timeout"}

A is the same action TextToolEnv.step takes (a JSON text or an object {"tool", "arguments"}).
Each session is one TextToolEnv with its own episode; `/reset` without a session id opens a new
one and returns its id; requests without one use the session "default". A session unused for
`idle_timeout` seconds expires (its id then answers 410, naming the expiry), so abandoned
sessions never hold the `max_sessions` slots for long. Every request gets an answer, whatever
thread serves it: JSON, `{"error": ...}` with a 4xx/5xx status on failure, also for what
`BaseHTTPRequestHandler` itself refuses (a garbage request line, an oversized header, an unknown
method). A connection must deliver each request (line, headers and body) within `read_timeout`
seconds of the server starting to wait for it, or it is closed (408 if part of a request came),
so an idle or slow-loris connection frees its thread. The server binds to 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from vhd.adapters.gym import TextToolEnv, load_module

MAX_BODY = 1 << 20
MAX_SESSIONS = 4096
IDLE_TIMEOUT = 600.0  # seconds a session may go unused before it expires
READ_TIMEOUT = 60.0  # seconds a connection has to deliver one whole request
BACKLOG = 1024  # listen backlog; at least the session limit when that is larger (the kernel caps it at somaxconn)
GONE_REMEMBERED = 16_384  # closed ids kept to answer 410 (about 100 bytes each); older ones answer 404
DEFAULT_SESSION = "default"
ROUTES_HINT = "expected GET /state, GET /health or POST /reset, /step, /finish"
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def _seconds(value: float) -> str:
    return f"{value:g}"


class Sessions:
    """The open episodes of one environment, by session id, in order of last use. A session not
    used for `idle_timeout` seconds (of `clock`) expires; at most `max_sessions` are open: when
    full, a new one takes the place of the least recently used finished one, else 503."""

    def __init__(self, row: dict[str, Any], module: Any, *, idle_timeout: float = IDLE_TIMEOUT,
                 max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic):
        self.row, self._module = row, module
        self.idle_timeout, self.max_sessions, self._clock = idle_timeout, max_sessions, clock
        self._envs: OrderedDict[str, tuple[TextToolEnv, float]] = OrderedDict()  # id → (env, last use)
        self._gone: OrderedDict[str, str] = OrderedDict()  # id → why it closed ("expired", "replaced")
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._envs)

    def open(self, session_id: str | None) -> tuple[str, TextToolEnv]:
        session_id = session_id or uuid.uuid4().hex
        with self._lock:
            now = self._sweep()
            held = self._envs.pop(session_id, None)
            if held is None:
                if len(self._envs) >= self.max_sessions:
                    self._drop_one(now)
                env = TextToolEnv(self.row, self._module)
                self._gone.pop(session_id, None)
            else:
                env = held[0]
            self._envs[session_id] = (env, now)
        return session_id, env

    def _drop_one(self, now: float) -> None:
        done = next((key for key, (env, _) in self._envs.items() if env.finished), None)
        if done is None:
            _, oldest = next(iter(self._envs.values()))
            wait = max(1, int(oldest + self.idle_timeout - now + 0.999))
            raise HttpError(503, f"{self.max_sessions} sessions are open, none finished and each used in the last "
                                 f"{_seconds(self.idle_timeout)} s (the idle timeout); finish one with POST /finish "
                                 f"or retry in {wait} s", {"Retry-After": str(wait)})
        del self._envs[done]
        self._forget(done, "replaced")

    def get(self, session_id: str) -> TextToolEnv:
        with self._lock:
            now = self._sweep()
            held = self._envs.pop(session_id, None)
            if held is not None:
                self._envs[session_id] = (held[0], now)
                return held[0]
            gone = self._gone.get(session_id)
        if gone == "expired":
            raise HttpError(410, f"session {session_id!r} expired: unused for more than {_seconds(self.idle_timeout)}"
                                 f" s (the server's idle timeout); POST /reset for a new session")
        if gone == "replaced":
            raise HttpError(410, f"session {session_id!r} had finished and was closed to make room for a new one "
                                 f"({self.max_sessions} sessions open); POST /reset for a new session")
        raise HttpError(404, f"no session {session_id!r}; expected the session_id that POST /reset returned "
                             f"(sessions expire after {_seconds(self.idle_timeout)} s unused)")

    def sweep(self) -> int:
        """Expire the sessions unused for the idle timeout; the number still open."""
        with self._lock:
            self._sweep()
            return len(self._envs)

    def _sweep(self) -> float:
        now = self._clock()
        while self._envs:
            key, (_, used) = next(iter(self._envs.items()))
            if now - used < self.idle_timeout:
                break
            del self._envs[key]
            self._forget(key, "expired")
        return now

    def _forget(self, session_id: str, why: str) -> None:
        self._gone[session_id] = why
        if len(self._gone) > GONE_REMEMBERED:
            self._gone.popitem(last=False)


def _session_id(body: dict[str, Any], default: str | None) -> str | None:
    value = body.get("session_id", default)
    if value is None:
        return None
    if not isinstance(value, str) or not _SESSION_ID.match(value):
        raise HttpError(400, "session_id must be 1 to 64 letters, digits, '_' or '-'")
    return value


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def make_server(source: dict[str, Any] | TextToolEnv, host: str = "127.0.0.1", port: int = 0, *,
                idle_timeout: float = IDLE_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic) -> "Server":
    """An HTTP server for the environment of an export row (or of a TextToolEnv). Sessions unused
    for `idle_timeout` seconds expire; a connection has `read_timeout` seconds to deliver each
    request; `clock` (monotonic seconds) measures both. Expiry and the read deadline are
    enforced by `serve_forever` (every `poll_interval`)."""
    idle_timeout, read_timeout = _positive("idle_timeout", idle_timeout), _positive("read_timeout", read_timeout)
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
    if isinstance(source, TextToolEnv):
        row, module = source.row, source._module
    else:
        row, module = source, load_module(source["module"])
    sessions = Sessions(row, module, idle_timeout=idle_timeout, max_sessions=max_sessions, clock=clock)
    env_id = row["env_id"]

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

    def health() -> dict[str, Any]:
        return {"env_id": env_id, "sessions": sessions.sweep(), "max_sessions": max_sessions,
                "idle_timeout": idle_timeout, "read_timeout": read_timeout}

    routes = {"/reset": reset, "/step": step, "/finish": finish}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        default_request_version = "HTTP/1.0"  # a request line without a version still gets a status line
        disable_nagle_algorithm = True  # headers and body go out in two writes; without this each step waits ~40 ms for a delayed ACK
        timeout = read_timeout  # each recv and send on the socket; the whole request's deadline is Server's
        timed_out = False

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def handle_one_request(self) -> None:
            self.timed_out = False
            self.server.watch(self)
            try:
                super().handle_one_request()
            finally:
                self.server.unwatch(self)

        def _late(self) -> bool:
            """Stop the read deadline: True if it had already passed (the request is cut short)."""
            return self.server.unwatch(self)

        def _late_error(self) -> HttpError:
            self.close_connection = True
            return HttpError(408, f"the request did not arrive within {_seconds(read_timeout)} s (the server's read "
                                  f"timeout); send the request line, headers and body at once")

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if self.close_connection and status >= 400:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """BaseHTTPRequestHandler's own refusals (request line, headers, method), as JSON."""
            self.close_connection = True
            if self.request_version == "HTTP/0.9":
                self.request_version = "HTTP/1.0"
            if self._late() or self.timed_out:
                code, text = 408, str(self._late_error())
            elif code == 501:
                code, text = 405, f"method {self.command!r} is not served; {ROUTES_HINT}"
            elif code == 414:
                text = "request line longer than 65,536 bytes; expected METHOD PATH HTTP/1.1"
            elif code == 431:
                text = (f"request header too large ({message}: at most 65,536 bytes a line and 100 lines); "
                        f"{explain or ''}".rstrip("; "))
            elif code == 505:
                text = f"{message}; expected HTTP/1.1 (or HTTP/1.0)"
            elif code == 400:
                text = f"malformed request: {message}; expected METHOD PATH HTTP/1.1, headers, a blank line"
            else:
                text = f"{message or self.responses.get(code, ('error',))[0]}"
            headers = {"Allow": "GET, POST"} if code == 405 else None
            self._send(code, {"error": " ".join(text.split())[:500]}, headers)

        def _body(self) -> dict[str, Any]:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self._late()
                self.close_connection = True
                raise HttpError(411, "a chunked request body is not supported; send Content-Length")
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self._late()
                self.close_connection = True
                raise HttpError(400, "Content-Length is not a number") from None
            if length < 0 or length > MAX_BODY:
                self._late()
                self.close_connection = True
                raise HttpError(413, f"request body of {length} bytes; expected at most {MAX_BODY}")
            try:
                raw = self.rfile.read(length) if length else b""
            except (TimeoutError, OSError):
                raw = None
            if self._late() or raw is None:
                raise self._late_error()
            if len(raw) < length:
                self.close_connection = True
                raise HttpError(400, f"the request body ended after {len(raw)} of {length} bytes (Content-Length)")
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
                self._send(exc.status, {"error": str(exc)}, exc.headers)
            except Exception as exc:  # a bug must still answer, never drop the connection
                self._send(500, {"error": f"internal error: {type(exc).__name__}: {str(exc)[:200]}"})

        def do_GET(self) -> None:
            url = urlparse(self.path)

            def work() -> dict[str, Any]:
                if self._late():
                    raise self._late_error()
                if url.path == "/health":
                    return health()
                if url.path != "/state":
                    raise HttpError(404, f"no route GET {url.path}; {ROUTES_HINT}")
                query = {key: values[-1] for key, values in parse_qs(url.query).items()}
                return state(_session_id(query, DEFAULT_SESSION))

            self._answer(work)

        def do_POST(self) -> None:
            route = routes.get(urlparse(self.path).path)

            def work() -> dict[str, Any]:
                body = self._body()  # read the body even for a bad route, so the connection stays in step
                if route is None:
                    raise HttpError(404, f"no route POST {self.path}; {ROUTES_HINT}")
                return route(body)

            self._answer(work)

        def _not_allowed(self) -> None:
            self._late()
            self.close_connection = True  # a body it may carry is not read
            self._send(405, {"error": f"method {self.command!r} is not served; {ROUTES_HINT}"}, {"Allow": "GET, POST"})

        do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    server = Server((host, port), Handler, sessions=sessions, read_timeout=read_timeout, clock=clock,
                    backlog=max(BACKLOG, max_sessions))
    server.daemon_threads = True
    return server


class Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer with a listen backlog for bursts (socketserver's is 5: fifty sessions
    connecting at once overflowed it and lost their first request), whose `serve_forever` loop
    also expires idle sessions and closes the connections past their read deadline."""

    def __init__(self, address: tuple[str, int], handler: type, *, sessions: Sessions, read_timeout: float,
                 clock: Callable[[], float], backlog: int = BACKLOG):
        self.request_queue_size = backlog
        self.sessions, self.read_timeout, self._clock = sessions, read_timeout, clock
        self._reading: dict[BaseHTTPRequestHandler, float] = {}  # handler → deadline of the request it awaits
        self._reading_lock = threading.Lock()
        super().__init__(address, handler)

    def watch(self, handler: BaseHTTPRequestHandler) -> None:
        with self._reading_lock:
            self._reading[handler] = self._clock() + self.read_timeout

    def unwatch(self, handler: BaseHTTPRequestHandler) -> bool:
        """Stop `handler`'s read deadline; True if it had passed (its connection is being closed)."""
        with self._reading_lock:
            self._reading.pop(handler, None)
            return handler.timed_out

    def service_actions(self) -> None:
        """Run by `serve_forever` every poll: expire idle sessions; end the reads past their deadline
        (shutting the socket for reading wakes the handler's recv, which then sees the end)."""
        self.sessions.sweep()
        now = self._clock()
        with self._reading_lock:
            late = [handler for handler, deadline in self._reading.items() if deadline <= now]
            for handler in late:
                del self._reading[handler]
                handler.timed_out = True
        for handler in late:
            try:
                handler.connection.shutdown(socket.SHUT_RD)
            except OSError:  # already closed
                pass


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
