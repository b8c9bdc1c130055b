"""Every scalar the diagnostics hooks log, declared once.

A :class:`Quantity` says a logged key's name pattern, what it is (title, symbol, unit), which
hook logs it, whether a non-finite value is expected, where its formula is written, and how the
readers show it: the dashboard's heat strips, the study collector's profiles and per-stage
means, the study figures. The hooks warn on non-finite values of the non-optional ones; the
collector (``studies/collect.py``), the study figures (``visualization/study_figures.py``), the
dashboard, ``tools/analysis/plot_logs.py`` and the table in docs/diagnostics.md
("Logged quantities", written by ``tools/misc/quantity_table.py``) read this table, so a new
quantity is its formula, the line of the hook that logs it and one declaration here. A test
fails when a hook logs a key no declaration matches.
"""
import functools
import re
from typing import Dict, List, NamedTuple, Optional, Tuple

#: what a key's placeholder stands for, and the pattern it matches
PLACES = {
    'step': ('one residual step, in trajectory order', r'[^/]+'),
    'state': ('the state after a step (and `input`, the first step\'s input)', r'[^/]+'),
    'layer': ('one transformer layer', r'[^/]+'),
    'trajectory': ('a stage (`layer1`, ...) or the whole network (`network`)', r'[^/]+'),
    'k': ('a rank, from 1', r'[1-9][0-9]*'),
}
_PLACE = re.compile(r'\{(' + '|'.join(PLACES) + r')\}')


class Quantity(NamedTuple):
    """One logged quantity.

    Attributes:
        key (str): the logged names, with one placeholder of :data:`PLACES` where there is one
            name per step, state, layer, trajectory or rank: ``'stiffness/nsi/{step}'``.
        title (str): what it is, as a figure's title.
        symbol (str): its short name on an axis or colour bar: ``'NSI ζ'``.
        unit (str): its unit: ``'dimensionless'``, ``'fraction'``, ...
        hook (str): the hook that logs it.
        section (str): where its formula is written (``'docs/methods.md §5'``).
        optional (bool): a non-finite value is expected where it is undefined (a correlation
            over a constant Δ, a gain with no gradient), and not warned about.
        strip (str, optional): the dashboard draws it as a heat strip, steps against
            iterations, on this colour scale: ``'log'``, ``'linear'`` or ``'gain'`` (log₂ of
            a ratio, centred on 1).
        profile (str, optional): a study record keeps its last logged value per step or state
            as the profile of this name (``'log/nsi'``).
        tool_profile (str, optional): the same quantity's profile from an analysis tool on
            the test split (``'tns/nsi'``), which a study figure prefers to the training log's.
        figure (str, optional): the study figure that overlays the variants' profiles.
        stage_means (bool): a study record also keeps its mean over each stage's steps, of the
            last recorded iteration and over training.
        last_state (bool): a study record also keeps the value at the last state as a metric.
        reference (float, optional): a value its figures mark with a line (0 for a correlation).
        console (bool): StiffnessHook's console line shows it (the other hooks print their
            own summary).
    """
    key: str
    title: str
    symbol: str
    unit: str
    hook: str
    section: str
    optional: bool = False
    strip: Optional[str] = None
    profile: Optional[str] = None
    tool_profile: Optional[str] = None
    figure: Optional[str] = None
    stage_means: bool = False
    last_state: bool = False
    console: bool = False
    reference: Optional[float] = None

    @property
    def group(self) -> str:
        """The key up to its placeholder: ``'stiffness/nsi'``; the whole key without one."""
        return self.key.split('/{')[0].split('_{')[0]

    @property
    def along(self) -> Optional[str]:
        """The placeholder's name (``'step'``), or None for a single scalar."""
        found = _PLACE.search(self.key)
        return found.group(1) if found else None

    @property
    def namespace(self) -> str:
        """The first component of the key: the hook's prefix (``'stiffness'``)."""
        return self.key.split('/')[0]

    @property
    def metric(self) -> str:
        """The second component, without the placeholder: ``'nsi'``."""
        return self.group.split('/')[1]

    @property
    def label(self) -> str:
        """Its axis label: ``'NSI ζ (dimensionless)'``."""
        return f'{self.symbol} ({self.unit})'

    @property
    def pattern(self) -> 're.Pattern':
        """The regular expression its logged names match in full."""
        return _key_pattern(self.key)


@functools.lru_cache(maxsize=None)
def _key_pattern(key):
    parts = _PLACE.split(key)
    text = ''.join(
        re.escape(part) if i % 2 == 0 else f'(?P<{part}>{PLACES[part][1]})'
        for i, part in enumerate(parts))
    return re.compile(text + r'\Z')


_STIFF = 'StiffnessHook'
_FREQ = 'FrequencyHook'
_HESS = 'HessianHook'
_LOSS_PER_STATE = 'loss units per state unit'

#: every logged quantity, in the order the readers show them
QUANTITIES: Tuple[Quantity, ...] = (
    Quantity('stiffness/nsi/{step}', 'Neural stiffness index per step', 'NSI ζ', 'dimensionless',
             _STIFF, 'docs/methods.md §5', strip='log', profile='log/nsi', tool_profile='tns/nsi',
             figure='nsi_per_block.png'),
    Quantity('stiffness/step/{step}', 'Mean step size per step', 'mean step size Δ',
             'dimensionless', _STIFF, 'docs/methods.md §0, §1', strip='linear', profile='log/step',
             tool_profile='tns/step', figure='step_size_per_block.png'),
    Quantity('stiffness/nsi_step_corr/{step}', 'NSI–step-size correlation per step',
             'Pearson r of NSI and Δ over the batch', 'dimensionless', _STIFF,
             'StepNet paper, Appendix D', optional=True, profile='log/nsi_step_corr',
             figure='nsi_step_corr_per_block.png', stage_means=True, reference=0.0),
    Quantity('stiffness/mu/{trajectory}', 'Trajectory mean NSI μ', 'μ = mean_t ζ_t',
             'dimensionless', _STIFF, 'docs/methods.md §5', console=True),
    Quantity('stiffness/ratio/{trajectory}', 'Max/mean stiffness ratio', 'ζ*/μ', 'dimensionless',
             _STIFF, 'docs/methods.md §5', console=True),
    Quantity('stiffness/tns/{trajectory}', 'Total neural stiffness (training batch)', 'TNS',
             'dimensionless', _STIFF, 'docs/methods.md §5', console=True),
    Quantity('freq/hf_ratio/{state}', 'High-frequency ratio of the state after each step',
             '‖HC[X]‖ / ‖X‖', 'fraction', _FREQ, 'docs/methods.md §8', strip='linear',
             profile='log/hf_ratio', tool_profile='spectrum/hf_ratio',
             figure='hf_ratio_per_block.png', last_state=True),
    Quantity('freq/dlogamp/{state}', 'High-frequency log amplitude of the state after each step',
             'Δ log amplitude at 1.0π', 'log units', _FREQ, 'docs/methods.md §8', optional=True,
             profile='log/dlogamp', tool_profile='spectrum/dlogamp', figure='dlogamp_per_block.png',
             reference=0.0),
    Quantity('freq/token_cos/{state}', 'Token cosine similarity of the state after each step',
             'M_feat, mean |cos|', 'dimensionless', _FREQ, 'docs/methods.md §8', optional=True,
             profile='log/token_cos', figure='token_cos_per_block.png', last_state=True),
    Quantity('freq/attn_cos/{layer}', 'Attention-column cosine similarity per layer',
             'M_attn, mean |cos|', 'dimensionless', _FREQ, 'docs/methods.md §8', optional=True),
    Quantity('stiffness/adjoint/{step}', 'Adjoint norm at the start of each step', '‖∂L/∂x_t‖',
             _LOSS_PER_STATE, _STIFF, 'docs/methods.md §16', optional=True),
    Quantity('stiffness/adjoint_end/{step}', 'Adjoint norm at the end of each step', '‖∂L/∂x_t+1‖',
             _LOSS_PER_STATE, _STIFF, 'docs/methods.md §16', optional=True),
    Quantity('stiffness/adjoint_gain/{step}', 'Adjoint gain per step (backward pass)',
             '‖a_t‖ / ‖a_t+1‖', 'dimensionless', _STIFF, 'docs/methods.md §16', optional=True,
             strip='gain'),
    Quantity('hessian/eigenvalue_{k}', 'Hessian eigenvalue of largest magnitude', 'λ_k',
             'loss units per parameter unit²', _HESS, 'docs/methods.md §12'),
    Quantity('hessian/min_eigenvalue', 'Most negative Hessian eigenvalue', 'λ_min',
             'loss units per parameter unit²', _HESS, 'docs/methods.md §12'),
    Quantity('hessian/loss', 'Loss the Hessian is of (training loss + ℓ2 term)', 'loss',
             'loss units', _HESS, 'docs/methods.md §12'),
    Quantity('hessian/products', 'Hessian-vector products spent', 'products', 'count', _HESS,
             'docs/methods.md §12'),
    Quantity('hessian/converged', 'Share of ranks whose power iterations converged', 'converged',
             'fraction', _HESS, 'docs/methods.md §12'),
)

#: the quantities by group (``'stiffness/nsi'``)
BY_GROUP: Dict[str, Quantity] = {q.group: q for q in QUANTITIES}
#: the first components of every logged key: one per hook
NAMESPACES: Tuple[str, ...] = tuple(dict.fromkeys(q.namespace for q in QUANTITIES))
#: what every logged key starts with: a row holding one is a diagnostics hook's row
PREFIXES: Tuple[str, ...] = tuple(f'{namespace}/' for namespace in NAMESPACES)


def declaration_of(key: str) -> Optional[Quantity]:
    """The :class:`Quantity` whose pattern ``key`` (a logged name) matches, or None."""
    group = BY_GROUP.get(key.rsplit('/', 1)[0])
    if group is not None and group.pattern.match(key):
        return group
    for quantity in QUANTITIES:
        if quantity.pattern.match(key):
            return quantity
    return None


def of_hook(hook: str) -> List[Quantity]:
    """The quantities ``hook`` (a class name) logs, in table order."""
    return [q for q in QUANTITIES if q.hook == hook]


def along(*places: str) -> List[Quantity]:
    """The quantities with one name per ``places`` (``'step'``, ``'state'``, ...)."""
    return [q for q in QUANTITIES if q.along in places]


def markdown_table() -> str:
    """The table of docs/diagnostics.md, "Logged quantities": one row per quantity."""
    lines = [
        '| key | what it is | symbol | unit | hook | formula | non-finite expected |',
        '|---|---|---|---|---|---|---|',
    ]
    for q in QUANTITIES:
        symbol = q.symbol.replace('|', '\\|')
        lines.append(f'| `{q.key}` | {q.title} | {symbol} | {q.unit} | `{q.hook}` | '
                     f'{q.section} | {"yes" if q.optional else "no"} |')
    places = [f'- `{{{name}}}`: {what}' for name, (what, _) in PLACES.items()]
    return '\n'.join(lines + ['', 'Placeholders:', ''] + places) + '\n'


__all__ = [
    'Quantity', 'QUANTITIES', 'BY_GROUP', 'NAMESPACES', 'PREFIXES', 'PLACES', 'declaration_of',
    'of_hook', 'along', 'markdown_table'
]
