"""Log the neural stiffness of the training trajectory, and its adjoint.

docs/methods.md §5; StepNet paper, Appendices B (NSI, TNS) and D (NSI against step size). The
adjoint ``a_t = ∂L/∂x_t`` at every step's two ends comes from the training backward pass, through
gradient hooks on the recorded states (docs/methods.md §16).
"""
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union

import torch

from mmstiff.analysis import (ScratchBuffer, kernel_step_sums, mean_step_size, pending_norms,
                              stiffness_norms)
from mmstiff.analysis.quantities import declaration_of
from mmstiff.analysis.trajectory import StepRecord
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_positive_int
from .diagnostic_hook import TRAJECTORY, TrajectoryDiagnosticHook
from .step_stiffness import StepStiffness, resolve_steps, to_host
from .stiffness_summary import NETWORK, summarise_iterations

if TYPE_CHECKING:
    from mmengine.runner import Runner

#: the per-step NSI, which ``log_blocks=True`` adds to the console line
NSI_GROUP = 'stiffness/nsi'


@HOOKS.register_module()
class StiffnessHook(TrajectoryDiagnosticHook):
    """Per-block NSI and per-trajectory stiffness statistics of the training batch.

    Every ``interval`` iterations, on that iteration's training batch, the hook computes per
    residual step ``t`` and sample the NSI ``ζ_t = ||(x_{t+1} - x_t)/Δ_t|| / ||x_t||`` (Δ_t from
    the block's step-size adaptor, 1 without one) and logs, averaged over the batch and the
    ranks:

    * ``stiffness/nsi/<block>``: mean NSI of each step (transformer layers: ``<layer>.msa`` and
      ``<layer>.mlp``);
    * ``stiffness/step/<block>``: mean step size Δ_t, for steps with an adaptor;
    * ``stiffness/nsi_step_corr/<block>``: Pearson correlation over the batch between NSI and
      mean(Δ_t) (Appendix D), for steps with an adaptor whose Δ varies over the batch;
    * ``stiffness/mu/<stage>``, ``stiffness/ratio/<stage>``, ``stiffness/tns/<stage>``: the
      trajectory mean μ, the max/mean ratio ζ*/μ and the TNS (closed form) of each stage
      (``layer1``, ...) and of the whole network (``network``);
    * with ``adjoint=True`` (the default), from the same iteration's backward pass:
      ``stiffness/adjoint/<block>`` and ``stiffness/adjoint_end/<block>``, the mean over the
      batch of the per-sample ``‖∂L/∂x_t‖`` and ``‖∂L/∂x_{t+1}‖`` (divided by the AMP loss
      scale), and ``stiffness/adjoint_gain/<block>``, the mean of ``‖a_t‖ / ‖a_{t+1}‖``: how
      much the step amplifies (> 1) or damps (< 1) the gradient on its way back.

    Args:
        interval (int): record every ``interval`` training iterations. Default 50.
        blocks (list[str], optional): fnmatch patterns of the blocks to record (default: all).
        module (str, optional): submodule of the model to record. Default ``'backbone'``.
        level (str): ``'branch'`` (default: a transformer layer is two steps), ``'block'`` or
            ``'both'``.
        log_blocks (bool): also print the per-block NSI on the console (the JSON log and the
            visualizer backends always get them). Default False.
        num_samples (int, optional): compute on the first ``num_samples`` samples of the batch
            only; the cost of a recorded iteration shrinks in proportion, the statistics over
            the batch (TNS, the NSI-Δ correlation) get noisier. None (default): the whole
            batch.
        block_types (dict, optional): block classes the built-in tables do not know
            (``dict(MyBlock='conv')``; docs/diagnostics.md, "Which modules are steps").
        adjoint (bool): also log the adjoint norms and gains from the recorded iteration's own
            backward pass (one gradient hook per recorded state; no extra pass). Default True.
        dashboard (bool): draw the run's dashboard at checkpoints and at the end of training,
            where no other diagnostics hook before it or ``DashboardHook`` does. Default True.

    Example:
        >>> custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=50)]
    """

    # a fused step's own pass gives the NSI's sums of squares (docs/methods.md §0)
    step_sums = True

    def __init__(self, interval: int = 50, blocks: Optional[Union[str, Sequence[str]]] = None,
                 module: Optional[str] = 'backbone', level: str = 'branch',
                 log_blocks: bool = False, num_samples: Optional[int] = None,
                 block_types: Optional[Union[dict, Sequence[str]]] = None, adjoint: bool = True,
                 dashboard: bool = True):
        if not isinstance(adjoint, bool):
            raise ValueError(f'adjoint={adjoint!r} is not supported; expected True or False')
        self.adjoint = adjoint
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='stiffness', block_types=block_types, dashboard=dashboard)
        self._loss_scale = None  # the AMP loss scale of the recorded iteration's backward
        self.log_blocks = bool(log_blocks)
        self.num_samples = check_positive_int('num_samples', num_samples, optional=True)
        # the difference x_{t+1} - x_t of every step of a recorded pass is written here
        self._scratch = ScratchBuffer()

    def reduce_step(self, record: StepRecord) -> StepStiffness:
        """The record of one step, made during the forward pass (the recorder already kept
        only the first ``num_samples`` samples). Where the step's sums of squares are there (a
        fused step's own pass, or the NSI kernel over the states on the GPU), the norms, and a
        tensor Δ_t's per-sample mean, wait in the record for :meth:`compact`, which takes those
        of every step of the iteration at once; else the norms come from the states, with
        PyTorch's operators."""
        step = record.step
        varies = torch.is_tensor(step)
        sums = record.sums
        if sums is None:
            sums = kernel_step_sums(record.x_t, record.x_next, step)
        pending = None if sums is None else pending_norms(sums, step)
        step_size = None
        if step is not None and not (pending is not None and varies):
            step_size = mean_step_size(step, record.x_t.shape[0], record.x_t.device)
        if pending is not None:
            return StepStiffness(None, None, step_size, varies, sums=pending,
                                 adjoint=record.adjoint)
        norms = stiffness_norms(record.x_t, record.x_next, step, scratch=self._scratch)
        return StepStiffness(norms.slope, norms.state, step_size, varies, adjoint=record.adjoint)

    def before_train_iter(self, runner: 'Runner', batch_idx: int,
                          data_batch: Optional[Union[dict, tuple, list]] = None) -> None:
        super().before_train_iter(runner, batch_idx, data_batch)
        if self.adjoint and self.recorders and self.recorders[TRAJECTORY].active:
            # the scale this iteration's backward runs with: the scaler changes it only in the
            # optimizer step, after the backward pass
            self._loss_scale = loss_scale_of(runner)

    def compact(self, outputs: Dict[str, dict]) -> Dict[str, dict]:
        """``outputs`` with every step's record resolved after the backward pass
        (:func:`~mmstiff.engine.hooks.step_stiffness.resolve_steps`): the waiting norms and the
        adjoint norms, divided by the iteration's AMP loss scale."""
        steps = outputs.get(TRAJECTORY)
        resolved = resolve_steps(steps, self._loss_scale)
        return outputs if resolved is steps else dict(outputs, **{TRAJECTORY: resolved})

    def end_pass(self) -> None:
        """Release the difference buffer at the end of a recorded forward pass."""
        # the difference buffer is not held through the backward pass
        self._scratch.release()

    def summarise_rows(self, rows: Sequence[Dict[str, dict]]) -> List[Dict[str, float]]:
        """The scalars of several recorded iterations: their records resolved (those of the
        hook's own iterations are already; a recorder's outputs summarised directly are
        resolved here), brought to the host in one transfer and summarised
        (:func:`~mmstiff.engine.hooks.stiffness_summary.summarise_iterations`)."""
        iterations = to_host([self.compact(outputs)[TRAJECTORY] for outputs in rows])
        return summarise_iterations(iterations, self.adjoint)

    def format_summary(self, scalars: Dict[str, float]) -> str:
        """One console line: the scalars whose declaration
        (:mod:`mmstiff.analysis.quantities`) asks for the console, and with ``log_blocks`` the
        per-step NSI too."""
        items = []
        for key, value in scalars.items():
            declared = declaration_of(key)
            if declared is not None and (declared.console or
                                         (self.log_blocks and declared.group == NSI_GROUP)):
                items.append(f'{key}: {value:.4g}')
        return '  '.join(items)


def loss_scale_of(runner: 'Runner') -> Optional[Union[torch.Tensor, float]]:
    """The loss scale the runner's next backward pass runs with: that of an enabled AMP
    ``GradScaler`` of its optimizer wrapper (a copy of the scaler's own tensor, read without a
    synchronisation), or None (no AMP, or AMP without loss scaling)."""
    wrappers = getattr(runner, 'optim_wrapper', None)
    if hasattr(wrappers, 'values') and not hasattr(wrappers, 'loss_scaler'):
        wrappers = list(wrappers.values())  # an OptimWrapperDict
    for wrapper in wrappers if isinstance(wrappers, list) else [wrappers]:
        scaler = getattr(wrapper, 'loss_scaler', None)
        enabled = getattr(scaler, 'is_enabled', None)
        if scaler is None or not callable(enabled) or not enabled():
            continue
        scale = getattr(scaler, '_scale', None)
        if torch.is_tensor(scale):
            return scale.detach().clone()
        # the scaler makes its scale at its first use, from its initial value
        return float(getattr(scaler, '_init_scale', 1.0))
    return None


__all__ = ['StiffnessHook', 'loss_scale_of', 'NETWORK']
