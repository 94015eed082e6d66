"""An OpenEnv package (RFC 008) of one export row, as `vhd export --format openenv` writes it.

    DIR/
      openenv.yaml            manifest: the app `server.app:app` on port 8000 and its `validation:` block
      validation/runtime.json the runtime plan: reset on the stored episode seed, then π*'s calls
      Dockerfile              python:3.11-slim, installs `vhd-play[openenv]` from wheels/ only (no index)
      wheels/                 the project wheel (and the wheelhouse given, for an offline build)
      server/app.py           the entry point: `app_for(row)` of vhd.adapters.openenv
      row.json                the export row (module, player view, grader view)
      README.md

`openenv validate DIR` checks it: the manifest statically, then (with a Docker daemon) builds the
image, plays the plan over `/ws` and grades the answers (rewards, observation schema, state).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from vhd.schemas.errors import TrajectoryFormatError

PORT = 8000  # OpenEnv's fixed internal port
MAX_PLAN_ACTIONS = 100  # openenv's runtime plan bound
PROJECT = "vhd_play"  # the project's wheel name


def package_name(row: dict[str, Any]) -> str:
    return f"vhd-{row['env_id'][:16]}"


def manifest(row: dict[str, Any]) -> dict[str, Any]:
    """openenv.yaml: what OpenEnv runs (`server.app:app`) and what `openenv validate` checks."""
    return {
        "spec_version": 1,
        "name": package_name(row),
        "version": "1",
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": PORT,
        "validation": {
            # the decision reward is in [0, 1]: π* 1, the empty episode 0 (the floor)
            "reward": {"range": [0.0, 1.0], "oracle_tolerance": 0.0, "floor_margin": 0.1},
            "resources": {"cpu": 1.0, "memory_mb": 1024, "disk_mb": 2048, "episode_timeout_s": 300.0},
            "capabilities": {"verifier": {"kind": "reward_channel"},
                             "declared_tools": [t["name"] for t in row["player"]["tools"]]},
            "types": {"tags": ["vhd-play", "tool-use", row["family"]]},
            "execution": {"kind": "openenv_ws", "probe_path": "validation/runtime.json",
                          "dockerfile": "Dockerfile", "context": "."},
        },
    }


def runtime_plan(row: dict[str, Any]) -> dict[str, Any]:
    """The runtime plan: reset on the row's stored episode seed, then π*'s calls (the row's
    reference trajectory) as `call_tool` actions; the last one ends the episode with reward 1."""
    calls = row["grader"]["reference_trajectory"]
    if not 1 <= len(calls) <= MAX_PLAN_ACTIONS:
        raise TrajectoryFormatError(f"{row['env_id'][:16]}: π* has {len(calls)} calls; an OpenEnv runtime plan "
                                    f"holds 1 to {MAX_PLAN_ACTIONS} actions")
    return {"plan_schema_version": "1",
            "reset": {"episode_id": f"{package_name(row)}-reference",
                      "seed": int(row["grader"]["config"]["episode_seed"])},
            "actions": [{"type": "call_tool", "tool_name": c["tool"], "arguments": c.get("arguments", {})}
                        for c in calls]}


DOCKERFILE = f"""\
# The environment in row.json, served by OpenEnv's server (vhd.adapters.openenv) on port {PORT}.
# Builds offline: vhd-play and its dependencies are installed from wheels/ only.
FROM python:3.11-slim
WORKDIR /env
COPY wheels/ /tmp/wheels/
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels "vhd-play[openenv]" && rm -rf /tmp/wheels
COPY openenv.yaml row.json ./
COPY server/ ./server/
EXPOSE {PORT}
CMD ["python", "-m", "uvicorn", "server.app:app", "--host", "0.0.0.0", "--port", "{PORT}"]
"""

APP = '''"""OpenEnv entry point: the environment in ../row.json, served by vhd.adapters.openenv."""

from pathlib import Path

from vhd.adapters.openenv import app_for, row_from_file

app = app_for(row_from_file(Path(__file__).resolve().parent.parent / "row.json"))
'''


def readme(row: dict[str, Any], wheels: list[str]) -> str:
    complete = len(wheels) > 1
    return f"""# {package_name(row)}

One VHD-Play environment ({row['family']}, presentation {row['presentation']}, env_id `{row['env_id']}`)
as an OpenEnv package, written by `vhd export --format openenv`.

- serve here: `python -m uvicorn server.app:app --port {PORT}` (needs `pip install "vhd-play[openenv]"`)
- validate: `openenv validate .` (the runtime checks build the image: a Docker daemon);
  `openenv validate . --level static` without one
- image: `docker build -t {package_name(row)} .`, offline: it installs from `wheels/` only, which holds
  {"the project wheel and the wheelhouse it was exported with" if complete else
   "the project wheel only: add the wheels of its dependencies first, e.g. "
   "`pip download 'vhd-play[openenv]' --find-links wheels -d wheels`"}

Actions over `/ws`: `{{"type": "list_tools"}}`, `{{"type": "call_tool", "tool_name": T, "arguments": A}}`,
`{{"type": "finish"}}`; MCP `tools/list` and `tools/call` on `/mcp`. Reward 0.0 on every step until
the episode ends, then the episode's decision reward (π*'s calls: 1.0). `validation/runtime.json`
plays π* on the stored episode seed.
"""


def project_wheel(out_dir: Path) -> Path:
    """Build this project's wheel (no dependencies) from its source tree into `out_dir`, from a
    copy of the tree (the source tree is left as it is)."""
    import vhd

    root = Path(vhd.__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        raise TrajectoryFormatError(f"vhd is not installed from its source tree ({root} has no pyproject.toml); "
                                    "give --wheelhouse a directory holding the vhd_play wheel")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        shutil.copy2(root / "pyproject.toml", source)
        shutil.copytree(root / "vhd", source / "vhd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("README.md",):
            if (root / name).is_file():
                shutil.copy2(root / name, source)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir), str(source)]
        # with this environment's setuptools if it can build wheels, else in pip's build isolation
        done = subprocess.run(command + ["--no-build-isolation"], capture_output=True, text=True)
        if done.returncode:
            done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["pip wheel failed"])[-1]
            raise TrajectoryFormatError(f"cannot build the vhd_play wheel: {last}")
    built = sorted(out_dir.glob(f"{PROJECT}-*.whl"))
    if not built:
        raise TrajectoryFormatError("pip wheel wrote no vhd_play wheel")
    return built[-1]


def _place(source: Path, target: Path) -> None:
    """A regular-file copy (a hard link where possible): validation refuses symbolic links."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def write_package(row: dict[str, Any], out: Path, wheelhouse: Path | None = None) -> Path:
    """Write the OpenEnv package of one export row into the directory `out` (new or empty):
    the files above. `wheelhouse`: a directory of wheels (the project's and its dependencies')
    copied into wheels/; without one, or one without the vhd_play wheel, the project wheel is
    built from the source tree."""
    if row["grader"]["config"].get("presentation") == "F" or row.get("presentation") == "F":
        raise TrajectoryFormatError(f"{row['env_id'][:16]} is presentation F (scored from a written answer, "
                                    "not tool calls); expected an I or A environment")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TrajectoryFormatError(f"{out} exists and is not an empty directory; expected a new package directory")
    plan = runtime_plan(row)
    wheels = out / "wheels"
    (out / "validation").mkdir(parents=True)
    (out / "server").mkdir()
    wheels.mkdir()
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise TrajectoryFormatError(f"--wheelhouse {wheelhouse}: not a directory")
        for wheel in sorted(wheelhouse.glob("*.whl")):
            _place(wheel, wheels / wheel.name)
    if not any(wheels.glob(f"{PROJECT}-*.whl")):
        project_wheel(wheels)
    (out / "openenv.yaml").write_text(
        f"# OpenEnv package of VHD-Play environment {row['env_id']} (vhd export --format openenv)\n"
        + yaml.safe_dump(manifest(row), sort_keys=False), encoding="utf-8")
    (out / "validation" / "runtime.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    (out / "Dockerfile").write_text(DOCKERFILE, encoding="utf-8")
    (out / "server" / "__init__.py").write_text("", encoding="utf-8")
    (out / "server" / "app.py").write_text(APP, encoding="utf-8")
    (out / "row.json").write_text(json.dumps(row, sort_keys=True) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(row, sorted(w.name for w in wheels.glob("*.whl"))), encoding="utf-8")
    return out
