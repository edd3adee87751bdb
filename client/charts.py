"""Hand-drawn inline SVG charts for report.html: horizontal bar charts, one or more series.

No plotting library: a bar chart is a few rectangles, labels and grid lines, and inline SVG needs
no image files and scales in any browser. `bar_chart` draws one row per label with one bar per
series (grouped), a value axis with round ticks, and a legend when there are several series.

Pure functions returning SVG text (XML-escaped); thread-safe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

LABEL_WIDTH_PX = 110
PLOT_WIDTH_PX = 520
VALUE_WIDTH_PX = 80
BAR_HEIGHT_PX = 9
ROW_GAP_PX = 6
TOP_PX = 34
AXIS_PX = 24
TICKS_WANTED = 5
FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float]
    color: str


def nice_ticks(maximum: float, wanted: int = TICKS_WANTED) -> list[float]:
    """Round tick values from 0 to at least `maximum` (1, 2 or 5 times a power of ten apart)."""
    if maximum <= 0 or not math.isfinite(maximum):
        return [0.0, 1.0]
    raw_step = maximum / wanted
    power = 10 ** math.floor(math.log10(raw_step))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw_step)
    count = math.ceil(maximum / step - 1e-9)
    return [i * step for i in range(count + 1)]


def bar_chart(title: str, labels: Sequence[str], series: Sequence[Series],
              value_format: str = "{:,.0f}") -> str:
    """A grouped horizontal bar chart as an <svg> element."""
    assert series and all(len(s.values) == len(labels) for s in series)
    ticks = nice_ticks(max((v for s in series for v in s.values), default=0.0))
    scale = PLOT_WIDTH_PX / ticks[-1]
    row_px = len(series) * BAR_HEIGHT_PX + ROW_GAP_PX
    plot_px = max(len(labels), 1) * row_px
    width = LABEL_WIDTH_PX + PLOT_WIDTH_PX + VALUE_WIDTH_PX
    height = TOP_PX + plot_px + AXIS_PX
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="0" y="14" {FONT} font-weight="bold">{escape(title)}</text>']
    parts += _legend(series)
    parts += _grid(ticks, scale, plot_px, value_format)
    for row, label in enumerate(labels):
        y = TOP_PX + row * row_px
        parts.append(f'<text x="{LABEL_WIDTH_PX - 6}" y="{y + row_px / 2:.1f}" {FONT} '
                     f'text-anchor="end" dominant-baseline="middle">{escape(label)}</text>')
        for index, one in enumerate(series):
            parts.append(_bar(one, row, index, y, scale, value_format))
    parts.append("</svg>")
    return "\n".join(parts)


def _bar(one: Series, row: int, index: int, y: float, scale: float, value_format: str) -> str:
    value = one.values[row]
    bar_y = y + index * BAR_HEIGHT_PX
    bar_width = max(value * scale, 0.0)
    text = escape(value_format.format(value))
    return (f'<rect x="{LABEL_WIDTH_PX}" y="{bar_y:.1f}" width="{bar_width:.1f}" '
            f'height="{BAR_HEIGHT_PX - 1}" fill="{one.color}"><title>{escape(one.name)}: '
            f'{text}</title></rect>'
            f'<text x="{LABEL_WIDTH_PX + bar_width + 4:.1f}" y="{bar_y + BAR_HEIGHT_PX - 1:.1f}" '
            f'font-family="sans-serif" font-size="8" fill="#444">{text}</text>')


def _legend(series: Sequence[Series]) -> list[str]:
    if len(series) < 2:
        return []
    parts = []
    x = LABEL_WIDTH_PX
    for one in series:
        parts.append(f'<rect x="{x}" y="20" width="10" height="8" fill="{one.color}"/>'
                     f'<text x="{x + 14}" y="28" {FONT}>{escape(one.name)}</text>')
        x += 30 + 7 * len(one.name)
    return parts


def _grid(ticks: Sequence[float], scale: float, plot_px: float, value_format: str) -> list[str]:
    parts = []
    bottom = TOP_PX + plot_px
    for tick in ticks:
        x = LABEL_WIDTH_PX + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{TOP_PX}" x2="{x:.1f}" y2="{bottom}" '
                     f'stroke="#ddd"/><text x="{x:.1f}" y="{bottom + 14}" {FONT} '
                     f'text-anchor="middle">{escape(value_format.format(tick))}</text>')
    return parts
