"""Stop a diverged training run, or skip its bad iterations, instead of training on in NaN.

Watches the loss every iteration, the adaptors' step sizes at an interval and every checkpoint
before it is written; what it does on each and what ``action='skip'`` costs:
docs/reliability.md, "Divergence".
"""
import math
import os.path as osp
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import torch
from mmengine.hooks import Hook, LoggerHook
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapperDict

from mmstiff.analysis.blocks import step_sources
from mmstiff.errors import MmstiffError
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_non_negative_int, check_positive_int

if TYPE_CHECKING:
    from mmengine.runner import Runner

ACTIONS = ('stop', 'skip')
#: MessageHub runtime-info key of the number of skipped iterations (kept in checkpoints).
SKIPPED_KEY = 'divergence/skipped_iters'
#: interval of the step-size check when the run has no LoggerHook.
DEFAULT_INTERVAL = 50
#: checkpoint entries whose tensors must be finite.
WEIGHT_ENTRIES = ('state_dict', 'ema_state_dict')


class DivergenceError(RuntimeError, MmstiffError):
    """Training diverged: a loss, a step size or a weight is not finite."""


def _is_bad(value):
    """Whether a logged output (a number or a floating-point tensor) holds a non-finite value."""
    if torch.is_tensor(value):
        if not value.is_floating_point():
            return False
        return not math.isfinite(value.item()) if value.numel() == 1 else not bool(
            torch.isfinite(value).all())
    if isinstance(value, (int, float)):
        return not math.isfinite(value)
    return False


def non_finite_losses(outputs: Optional[dict]) -> List[str]:
    """The names of the loss values in ``outputs`` that are not finite."""
    if not isinstance(outputs, dict):
        return []
    names = ['loss'] if 'loss' in outputs else [k for k in outputs if 'loss' in k]
    return [name for name in names if _is_bad(outputs[name])]


def non_finite_tensors(state_dict: Dict[str, Any]) -> List[str]:
    """The names of the floating-point tensors of ``state_dict`` with a non-finite value."""
    return [
        name for name, value in state_dict.items() if torch.is_tensor(value)
        and value.is_floating_point() and not bool(torch.isfinite(value).all())
    ]


def _show(names, limit=5):
    shown = ', '.join(names[:limit])
    return shown + (f' and {len(names) - limit} more' if len(names) > limit else '')


@HOOKS.register_module()
class DivergenceHook(Hook):
    """Stop training (or skip the optimizer step) when a loss, step size or weight is not finite.

    Args:
        action (str): ``'stop'`` (default) or ``'skip'``; see the module docstring.
        max_skips (int): with ``'skip'``, the number of skipped iterations tolerated over the
            run; one more stops it. Default 10.
        interval (int, optional): check the adaptors' step sizes every ``interval``
            iterations. Default: the ``LoggerHook``'s interval (50 without one).
    """

    # after the LoggerHook (BELOW_NORMAL) has logged the iteration, before the CheckpointHook
    # (VERY_LOW) saves it
    priority = 'LOW'

    def __init__(self, action: str = 'stop', max_skips: int = 10, interval: Optional[int] = None):
        if action not in ACTIONS:
            raise ValueError(f'action={action!r} is not supported; expected one of {ACTIONS}')
        self.action = action
        self.max_skips = check_non_negative_int('max_skips', max_skips)
        self.interval = check_positive_int('interval', interval, optional=True)
        self._adaptors = []  # (name, module) of the model's step-size sources
        self._flags = {}  # adaptor name -> device bool tensor: a non-finite Δ was seen
        self._handles = []
        self._step_handles = []
        self._step_skipped = False

    # -- set-up ---------------------------------------------------------------------------
    def before_train(self, runner: 'Runner') -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        if self.interval is None:
            loggers = [hook for hook in runner.hooks if isinstance(hook, LoggerHook)]
            self.interval = loggers[0].interval if loggers else DEFAULT_INTERVAL
        names = {id(module): name for name, module in model.named_modules()}
        self._adaptors = [(names[id(module)], module) for module in step_sources(model)]
        if self.action == 'skip':
            wrappers = (
                runner.optim_wrapper.values()
                if isinstance(runner.optim_wrapper, OptimWrapperDict) else [runner.optim_wrapper])
            self._step_handles = [
                w.optimizer.register_step_pre_hook(self._skip_non_finite_step) for w in wrappers
            ]

    def after_train(self, runner: 'Runner') -> None:
        for handle in self._step_handles:
            handle.remove()
        self._step_handles = []

    # -- skipping ------------------------------------------------------------------------
    def _skip_non_finite_step(self, optimizer, args, kwargs):
        """Optimizer step pre-hook: drop every gradient when their total norm is not finite."""
        params = [p for group in optimizer.param_groups for p in group['params']]
        grads = [p.grad for p in params if p.grad is not None]
        if not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads))):
            return
        for p in params:
            p.grad = None  # the optimizer leaves parameters without a gradient untouched
        self._step_skipped = True

    # -- step sizes ----------------------------------------------------------------------
    def _record_step(self, name):

        def hook(module, args, output):
            if module.training and torch.is_tensor(output) and output.is_floating_point():
                bad = ~torch.isfinite(output).all()
                seen = self._flags.get(name)
                self._flags[name] = bad if seen is None else seen | bad

        return hook

    def before_train_iter(self, runner: 'Runner', batch_idx: int,
                          data_batch: Optional[Union[dict, tuple, list]] = None) -> None:
        self._step_skipped = False
        if self._adaptors and self.every_n_train_iters(runner, self.interval):
            # parameters as the iteration starts (after the step they would all be non-finite
            # once one gradient was, hiding where it started); Δ as the forward pass makes it
            for name, module in self._adaptors:
                params = [~torch.isfinite(p).all() for p in module.parameters()]
                if params:
                    self._flags[name] = torch.stack(params).any()
            self._handles = [
                module.register_forward_hook(self._record_step(name))
                for name, module in self._adaptors
            ]

    def _non_finite_adaptors(self):
        """Adaptors whose parameters or Δ were not finite in this iteration, in the order of
        the model (one device read)."""
        if not self._handles:
            return []
        for handle in self._handles:
            handle.remove()
        self._handles = []
        names = [name for name, _ in self._adaptors if name in self._flags]
        flags, self._flags = [self._flags[name] for name in names], {}
        if not flags:
            return []
        bad = torch.stack([f.to(flags[0].device) for f in flags]).tolist()
        return [name for name, is_bad in zip(names, bad) if is_bad]

    # -- checks --------------------------------------------------------------------------
    def after_train_iter(self, runner: 'Runner', batch_idx: int,
                         data_batch: Optional[Union[dict, tuple, list]] = None,
                         outputs: Optional[dict] = None) -> None:
        iteration = runner.iter + 1
        losses = non_finite_losses(outputs)
        adaptors = self._non_finite_adaptors()
        if self.action == 'skip' and (self._step_skipped or losses):
            skipped = runner.message_hub.get_info(SKIPPED_KEY, 0) + 1
            runner.message_hub.update_info(SKIPPED_KEY, skipped)
            what = (f'the loss is not finite ({_values(outputs, losses)})'
                    if losses else 'the gradients are not finite')
            runner.logger.warning(f'Iteration {iteration}: {what}; its optimizer step was skipped '
                                  f'({skipped} skipped, max_skips={self.max_skips}).')
            if skipped > self.max_skips:
                self._stop(
                    runner, f'{skipped} iterations had non-finite losses or gradients, '
                    f'more than max_skips={self.max_skips}; the last one was iteration '
                    f'{iteration}')
            return
        found = []
        if losses:
            found.append(f'the loss is not finite ({_values(outputs, losses)})')
        if adaptors:
            found.append(f'the step sizes Δ (or parameters) of the adaptors {_show(adaptors)} '
                         f'are not finite (first in the forward pass: {adaptors[0]})')
        if found:
            self._stop(runner, f'at iteration {iteration}, ' + ' and '.join(found))

    def before_save_checkpoint(self, runner: 'Runner', checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        bad = [
            name if entry == 'state_dict' else f'{entry}.{name}' for entry in WEIGHT_ENTRIES
            for name in non_finite_tensors(checkpoint.get(entry) or {})
        ]
        if bad:
            self._stop(
                runner, f'the model holds non-finite values ({_show(bad, 3)}) at the '
                f'checkpoint of iteration {meta.get("iter")} (epoch '
                f'{meta.get("epoch")}), which was therefore not written')

    def _stop(self, runner, reason):
        last = _last_checkpoint(runner.work_dir)
        kept = (f'The last checkpoint is {last}.' if last else 'No checkpoint had been written.')
        message = (f'Training diverged: {reason}. {kept} Lower the learning rate, or skip such '
                   "iterations with divergence=dict(action='skip', max_skips=N) in the config.")
        runner.logger.error(message)
        raise DivergenceError(message)


def _values(outputs, names):
    """``'loss=nan, ...'`` for a message (``non-finite`` for a tensor of several values)."""

    def value(v):
        return (v.item() if v.numel() == 1 else 'non-finite') if torch.is_tensor(v) else v

    return ', '.join(f'{name}={value(outputs[name])}' for name in names)


def _last_checkpoint(work_dir):
    """The path ``work_dir/last_checkpoint`` names, or None."""
    marker = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(marker):
        return None
    with open(marker) as f:
        return f.read().strip() or None
