"""Log frequency diagnostics of the training trajectory (METHODS.md §8)."""
import math
from collections import OrderedDict

from mmstiff.analysis import (AttentionRecorder, attention_column_cosine_similarity,
                              delta_log_amplitude, high_frequency_ratio, token_cosine_similarity,
                              tokens_to_maps)
from mmstiff.registry import HOOKS
from .diagnostic_hook import TrajectoryDiagnosticHook, _check_positive_int

INPUT = 'input'


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
    * ``freq/dlogamp/<block>``: Δ log amplitude at 1.0π of the feature map (how-do-vits-work
      Fig. 8); square maps only;
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
        self.num_samples = _check_positive_int('num_samples', num_samples)
        if num_extra_tokens is not None and (isinstance(num_extra_tokens, bool) or
                                             not isinstance(num_extra_tokens, int) or
                                             num_extra_tokens < 0):
            raise ValueError(f'num_extra_tokens={num_extra_tokens!r} is not supported; '
                             'expected None or an int >= 0')
        self.num_extra_tokens = num_extra_tokens
        self.attention = bool(attention)
        self._target = None
        self._first = None

    def build_recorders(self, target):
        self._target = target
        if self.num_extra_tokens is None:
            extra = getattr(target, 'num_extra_tokens', 0)
            self.num_extra_tokens = extra if isinstance(extra, int) else 0
        recorders = super().build_recorders(target)
        self._first = recorders[0].record_names[0]
        if self.attention:
            try:
                recorders.append(AttentionRecorder(target, reduce=self._reduce_attention,
                                                   select=self.blocks))
            except ValueError:
                pass  # no transformer layer: nothing to log
        return recorders

    def _state_metrics(self, x):
        """The metrics of one state (the recorder kept its first ``num_samples`` samples)."""
        metrics = {'hf_ratio': float(high_frequency_ratio(x).double().mean())}
        maps = None
        if x.dim() == 4:
            maps = x
        elif x.dim() == 3:
            metrics['token_cos'] = float(token_cosine_similarity(x).mean())
            num_patches = x.shape[1] - self.num_extra_tokens
            grid = _grid_of(self._target, num_patches) if num_patches > 0 else None
            if grid is not None:
                maps = tokens_to_maps(x, self.num_extra_tokens, grid)
        if maps is not None and maps.shape[-1] == maps.shape[-2] and maps.shape[-1] > 1:
            metrics['dlogamp'] = delta_log_amplitude(maps)
        else:
            metrics['dlogamp'] = math.nan
        return metrics

    def reduce_step(self, record):
        out = {record.name: self._state_metrics(record.x_next)}
        if record.name == self._first:
            out[INPUT] = self._state_metrics(record.x_t)
        return out

    @staticmethod
    def _reduce_attention(name, attn):
        return float(attention_column_cosine_similarity(attn).mean())

    def summarise(self, outputs):
        per_state = OrderedDict()
        for calls in outputs[0].values():
            for call in calls:
                for state, metrics in call.items():
                    per_state.setdefault(state, []).append(metrics)
        order = ([INPUT] if INPUT in per_state else []) + [k for k in per_state if k != INPUT]
        scalars = OrderedDict()
        for metric in ('hf_ratio', 'dlogamp', 'token_cos'):
            for state in order:
                values = [m[metric] for m in per_state[state] if metric in m]
                if values:
                    scalars[f'{metric}/{state}'] = sum(values) / len(values)
        for attention in outputs[1:]:
            for layer, values in attention.items():
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
