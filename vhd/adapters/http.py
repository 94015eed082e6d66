"""Serve one environment over HTTP (OpenEnv-like), standard library only.

    POST /reset               → {"observation": str, "info": {...}}
    POST /step  {"action": A} → {"observation": str, "reward": float, "terminated": bool,
                                 "truncated": bool, "info": {...}}
    GET  /state               → {"env_id", "steps", "turn_budget", "trajectory", "finished"}

A is the same action TextToolEnv.step takes (a JSON text or an object {"tool", "arguments"}).
One episode at a time; the server binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vhd.adapters.gym import TextToolEnv


def make_server(env: TextToolEnv, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    lock = threading.Lock()

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

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw.strip() else {}

        def do_GET(self) -> None:
            if self.path != "/state":
                return self._send(404, {"error": f"no route GET {self.path}; expected GET /state"})
            with lock:
                self._send(200, {"env_id": env.row["env_id"], "steps": env.steps, "turn_budget": env.turn_budget,
                                 "trajectory": env.trajectory, "finished": bool(getattr(env, "_finished", False))})

        def do_POST(self) -> None:
            try:
                body = self._body()
            except (ValueError, UnicodeDecodeError):
                return self._send(400, {"error": "request body is not JSON; expected an object"})
            with lock:
                if self.path == "/reset":
                    observation, info = env.reset(seed=body.get("seed") if isinstance(body, dict) else None)
                    return self._send(200, {"observation": observation, "info": info})
                if self.path == "/step":
                    if not isinstance(body, dict) or "action" not in body:
                        return self._send(400, {"error": 'expected {"action": {"tool": NAME, "arguments": {...}}}'})
                    try:
                        observation, r, terminated, truncated, info = env.step(body["action"])
                    except RuntimeError as exc:
                        return self._send(409, {"error": str(exc)})
                    return self._send(200, {"observation": observation, "reward": r, "terminated": terminated,
                                            "truncated": truncated, "info": info})
            self._send(404, {"error": f"no route POST {self.path}; expected POST /reset or /step"})

    return ThreadingHTTPServer((host, port), Handler)


class HttpEnvClient:
    """A minimal client with the same reset/step as TextToolEnv (standard library only)."""

    def __init__(self, base_url: str):
        import http.client
        from urllib.parse import urlparse

        url = urlparse(base_url)
        self._conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        self._conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = self._conn.getresponse()
        payload = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(payload.get("error", f"HTTP {response.status}"))
        return payload

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        out = self._call("POST", "/reset", {"seed": seed})
        return out["observation"], out["info"]

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        out = self._call("POST", "/step", {"action": action})
        return out["observation"], out["reward"], out["terminated"], out["truncated"], out["info"]

    def state(self) -> dict[str, Any]:
        return self._call("GET", "/state")

    def close(self) -> None:
        self._conn.close()
