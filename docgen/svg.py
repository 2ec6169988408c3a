"""A horizontal bar chart as a standalone SVG file, drawn by hand: no plotting library.

Owns: laying bars out in groups (a bold heading per group, the bars of a group together), their
scale with round grid lines, each bar's label on its left and its value at its end, a colour per
label (the same label has the same colour in every group, and every chart: colour-blind safe
Okabe-Ito colours), and a light background so that the chart reads in the site's dark theme too.
The output is the same for the same bars, byte for byte.

Does not know benchmarks, tables or pages (``benchmarks.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Bar", "bar_chart", "number"]

# Okabe and Ito's palette, without its black and yellow (too light on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")
WIDTH = 760
FONT = 12
CHAR = 6.6  # an average character's width at FONT px, for the label column
BAR, GAP, HEADING = 16, 6, 22
LABELS = 340  # the label column's widest, in px


@dataclass(frozen=True)
class Bar:
    """One bar: its group (a heading above its bars; "" for none), label and value (None: no
    figure, drawn as a dash)."""

    group: str
    label: str
    value: float | None


def number(value: float) -> str:
    """A figure as the benchmarks' tables write it: 1,137 or 2.21 (a whole number as one)."""
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def _tick(value: float, step: float) -> str:
    """A grid line's figure, with as many decimals as its step needs (0.025: three)."""
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-9:
        decimals += 1
    return f"{value:,.{decimals}f}"


def _fit(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[: chars - 1] + "…"


def _step(span: float) -> float:
    """A round step for about four grid lines over ``span``."""
    raw = span / 4 if span > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def bar_chart(title: str, bars: Sequence[Bar], unit: str = "") -> str:
    """The chart as SVG text: the bars in their order, a group's heading wherever the group
    changes; ``unit`` follows each value."""
    values = [b.value for b in bars if b.value is not None]
    low = min([0.0, *values])
    step = _step(max([0.0, *values]) - low)
    high = max(step, math.ceil(max([0.0, *values]) / step) * step)
    low = math.floor(low / step) * step
    chars = int((LABELS - 14) / CHAR)
    label_width = min(LABELS, max([len(b.label) for b in bars] + [4]) * CHAR + 14)
    left, right = 12 + label_width, WIDTH - 90
    top = 44

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * (right - left)

    body: list[str] = []
    colours: dict[str, str] = {}
    y = top
    group: str | None = None
    for bar in bars:
        if bar.group and bar.group != group:
            y += 4 if group is not None else 0
            body.append(f'<text x="12" y="{y + 15}" font-weight="bold">{escape(bar.group)}</text>')
            y += HEADING
        group = bar.group
        colour = colours.setdefault(bar.label, PALETTE[len(colours) % len(PALETTE)])
        middle = y + BAR / 2 + FONT / 2 - 2
        body.append(
            f'<text x="{left - 8}" y="{middle:.1f}" text-anchor="end">'
            f"{escape(_fit(bar.label, chars))}</text>"
        )
        if bar.value is None:
            body.append(f'<text x="{x(0) + 6:.1f}" y="{middle:.1f}" fill="#666">no figure</text>')
        else:
            start, end = sorted((x(0), x(bar.value)))
            body.append(
                f'<rect x="{start:.1f}" y="{y}" width="{max(end - start, 1):.1f}" '
                f'height="{BAR}" fill="{colour}"/>'
            )
            shown = number(bar.value) + (f" {unit}" if unit else "")
            body.append(f'<text x="{end + 6:.1f}" y="{middle:.1f}">{escape(shown)}</text>')
        y += BAR + GAP
    bottom = y + 4
    grid: list[str] = []
    tick = low
    while tick <= high + step / 1000:
        at = x(tick)
        grid.append(
            f'<line x1="{at:.1f}" y1="{top - 6}" x2="{at:.1f}" y2="{bottom}" '
            f'stroke="#ddd"/>'
            f'<text x="{at:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#555">'
            f"{escape(_tick(tick, step))}</text>"
        )
        tick += step
    height = bottom + 28
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}" '
            f'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" '
            f'font-size="{FONT}" fill="#222">',
            f"<title>{escape(title)}</title>",
            f'<rect width="{WIDTH}" height="{height}" rx="6" fill="#fff"/>',
            f'<text x="12" y="24" font-size="14" font-weight="bold">{escape(title)}</text>',
            *grid,
            f'<line x1="{x(0):.1f}" y1="{top - 6}" x2="{x(0):.1f}" y2="{bottom}" stroke="#888"/>',
            *body,
            "</svg>",
            "",
        ]
    )
