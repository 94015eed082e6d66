"""`vhd report`: the eval tables and plots of the stored episodes, as PNGs and one HTML page.

    >>> from vhd.agents import Table
    >>> from vhd.agents.evaluate import play
    >>> episodes = play([Table(env, model, solution, setter_output, family)], "greedy", episodes=2)
    >>> files = write_report(episodes, {env.env_id: env}, scratch / "report")   # envs by id
    >>> sorted(p.name for p in files)
    ['fia_bars.png', 'index.html', 'reward_by_family.png', 'score_vs_horizon.png', 'score_vs_size.png', 'tables.json']

For each agent: the F/I/A table of `evaluate.summary` (the same numbers `vhd eval` prints),
then four plots over all agents: F/I/A bars per family, reward distribution per family,
mean reward vs the size knob and vs the horizon knob of the environment.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from statistics import mean
from typing import Any

from vhd.agents.evaluate import PRESENTATIONS, summary
from vhd.schemas.errors import InvalidParams
from vhd.schemas.records import EnvironmentRecord, EpisodeRecord


def select_episodes(episodes: list[EpisodeRecord], agents: list[str] | None) -> list[EpisodeRecord]:
    """The stored episodes of `agents` (None: all); InvalidParams when an agent has none or nothing is stored."""
    if agents is not None:
        missing = sorted(set(agents) - {e.agent for e in episodes})
        if missing:
            raise InvalidParams(f"no stored episodes of agent(s) {missing}; run `vhd eval --agent A` first")
        episodes = [e for e in episodes if e.agent in set(agents)]
    if not episodes:
        raise InvalidParams("no stored episodes; run `vhd eval --agent A` first")
    return episodes


def tables(episodes: list[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """agent -> evaluate.summary of its episodes."""
    agents = sorted({e.agent for e in episodes})
    return {a: summary([e for e in episodes if e.agent == a]) for a in agents}


def _plots(episodes: list[EpisodeRecord], envs: dict[str, EnvironmentRecord], by_agent: dict[str, Any],
           out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = list(by_agent)
    families = sorted({e.family for e in episodes})
    files = []

    fig, axes = plt.subplots(1, len(agents), figsize=(4 * len(agents), 3.5), squeeze=False, sharey=True)
    for ax, agent in zip(axes[0], agents):
        rows = by_agent[agent]["families"]
        width = 0.8 / len(PRESENTATIONS)
        for k, p in enumerate(PRESENTATIONS):
            heights = [rows[f][p]["mean"] if p in rows.get(f, {}) else 0.0 for f in families]
            errors = [rows[f][p]["ci95"] if p in rows.get(f, {}) else 0.0 for f in families]
            ax.bar([i + k * width for i in range(len(families))], heights, width, yerr=errors, label=p, capsize=2)
        ax.set_xticks([i + width for i in range(len(families))], families, rotation=30, ha="right", fontsize=8)
        ax.set_title(agent)
        ax.set_ylim(0, 1.05)
    axes[0][0].set_ylabel("mean reward")
    axes[0][0].legend(title="presentation", fontsize=7)
    fig.tight_layout()
    files.append(out / "fia_bars.png")
    fig.savefig(files[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    data, labels = [], []
    for agent in agents:
        for f in families:
            data.append([e.reward for e in episodes if e.agent == agent and e.family == f] or [0.0])
            labels.append(f"{agent}\n{f}")
    ax.boxplot(data)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=90, fontsize=6)
    ax.set_ylabel("reward")
    ax.set_title("reward distribution per agent and family")
    fig.tight_layout()
    files.append(out / "reward_by_family.png")
    fig.savefig(files[-1], dpi=90)
    plt.close(fig)

    for knob, name in (("size", "score_vs_size.png"), ("horizon", "score_vs_horizon.png")):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for agent in agents:
            points: dict[int, list[float]] = {}
            for e in episodes:
                value = envs[e.env_id].knobs.get(knob) if e.env_id in envs else None
                if e.agent == agent and isinstance(value, int):
                    points.setdefault(value, []).append(e.reward)
            xs = sorted(points)
            ax.plot(xs, [mean(points[x]) for x in xs], marker="o", label=agent)
        ax.set_xlabel(f"{knob} knob")
        ax.set_ylabel("mean reward")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7)
        ax.set_title(f"mean reward vs {knob} (all diagnostic families)")
        fig.tight_layout()
        files.append(out / name)
        fig.savefig(files[-1], dpi=90)
        plt.close(fig)
    return files


def _html(by_agent: dict[str, Any], images: list[Path]) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>vhd eval report</title>",
             "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:3px 8px}"
             "table{border-collapse:collapse;margin-bottom:1em}</style></head><body><h1>vhd eval report</h1>"]
    for agent, s in by_agent.items():
        parts.append(f"<h2>agent {html.escape(agent)} ({s['episodes']} episodes)</h2><table><tr><th>family</th>")
        parts += [f"<th>{p}</th>" for p in PRESENTATIONS] + ["<th>family mean</th></tr>"]
        for family, row in s["families"].items():
            cells = [f"<td>{row[p]['mean']:.3f} ± {row[p]['ci95']:.3f} (n={row[p]['n']})</td>" if p in row else "<td>—</td>"
                     for p in PRESENTATIONS]
            parts.append(f"<tr><td>{html.escape(family)}</td>{''.join(cells)}<td>{row['mean']:.3f}</td></tr>")
        means = "".join(f"<td>{s['mean'][p]:.3f}</td>" if p in s["mean"] else "<td>—</td>" for p in PRESENTATIONS)
        parts.append(f"<tr><th>mean</th>{means}<td></td></tr></table>")
        gaps = ", ".join(f"{k} gap {v:+.3f}" for k, v in s["gaps"].items())
        parts.append(f"<p>{html.escape(gaps)}</p>")
    parts += [f"<p><img src='{p.name}' alt='{p.stem}'></p>" for p in images]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(episodes: list[EpisodeRecord], envs: dict[str, EnvironmentRecord], out: Path) -> list[Path]:
    """Write tables.json, the PNGs and index.html into `out`; returns the paths written."""
    if not episodes:
        raise ValueError("no stored episodes; run `vhd eval --agent A` first")
    out.mkdir(parents=True, exist_ok=True)
    by_agent = tables(episodes)
    (out / "tables.json").write_text(json.dumps(by_agent, indent=2, sort_keys=True), encoding="utf-8")
    images = _plots(episodes, envs, by_agent, out)
    (out / "index.html").write_text(_html(by_agent, images), encoding="utf-8")
    return [out / "tables.json", *images, out / "index.html"]


# --- what the evaluate flow publishes as Prefect artifacts (vhd/flows/evaluate.py) ---------------


def fia_markdown(agent: str, summary_: dict[str, Any]) -> str:
    """The F/I/A table of one agent as markdown: per family the mean ± 95 % half-width (n) per
    presentation and the family mean, then the mean over families and the F→I, I→A gaps."""
    shown = [p for p in PRESENTATIONS if p in summary_["mean"]]
    lines = [f"# vhd eval: agent `{agent}`", "", f"{summary_['episodes']} episodes; mean reward "
             "(± half-width of the normal 95 % interval, n episodes)", "",
             "| family | " + " | ".join(shown) + " | family mean |", "|---" * (len(shown) + 2) + "|"]
    for family, row in summary_["families"].items():
        cells = [f"{row[p]['mean']:.3f} ± {row[p]['ci95']:.3f} (n={row[p]['n']})" if p in row else "—" for p in shown]
        lines.append(f"| {family} | " + " | ".join(cells) + f" | {row['mean']:.3f} |")
    lines.append("| **mean** | " + " | ".join(f"{summary_['mean'][p]:.3f}" for p in shown) + " | |")
    if summary_["gaps"]:
        lines += ["", "Gaps (positive: the reward drops from one presentation to the next): "
                  + ", ".join(f"{k} {v:+.3f}" for k, v in summary_["gaps"].items())]
    return "\n".join(lines)


def family_rows(summary_: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-family table of one agent as rows for a table artifact: family, then per
    presentation its mean, 95 % half-width and n, then the family mean."""
    rows = []
    for family, row in summary_["families"].items():
        out: dict[str, Any] = {"family": family}
        for p in PRESENTATIONS:
            if p in row:
                out.update({f"{p} mean": row[p]["mean"], f"{p} ci95": row[p]["ci95"], f"{p} n": row[p]["n"]})
        out["family mean"] = row["mean"]
        rows.append(out)
    return rows


def report_markdown(by_agent: dict[str, Any], files: list[Path], image_url: str | None = None) -> str:
    """The report page as markdown: the F/I/A table of every agent, then the files written.
    The PNGs are embedded only when `image_url` says where DIR is served (the Prefect UI shows
    images from URLs the browser can fetch, not from this machine's paths)."""
    parts = [fia_markdown(agent, s) for agent, s in by_agent.items()]
    parts.append("## Files\n\n" + "\n".join(f"- `{p.resolve()}`" for p in files))
    if image_url:
        base = image_url.rstrip("/")
        parts.append("\n\n".join(f"![{p.stem}]({base}/{p.name})" for p in files if p.suffix == ".png"))
    return "\n\n".join(parts)
