"""`vhd`: the command line. Thin: parse, call a flow or the warehouse, print (rich) or --json.

    $ vhd refresh --families inventory_dp --per-family 20
    $ vhd envs --json | head
    $ vhd audit ENV_ID

Only the commands that run a flow import Prefect (its embedded server takes seconds to start):
`refresh`, `backfill`, `serve`, and `eval`/`report` with `--flow`, each through `_prefect`. The
others never load it. The pipeline's work is done where it belongs (flows, tasks, agents,
warehouse); a command validates its options (one function each, in `common`), calls, and prints.

The commands live in three modules by what they do (their `--help` panels): `build` (refresh,
backfill, serve…), `corpus` (envs, audit, verify, export…) and `play` (score, play, eval…); `common`
holds what they share."""

from vhd.cli import build, corpus, play  # noqa: F401  (each registers its commands on `app`)
from vhd.cli.build import _report
from vhd.cli.common import app
from vhd.cli.corpus import _families_markdown, _family_row

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover
    app()

