"""Log frequency diagnostics of the training trajectory (docs/methods.md §8).

During the recorded forward pass each state is reduced to a few numbers per recorded sample
(its high-frequency ratio, the two ends of its spectrum's diagonal, its token cosine
similarity), left on the model's device; when the recorded iterations are written, the Δ log
amplitudes and the means over the samples of every state of every iteration are computed
together, one stacked call per group of equal shapes, and brought to the host in one transfer.
Iterations that wait for their write while holding more than :data:`PENDING_BINS_BYTES` of
spectrum ends have their Δ log amplitudes computed then (all of them in one batched call), so
that many iterations between two writes do not hold the ends of every channel.
"""
import math
from collections import OrderedDict
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

import torch

from mmstiff.analysis import (AttentionRecorder, attention_column_cosine_similarity,
                              delta_log_amplitudes, frequency_sums, high_frequency_ratio_of,
                              operator_frequency_summary, softmax_column_cosine_similarity,
                              token_cosine_similarity)
from mmstiff.analysis.trajectory import RecorderBase, StepRecord, TrajectoryRecorder
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_non_negative_int, check_positive_int
from .diagnostic_hook import TRAJECTORY, TrajectoryDiagnosticHook
from .scalar_rows import BatchedReductions

#: the name of the input state of the first recorded step among the steps' names.
INPUT = 'input'
#: role of the recorder of the transformer layers' attention maps.
ATTENTION = 'attention'
#: the per-state metrics, in the order they are logged.
STATE_METRICS = ('hf_ratio', 'dlogamp', 'token_cos')
#: bytes of spectrum ends (:attr:`StateFrequency.end_bins`) the recorded iterations waiting
#: for their write may hold on the device before their Δ log amplitudes are computed
PENDING_BINS_BYTES = 64 * 2**20


class StateFrequency(NamedTuple):
    """What :class:`FrequencyHook` keeps of one state: per recorded sample, on its device.

    Attributes:
        hf_ratio (Tensor | None): ``(n,)`` ``||HC[X]||_F / ||X||_F`` (its mean, 0-d, once the
            iteration is compacted); None while ``hf_squares`` wait.
        end_bins (Tensor | None): ``(n, C, 3)`` the two ends of the diagonal of each channel's
            spectrum (:func:`~mmstiff.analysis.diagonal_end_bins`), from which the Δ log
            amplitude at 1.0π is computed; None where the state has no square map, and once
            the iteration is compacted.
        token_cos (Tensor | None): ``(n,)`` the token cosine similarity; None for feature maps.
        dlogamp (Tensor | None): the Δ log amplitude (0-d), once the recorded iteration is
            compacted (:meth:`FrequencyHook.compact`); None before, or without a square map.
    """
    hf_ratio: Optional[torch.Tensor]
    end_bins: Optional[torch.Tensor]
    token_cos: Optional[torch.Tensor]
    dlogamp: Optional[torch.Tensor] = None
    #: ``(2, n, C)`` the sums of squares the ratio is taken from, where the GPU's kernel read
    #: the state (:func:`~mmstiff.analysis.frequency_sums`): the ratio waits for the write
    hf_squares: Optional[torch.Tensor] = None


def _hf_ratio_mean(stack):
    """``(k, 2, n, C)`` sums of squares -> the float64 mean over the samples of each state's
    high-frequency ratio."""
    return high_frequency_ratio_of(stack.double()).mean(dim=-1)


def _mean(stack):
    """``(k, ...)`` -> the float64 mean of each of the ``k`` tensors."""
    return stack.double().reshape(stack.shape[0], -1).mean(dim=1)


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
        block_types (dict, optional): block classes the built-in tables do not know
            (``dict(MyBlock='conv')``; docs/diagnostics.md, "Which modules are steps").
        dashboard (bool): draw the run's dashboard at checkpoints and at the end of training,
            where no other diagnostics hook before it or ``DashboardHook`` does. Default True.

    Example:
        >>> custom_hooks = [dict(type='mmstiff.FrequencyHook', interval=100)]
    """

    def __init__(self, interval: int = 100, blocks: Optional[Union[str, Sequence[str]]] = None,
                 module: Optional[str] = 'backbone', level: str = 'branch', num_samples: int = 8,
                 num_extra_tokens: Optional[int] = None, attention: bool = True,
                 block_types: Optional[Union[dict, Sequence[str]]] = None, dashboard: bool = True):
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='freq', block_types=block_types, dashboard=dashboard)
        self.num_samples = check_positive_int('num_samples', num_samples)
        self.num_extra_tokens = check_non_negative_int('num_extra_tokens', num_extra_tokens,
                                                       optional=True)
        self.attention = bool(attention)
        self._target = None
        self._first = None
        self._grids = {}  # number of patch tokens -> their grid, or None
        self._softmax_layers = set()  # layers whose attention maps are softmax outputs
        self._uncompacted = []  # outputs of the waiting iterations that still hold end bins
        self._uncompacted_bytes = 0

    def extra_recorders(self, target: torch.nn.Module,
                        trajectory: TrajectoryRecorder) -> Dict[str, RecorderBase]:
        """With ``attention``, ``{'attention': recorder}``: an
        :class:`~mmstiff.analysis.AttentionRecorder` of the selected transformer layers of
        ``target`` that keeps M_attn per sample; ``{}`` without ``attention`` or where ``target``
        has no transformer layer. Also reads what the reductions need: ``target``'s
        ``num_extra_tokens`` where it was not given, and the name of ``trajectory``'s first step."""
        self._target = target
        self._grids = {}
        if self.num_extra_tokens is None:
            extra = getattr(target, 'num_extra_tokens', 0)
            self.num_extra_tokens = extra if isinstance(extra, int) else 0
        self._first = trajectory.record_names[0]
        self._softmax_layers = set()
        if self.attention:
            try:
                recorder = AttentionRecorder(target, reduce=self._reduce_attention,
                                             select=self.blocks, num_samples=self.num_samples)
            except ValueError:
                return {}  # no transformer layer: nothing to log
            self._softmax_layers = recorder.softmax_layers
            return {ATTENTION: recorder}
        return {}

    def _state_metrics(self, x):
        """The :class:`StateFrequency` of one state (the recorder kept its first
        ``num_samples`` samples): a few small tensors, no transfer to the host."""
        grid = token_cos = None
        if x.dim() == 3 and x.shape[1] > 1:  # one token (a pooled stage) has no pair
            token_cos = token_cosine_similarity(x)
            num_patches = x.shape[1] - self.num_extra_tokens
            grid = self._grids.get(num_patches, False)
            if grid is False:
                grid = self._grids[num_patches] = (
                    _grid_of(self._target, num_patches) if num_patches > 0 else None)
        sums = frequency_sums(x, self.num_extra_tokens, grid)
        if sums is not None:  # the GPU's kernel: the ratio waits for the write
            return StateFrequency(None, sums.end_bins, token_cos, hf_squares=sums.squares)
        hf_ratio, bins = operator_frequency_summary(x, self.num_extra_tokens, grid)
        return StateFrequency(hf_ratio, bins, token_cos)

    def reduce_step(self, record: StepRecord) -> Dict[str, StateFrequency]:
        """``{step name: StateFrequency}`` of the state after the step, plus ``{'input': ...}`` of
        the state before it for the first recorded step; small tensors left on the device."""
        out = {record.name: self._state_metrics(record.x_next)}
        if record.name == self._first:
            out[INPUT] = self._state_metrics(record.x_t)
        return out

    def _reduce_attention(self, name, attn):
        """M_attn per sample, ``(B,)``, averaged when written; maps read from a softmax take
        the O(N²) form."""
        if name in self._softmax_layers:
            return softmax_column_cosine_similarity(attn)
        return attention_column_cosine_similarity(attn)

    def compact(self, outputs: Dict[str, dict]) -> Dict[str, dict]:
        """Keep the recorded iteration's spectrum ends for its write, unless the waiting
        iterations' ends then exceed :data:`PENDING_BINS_BYTES`: the Δ log amplitudes of every
        state of all of them are then computed, in one batched call on the device, and they
        wait with a few numbers per state instead of the ends of every channel. Below that,
        the write computes them with the other values: one stacked call per shape for all
        the waiting iterations instead of one per iteration (docs/diagnostics.md)."""
        self._uncompacted.append(outputs)
        self._uncompacted_bytes += sum(t.nelement() * t.element_size()
                                       for calls in outputs[TRAJECTORY].values() for call in calls
                                       for metrics in call.values()
                                       for t in (metrics.end_bins, metrics.hf_squares)
                                       if t is not None)
        if self._uncompacted_bytes > PENDING_BINS_BYTES:
            self._compact_waiting()
        return outputs

    def _compact_waiting(self):
        """The Δ log amplitudes of every state of the waiting iterations, in one batched call
        on the device, in place of their spectrum ends."""
        batch = BatchedReductions()
        found = []  # (the step call's dict, state, field, value index)
        for outputs in self._uncompacted:
            for calls in outputs[TRAJECTORY].values():
                for call in calls:
                    for state, metrics in call.items():
                        if metrics.end_bins is not None:
                            found.append((call, state, 'dlogamp',
                                          batch.add(metrics.end_bins, delta_log_amplitudes)))
                        if metrics.hf_squares is not None:  # its mean over the samples
                            found.append((call, state, 'hf_ratio',
                                          batch.add(metrics.hf_squares, _hf_ratio_mean)))
        values = batch.compute_on_device()
        for call, state, field, index in found:
            done = dict(end_bins=None) if field == 'dlogamp' else dict(hf_squares=None)
            call[state] = call[state]._replace(**done, **{field: values[index]})
        self._uncompacted, self._uncompacted_bytes = [], 0

    def summarise_rows(self, rows: Sequence[Dict[str, dict]]) -> List[Dict[str, float]]:
        """The scalars of several recorded iterations: each metric of each state, averaged
        over the recorded samples and then over the calls of its step, the input first; then
        M_attn of each transformer layer. Every value of every row is computed in one
        :class:`BatchedReductions` (one stacked call per group of equal shapes, one transfer;
        the Δ log amplitudes of the iterations that kept their spectrum ends among them)."""
        self._uncompacted, self._uncompacted_bytes = [], 0  # written now
        batch = BatchedReductions()
        layouts = [self._layout(outputs, batch) for outputs in rows]
        values = batch.compute()
        summaries = []
        for layout in layouts:
            scalars = OrderedDict()
            for key, indices in layout:
                picked = [math.nan if i is None else values[i] for i in indices]
                scalars[key] = sum(picked) / len(picked)
            summaries.append(scalars)
        return summaries

    @staticmethod
    def _layout(outputs, batch):
        """``[(key, [value index per call])]`` of one recorded iteration, its reductions added
        to ``batch`` (index None: the Δ log amplitude of a state without a square map)."""
        per_state = OrderedDict()
        for calls in outputs[TRAJECTORY].values():
            for call in calls:
                for state, metrics in call.items():
                    per_state.setdefault(state, []).append(metrics)
        order = ([INPUT] if INPUT in per_state else []) + [k for k in per_state if k != INPUT]
        layout = []
        for state in order:  # hf_ratio
            layout.append((f'hf_ratio/{state}', [
                batch.add(m.hf_ratio, _mean) if m.hf_ratio is not None else batch.add(
                    m.hf_squares, _hf_ratio_mean) for m in per_state[state]
            ]))
        for state in order:  # dlogamp: NaN (left out of the log) without a square map
            layout.append((f'dlogamp/{state}', [
                batch.add(m.dlogamp, _mean) if m.dlogamp is not None else
                None if m.end_bins is None else batch.add(m.end_bins, delta_log_amplitudes)
                for m in per_state[state]
            ]))
        for state in order:  # token_cos: token states only
            indices = [
                batch.add(m.token_cos, _mean) for m in per_state[state] if m.token_cos is not None
            ]
            if indices:
                layout.append((f'token_cos/{state}', indices))
        for layer, values in outputs.get(ATTENTION, {}).items():
            layout.append((f'attn_cos/{layer}', [batch.add(v, _mean) for v in values]))
        return layout

    def format_summary(self, scalars: Dict[str, float]) -> str:
        """One console line: the first and last per-state ``freq/hf_ratio`` and ``freq/dlogamp``
        of ``scalars`` (in their order); empty where it has neither."""
        hf = [v for k, v in scalars.items() if k.startswith('freq/hf_ratio/')]
        dla = [v for k, v in scalars.items() if k.startswith('freq/dlogamp/')]
        items = []
        if hf:
            items.append(f'freq/hf_ratio: first {hf[0]:.4g} last {hf[-1]:.4g}')
        if dla:
            items.append(f'freq/dlogamp: first {dla[0]:.4g} last {dla[-1]:.4g}')
        return '  '.join(items)
