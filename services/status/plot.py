"""A small server-side SVG plot: upload throughput over the last minutes (no JavaScript, no
charting package: a polyline in a viewBox).

`History` keeps the last `points_max` (time, cumulative count) samples; `rates` turns them into
per-second rates between neighbours; `sparkline_svg` draws them. Pure but for `History`'s
bounded deque, which only the poller thread appends to.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

WIDTH_PX = 480
HEIGHT_PX = 90
MARGIN_PX = 4


class History:
    def __init__(self, points_max: int) -> None:
        assert points_max >= 2
        self._points: deque[tuple[float, float]] = deque(maxlen=points_max)

    def add(self, at_s: float, total: float) -> None:
        self._points.append((at_s, total))

    def points(self) -> list[tuple[float, float]]:
        return list(self._points)


def rates(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(time, increase per second) between consecutive samples; a counter that went down
    (a new leader counts from its own log) counts as no increase, not a negative rate."""
    out = []
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t1 > t0:
            out.append((t1, max(v1 - v0, 0.0) / (t1 - t0)))
    return out


def sparkline_svg(series: Sequence[tuple[float, float]], label: str,
                  width_px: int = WIDTH_PX, height_px: int = HEIGHT_PX) -> str:
    """An <svg> of `series` (time, value): a polyline scaled to the box, and its peak."""
    inner_w, inner_h = width_px - 2 * MARGIN_PX, height_px - 2 * MARGIN_PX
    peak = max((value for _, value in series), default=0.0)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" '
            f'width="{width_px}" height="{height_px}" viewBox="0 0 {width_px} {height_px}">'
            f'<title>{label}</title>'
            f'<rect x="0" y="0" width="{width_px}" height="{height_px}" fill="#f7f7f7"/>')
    if len(series) < 2:
        return head + (f'<text x="{MARGIN_PX * 2}" y="{height_px // 2}" font-size="12">'
                       f'collecting samples…</text></svg>')
    t_first, t_last = series[0][0], series[-1][0]
    span_s = max(t_last - t_first, 1e-9)
    scale = peak if peak > 0 else 1.0
    coords = " ".join(
        f"{MARGIN_PX + (t - t_first) / span_s * inner_w:.1f},"
        f"{MARGIN_PX + inner_h - value / scale * inner_h:.1f}" for t, value in series)
    return head + (f'<polyline fill="none" stroke="#2a6ebb" stroke-width="1.5" '
                   f'points="{coords}"/>'
                   f'<text x="{MARGIN_PX * 2}" y="14" font-size="11">peak {peak:.1f}/s over '
                   f'{span_s:.0f} s</text></svg>')
