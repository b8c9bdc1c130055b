"""Log frequency diagnostics of the training trajectory (docs/methods.md §8)."""
import math
from collections import OrderedDict
from typing import NamedTuple, Optional

from mmstiff.analysis import (AttentionRecorder, attention_column_cosine_similarity,
                              delta_log_amplitude, high_frequency_ratio, token_cosine_similarity,
                              tokens_to_maps)
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_non_negative_int, check_positive_int
from .diagnostic_hook import TRAJECTORY, TrajectoryDiagnosticHook

#: the name of the input state of the first recorded step among the steps' names.
INPUT = 'input'
#: role of the recorder of the transformer layers' attention maps.
ATTENTION = 'attention'
#: the per-state metrics, in the order they are logged.
STATE_METRICS = ('hf_ratio', 'dlogamp', 'token_cos')


class StateFrequency(NamedTuple):
    """The frequency metrics of one state, averaged over the recorded samples.

    Attributes:
        hf_ratio (float): ``||HC[X]||_F / ||X||_F``.
        dlogamp (float): Δ log amplitude at 1.0π; ``nan`` where the state has no square map.
        token_cos (float | None): the token cosine similarity; None for feature maps.
    """
    hf_ratio: float
    dlogamp: float
    token_cos: Optional[float]


def _grid_of(target, num_patches):
    grid = getattr(target, 'patch_resolution', None)
    if isinstance(grid, (tuple, list)) and len(grid) == 2 and grid[0] * grid[1] == num_patches:
        return tuple(grid)
    side = math.isqrt(num_patches)
    return (side, side) if side * side == num_patches else None


@HOOKS.register_module()
class FrequencyHook(TrajectoryDiagnosticHook):
    """High-frequency ratio, Δ log amplitude and (transformers) cosine similarities per step.

    Every ``interval`` iterations, on that iteration's training batch, for the state after each
    residual step (transformer layers: after the MSA and after the MLP step) and for the input
    of the first recorded step (``input``), logs averaged over the first ``num_samples``
    samples of the batch and over the ranks:

    * ``freq/hf_ratio/<block>``: ``||HC[X]||_F / ||X||_F`` (anti-oversmoothing Appendix G.3);
    * ``freq/dlogamp/<block>``: Δ log amplitude at 1.0π of the feature map (How-do-ViTs
      paper, Fig. 8); square maps only;
    * ``freq/token_cos/<block>``: M_feat, the token cosine similarity (token states only);
    * ``freq/attn_cos/<layer>``: M_attn, the attention-column cosine similarity of each
      transformer layer (with ``attention=True``).

    Args:
        interval (int): record every ``interval`` training iterations. Default 100.
        blocks (list[str], optional): fnmatch patterns of the blocks to record (default: all).
        module (str, optional): submodule of the model to record. Default ``'backbone'``.
        level (str): ``'branch'`` (default), ``'block'`` or ``'both'``.
        num_samples (int): samples of the batch the metrics are computed on (they are
            averages over samples; a few keep the hook cheap). Default 8.
        num_extra_tokens (int, optional): leading non-patch tokens (class token) dropped before
            the Fourier transform of token states; read from the recorded module's
            ``num_extra_tokens`` when None (mmpretrain ViTs), else 0.
        attention (bool): also log M_attn of transformer layers. Default True.

    Example:
        >>> custom_hooks = [dict(type='mmstiff.FrequencyHook', interval=100)]
    """

    optional_metrics = ('dlogamp', 'token_cos', 'attn_cos')

    def __init__(self, interval=100, blocks=None, module='backbone', level='branch',
                 num_samples=8, num_extra_tokens=None, attention=True):
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='freq')
        self.num_samples = check_positive_int('num_samples', num_samples)
        self.num_extra_tokens = check_non_negative_int('num_extra_tokens', num_extra_tokens,
                                                       optional=True)
        self.attention = bool(attention)
        self._target = None
        self._first = None

    def extra_recorders(self, target, trajectory):
        self._target = target
        if self.num_extra_tokens is None:
            extra = getattr(target, 'num_extra_tokens', 0)
            self.num_extra_tokens = extra if isinstance(extra, int) else 0
        self._first = trajectory.record_names[0]
        if self.attention:
            try:
                return {ATTENTION: AttentionRecorder(target, reduce=self._reduce_attention,
                                                     select=self.blocks)}
            except ValueError:
                pass  # no transformer layer: nothing to log
        return {}

    def _state_metrics(self, x):
        """The :class:`StateFrequency` of one state (the recorder kept its first
        ``num_samples`` samples)."""
        hf_ratio = float(high_frequency_ratio(x).double().mean())
        maps = token_cos = None
        if x.dim() == 4:
            maps = x
        elif x.dim() == 3:
            token_cos = float(token_cosine_similarity(x).mean())
            num_patches = x.shape[1] - self.num_extra_tokens
            grid = _grid_of(self._target, num_patches) if num_patches > 0 else None
            if grid is not None:
                maps = tokens_to_maps(x, self.num_extra_tokens, grid)
        if maps is not None and maps.shape[-1] == maps.shape[-2] and maps.shape[-1] > 1:
            dlogamp = delta_log_amplitude(maps)
        else:
            dlogamp = math.nan
        return StateFrequency(hf_ratio, dlogamp, token_cos)

    def reduce_step(self, record):
        out = {record.name: self._state_metrics(record.x_next)}
        if record.name == self._first:
            out[INPUT] = self._state_metrics(record.x_t)
        return out

    @staticmethod
    def _reduce_attention(name, attn):
        return float(attention_column_cosine_similarity(attn).mean())

    def summarise_rows(self, rows):
        return [self._summarise_iteration(outputs) for outputs in rows]

    @staticmethod
    def _summarise_iteration(outputs):
        """The scalars of one recorded iteration: each metric of each state, averaged over
        the calls of its step, the input first; then M_attn of each transformer layer."""
        per_state = OrderedDict()
        for calls in outputs[TRAJECTORY].values():
            for call in calls:
                for state, metrics in call.items():
                    per_state.setdefault(state, []).append(metrics)
        order = ([INPUT] if INPUT in per_state else []) + [k for k in per_state if k != INPUT]
        scalars = OrderedDict()
        for metric in STATE_METRICS:
            for state in order:
                values = [getattr(m, metric) for m in per_state[state]]
                values = [v for v in values if v is not None]
                if values:
                    scalars[f'{metric}/{state}'] = sum(values) / len(values)
        for layer, values in outputs.get(ATTENTION, {}).items():
            scalars[f'attn_cos/{layer}'] = sum(values) / len(values)
        return scalars

    def format_summary(self, scalars):
        hf = [v for k, v in scalars.items() if k.startswith('freq/hf_ratio/')]
        dla = [v for k, v in scalars.items() if k.startswith('freq/dlogamp/')]
        items = []
        if hf:
            items.append(f'freq/hf_ratio: first {hf[0]:.4g} last {hf[-1]:.4g}')
        if dla:
            items.append(f'freq/dlogamp: first {dla[0]:.4g} last {dla[-1]:.4g}')
        return '  '.join(items)
