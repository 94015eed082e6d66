"""Compose one `vhd report` page into a single PNG: its tables and its four plots.

    PYTHONPATH=. python bench/report_figure.py --report /tmp/report --out docs/img/report.png

There is no browser on this machine to screenshot index.html, so this draws what the page
shows: the F/I/A means of every agent (from the page's tables.json, the numbers of
`vhd eval`) as a table, then the page's four PNGs: the F/I/A bars and the reward distribution per family at
full width, reward vs size and vs horizon side by side. The result is saved as a palette PNG to stay small.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

PLOTS = ("fia_bars.png", "reward_by_family.png", "score_vs_size.png", "score_vs_horizon.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", required=True, help="a directory written by `vhd report --out DIR`")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dpi", type=int, default=80)
    args = parser.parse_args()
    report = Path(args.report)
    tables = json.loads((report / "tables.json").read_text())
    rows = []
    for agent, s in tables.items():
        for family, row in s["families"].items():
            rows.append([agent, family, *(f"{row[p]['mean']:.3f} ± {row[p]['ci95']:.3f}" if p in row else "—"
                                          for p in "FIA"), f"{row['mean']:.3f}"])
        rows.append([agent, "mean", *(f"{s['mean'][p]:.3f}" if p in s["mean"] else "—" for p in "FIA"),
                     ", ".join(f"{k} {v:+.3f}" for k, v in s["gaps"].items())])
    images = {name: mpimg.imread(report / name) for name in PLOTS}
    width = 13.0

    def height(name: str, share: float = 1.0) -> float:  # inches at full width × share, keeping the aspect
        rows_, cols_ = images[name].shape[:2]
        return width * share * rows_ / cols_

    ratios = [0.22 * (len(rows) + 1), height("fia_bars.png"), height("reward_by_family.png", 0.6),
              height("score_vs_size.png", 0.5)]
    fig = plt.figure(figsize=(width, sum(ratios)))
    grid = fig.add_gridspec(4, 2, height_ratios=ratios)
    ax = fig.add_subplot(grid[0, :])
    ax.axis("off")
    ax.set_title(f"vhd eval report: {sum(s['episodes'] for s in tables.values())} stored episodes", fontsize=13)
    table = ax.table(cellText=rows, colLabels=["agent", "family", "F (± 95 %)", "I (± 95 %)", "A (± 95 %)",
                                                "family mean / gaps"], bbox=[0, 0, 1, 1], cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for name, cell in (("fia_bars.png", grid[1, :]), ("reward_by_family.png", grid[2, :]),
                       ("score_vs_size.png", grid[3, 0]), ("score_vs_horizon.png", grid[3, 1])):
        ax = fig.add_subplot(cell)
        ax.imshow(images[name])
        ax.axis("off")
    fig.tight_layout()
    out = Path(args.out)
    fig.savefig(out, dpi=args.dpi)
    plt.close(fig)
    Image.open(out).convert("RGB").quantize(colors=128).save(out, optimize=True)
    print(f"{out}: {out.stat().st_size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
