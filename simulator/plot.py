"""The allocation curve of each policy against arrived load (as in the FGD paper's figure)."""

from __future__ import annotations

from pathlib import Path

from simulator.runner import Summary


def plot_curves(summaries: list[Summary], out: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    fig, (full, zoom) = plt.subplots(1, 2, figsize=(12, 4.8))
    for s in summaries:
        xs = sorted(s.curve)
        ys = [s.curve[x] for x in xs]
        for ax in (full, zoom):
            ax.plot(xs, ys, label=s.policy, linewidth=1.6 if s.policy == "gpuledger" else 1.0)
    full.plot([0, 100, 130], [0, 100, 100], color="grey", linestyle=":", linewidth=0.8,
              label="everything placed")
    full.set(xlabel="arrived GPU demand (% of capacity)", ylabel="allocated GPU (% of capacity)",
             xlim=(0, 130), ylim=(0, 102), title="allocation vs arrived load")
    zoom.set(xlabel="arrived GPU demand (% of capacity)", ylabel="allocated GPU (% of capacity)",
             xlim=(80, 130), ylim=(84, 100), title="zoom: the saturated part")
    zoom.grid(alpha=0.3)
    full.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
