"""How the study pages write numbers: fixed notation, digits from the number's uncertainty.

A value with an uncertainty (a standard deviation, an interval's half-width) gets the decimals
that show two significant digits of that uncertainty; a value alone gets four significant
digits. No exponents: ``-0.000002543``, never ``-2.543e-06``.
"""
import math
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

#: metric name prefix -> position in the tables
METRIC_ORDER = ('test/', 'val/', 'train/', 'tns/', 'spectrum/', 'freq_noise/', 'log/', 'derived/')


def decimals_for(scale: Optional[float]) -> Optional[int]:
    """Decimals that show two significant digits of ``scale`` (0 for scales of 10 or more)."""
    if scale is None or not math.isfinite(scale) or scale <= 0:
        return None
    return max(0, 1 - math.floor(math.log10(scale)))


def fmt(value: Optional[float], scale: Optional[float] = None) -> str:
    """``value`` in fixed notation: with the decimals of :func:`decimals_for` (``scale``), else
    four significant digits; ``–`` for None or a non-finite value."""
    if value is None or not math.isfinite(value):
        return '–'
    decimals = decimals_for(scale)
    if decimals is not None:
        text = f'{value:.{decimals}f}'
    elif value == 0:
        return '0'
    elif abs(value) >= 1e4:
        text = f'{value:.0f}'
    else:
        text = np.format_float_positional(value, precision=4, unique=False, fractional=False,
                                          trim='-')
    return '0' if float(text) == 0 and decimals is None else text


def fmt_signed(value: Optional[float], scale: Optional[float] = None) -> str:
    """:func:`fmt` with a ``+`` before a positive value (not before zero, a negative value or
    ``–``)."""
    text = fmt(value, scale)
    return text if text.startswith(('-', '–')) or float(text) == 0 else '+' + text


def fmt_interval(low: Optional[float], high: Optional[float], scale: Optional[float] = None) -> str:
    """``[low, high]`` formatted with :func:`fmt` (``scale``); a note in place of the interval
    where ``low`` is None (fewer than two seeds)."""
    if low is None:
        return '– (fewer than 2 seeds)'
    return f'[{fmt(low, scale)}, {fmt(high, scale)}]'


def fmt_p(value: Optional[float]) -> str:
    """A p-value with three decimals, ``< 0.001`` below that, ``–`` for None or a non-finite one."""
    if value is None or not math.isfinite(value):
        return '–'
    return '< 0.001' if value < 0.001 else f'{value:.3f}'


def p_text(value: Optional[float]) -> str:
    """``p = 0.123`` or ``p < 0.001``."""
    text = fmt_p(value)
    return f'p {text}' if text.startswith('<') else f'p = {text}'


def fmt_duration(seconds: Optional[float]) -> str:
    """``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds is None:
        return '–'
    if seconds < 60:
        return f'{seconds:.1f} s'
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f'{minutes} min {secs:02d} s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours} h {minutes:02d} min'


def code(text: str) -> str:
    """``text`` as Markdown inline code."""
    return f'`{text}`'


def cell(text: object) -> str:
    """``text`` as the content of a Markdown table cell: ``|`` escaped, newlines as spaces."""
    return str(text).replace('|', '\\|').replace('\n', ' ')


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> List[str]:
    """The lines of a Markdown table with the columns ``header`` and one line per row of
    ``rows``, every cell passed through :func:`cell`."""
    lines = [
        '| ' + ' | '.join(cell(h) for h in header) + ' |',
        '|' + '|'.join('---' for _ in header) + '|'
    ]
    lines += ['| ' + ' | '.join(cell(c) for c in row) + ' |' for row in rows]
    return lines


def metric_sort_key(name: str) -> Tuple[int, str]:
    """The sort key of a metric name: the position of its prefix in :data:`METRIC_ORDER`
    (unknown prefixes last), then the name."""
    for i, prefix in enumerate(METRIC_ORDER):
        if name.startswith(prefix):
            return (i, name)
    return (len(METRIC_ORDER), name)
