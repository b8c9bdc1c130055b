"""Log the top eigenvalue of the training-loss Hessian during training (docs/methods.md §12).

How-do-ViTs paper (Park and Kim, ICLR 2022, https://arxiv.org/abs/2202.06709), Fig. 4: the
Hessian max eigenvalues of the ``ℓ2``-regularised training loss on augmented batches, by power
iteration. The formulas are in :mod:`mmstiff.analysis.hessian`; this hook only decides when,
on which batch and with which loss.
"""
import logging
import random
from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseModel, is_model_wrapper

from mmstiff.analysis.hessian import (LANCZOS_STEPS, MAX_ITER, METHODS, TOL,
                                      double_backward_kernels, hessian_eigenvalues)
from mmstiff.analysis.landscape import l2_penalty, param_weight_decays, preserved_buffers
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_positive_int
from .diagnostic_hook import diagnostics_log_name, extend_history
from .scalar_rows import reduce_scalars_across_ranks

if TYPE_CHECKING:
    from mmengine.optim import OptimWrapper, OptimWrapperDict
    from mmengine.runner import Runner

PREFIX = 'hessian'


def optimizer_param_groups(
        optim_wrapper: Optional[Union['OptimWrapper', 'OptimWrapperDict']]) -> List[dict]:
    """The ``param_groups`` of every optimizer of an ``OptimWrapper`` (or an
    ``OptimWrapperDict``), in one list."""
    if optim_wrapper is None:
        return []
    optimizer = getattr(optim_wrapper, 'optimizer', None)
    if optimizer is not None and hasattr(optimizer, 'param_groups'):
        return list(optimizer.param_groups)
    groups = []
    if hasattr(optim_wrapper, 'values'):
        for wrapper in optim_wrapper.values():
            groups.extend(optimizer_param_groups(wrapper))
    return groups


class _RandomState:
    """Save the torch (CPU and the model's CUDA device), numpy and Python random states on
    entry and put them back on exit: the extra pass draws nothing from the training's RNGs."""

    def __init__(self, device):
        self.cuda = device.type == 'cuda'
        self.device = device

    def __enter__(self):
        self.saved = (torch.get_rng_state(), np.random.get_state(), random.getstate(),
                      torch.cuda.get_rng_state(self.device) if self.cuda else None)
        return self

    def __exit__(self, *exc):
        cpu, np_state, py_state, cuda = self.saved
        torch.set_rng_state(cpu)
        np.random.set_state(np_state)
        random.setstate(py_state)
        if self.cuda:
            torch.cuda.set_rng_state(cuda, self.device)
        return False


@HOOKS.register_module()
class HessianHook(Hook):
    """The Hessian eigenvalues of largest magnitude of the training loss, every ``interval``
    iterations, on that iteration's batch.

    On a recorded iteration, before the iteration trains, the hook runs one extra forward pass
    of the (unwrapped) model on the iteration's batch (preprocessed with the training
    augmentations, batch augments such as Mixup included), adds the ``ℓ2`` term
    ``Σ (λ_i / 2) ‖w_i‖²`` of the optimizer's weight decays, and finds the eigenvalues by power
    iteration on Hessian-vector products (double backward through that one graph). The model
    stays in training mode; its buffers (BN running statistics) and the torch / numpy / Python
    random states are restored afterwards, so the training run is the one it would be without
    the hook. Values are averaged over the ranks (each rank uses its own batch) and logged at
    ``step = iter + 1``:

    * ``hessian/eigenvalue_1`` .. ``hessian/eigenvalue_<num_eigs>``: the eigenvalues of largest
      magnitude (``eigenvalue_1`` is the paper's max eigenvalue);
    * ``hessian/min_eigenvalue``: the most negative eigenvalue, with ``negative=True``;
    * ``hessian/loss``: the loss the Hessian is of (training loss + ``ℓ2`` term);
    * ``hessian/products``: Hessian-vector products spent;
    * ``hessian/converged``: 1 where every power iteration met its stopping rule, else 0 (under
      DDP the share of ranks where they did).

    It is off unless added to ``custom_hooks``: one recorded iteration costs a forward pass, a
    backward pass with graph, and one double backward per product (docs/diagnostics.md lists
    measured figures).

    Args:
        interval (int): compute every ``interval`` training iterations. Default 100.
        num_eigs (int): eigenvalues to find. Default 1.
        negative (bool): also find the most negative eigenvalue (power iteration on
            ``H − |λ_1| I``, or the smallest Ritz value). Default False.
        method (str): ``'power'`` (the paper's power iteration) or ``'lanczos'`` (Ritz values
            of ``lanczos_steps`` Lanczos steps; see :mod:`mmstiff.analysis.hessian`).
        max_iter (int): Hessian-vector products per eigenvalue at most (power). Default 100.
        tol (float): relative change of an eigenvalue at which it counts as converged (power).
            Default 1e-3.
        lanczos_steps (int): Lanczos steps (lanczos). Default 50.
        weight_decay (float, optional): the ``ℓ2`` coefficient of every parameter; None reads
            each parameter's decay from the runner's optimizer (its param groups).
        seed (int): seed of the power iteration's random start vectors (plus the iteration).
            Default 0.
    """

    priority = 'ABOVE_NORMAL'  # before the trajectory recorders start: they must not see it

    def __init__(self, interval: int = 100, num_eigs: int = 1, negative: bool = False,
                 method: str = 'power', max_iter: int = MAX_ITER, tol: float = TOL,
                 lanczos_steps: int = LANCZOS_STEPS, weight_decay: Optional[float] = None,
                 seed: int = 0):
        self.interval = check_positive_int('interval', interval)
        self.num_eigs = check_positive_int('num_eigs', num_eigs)
        if not isinstance(negative, bool):
            raise ValueError(f'negative={negative!r} is not supported; expected True or False')
        self.negative = negative
        if method not in METHODS:
            raise ValueError(f'method={method!r} is not supported; expected one of {METHODS}')
        self.method = method
        self.max_iter = check_positive_int('max_iter', max_iter)
        self.lanczos_steps = check_positive_int('lanczos_steps', lanczos_steps)
        if method == 'lanczos' and lanczos_steps < num_eigs:
            raise ValueError(f'lanczos_steps={lanczos_steps} is smaller than num_eigs='
                             f'{num_eigs}; expected at least as many steps as eigenvalues')
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
            raise ValueError(f'tol={tol!r} is not supported; expected a positive float')
        self.tol = float(tol)
        if weight_decay is not None and (isinstance(weight_decay, bool)
                                         or not isinstance(weight_decay,
                                                           (int, float)) or weight_decay < 0):
            raise ValueError(f'weight_decay={weight_decay!r} is not supported; expected None '
                             "(the optimizer's) or a float >= 0")
        self.weight_decay = weight_decay
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f'seed={seed!r} is not supported; expected an int')
        self.seed = seed

    def before_train(self, runner: 'Runner') -> None:
        max_iters = getattr(runner, 'max_iters', None)
        if isinstance(max_iters, int) and self.interval > max_iters:
            print_log(
                f'HessianHook: interval={self.interval} is larger than the {max_iters} '
                'training iterations; nothing will be computed', logger='current',
                level=logging.WARNING)

    def before_train_iter(self, runner: 'Runner', batch_idx: int,
                          data_batch: Optional[Union[dict, tuple, list]] = None) -> None:
        if data_batch is None or not self.every_n_train_iters(runner, self.interval):
            return
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        scalars = self.compute(model, data_batch, runner.iter,
                               optimizer_param_groups(getattr(runner, 'optim_wrapper', None)))
        self.write(runner, runner.iter + 1, scalars)

    # ------------------------------------------------------------------ computing
    def decays(self, params: Sequence[torch.Tensor], param_groups: Sequence[dict]) -> List[float]:
        """The ``ℓ2`` coefficient of each of ``params``: ``weight_decay`` for all where it was
        given, else each parameter's decay in the optimizer's ``param_groups``."""
        if self.weight_decay is not None:
            return [float(self.weight_decay)] * len(params)
        return param_weight_decays(params, param_groups)

    def compute(self, model: BaseModel, data_batch: Union[dict, tuple, list], iteration: int,
                param_groups: Sequence[dict] = ()) -> Dict[str, float]:
        """The scalars of one batch (this rank's): ``{name: float}`` without the prefix."""
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f'{type(model).__name__} has no parameter that requires grad; '
                             'HessianHook needs at least one')
        device = params[0].device
        generator = torch.Generator().manual_seed(self.seed + iteration)
        with _RandomState(device), preserved_buffers(model), double_backward_kernels(model):
            data = model.data_preprocessor(data_batch, True)
            if isinstance(data, dict):
                losses = model(**data, mode='loss')
            else:
                losses = model(*data, mode='loss')
            loss, _ = model.parse_losses(losses)
            loss = loss + l2_penalty(params, self.decays(params, param_groups))
            found = hessian_eigenvalues(loss, params, self.num_eigs, self.negative, self.max_iter,
                                        self.tol, generator, self.method, self.lanczos_steps)
        scalars = OrderedDict((f'eigenvalue_{i + 1}', float(v)) for i, v in enumerate(found.values))
        if self.negative:
            scalars['min_eigenvalue'] = float(found.most_negative)
        scalars['loss'] = float(loss.detach())
        scalars['products'] = float(found.iterations)
        scalars['converged'] = float(found.converged)
        return scalars

    # ------------------------------------------------------------------ logging
    def write(self, runner: 'Runner', step: int, scalars: Dict[str, float]) -> None:
        """Log ``scalars`` (names without the prefix) at ``step``: each averaged over the ranks
        whose value is finite (left out where none is), added to the visualizer (the diagnostics
        JSON log) and to the message hub's history, and printed on one console line; nothing is
        logged where no value is finite."""
        means = reduce_scalars_across_ranks(
            OrderedDict((f'{PREFIX}/{k}', v) for k, v in scalars.items())).means
        if not means:
            return
        # its own JSON log, as the other diagnostics hooks (see diagnostics_log_name)
        runner.visualizer.add_scalars(
            dict(means, iter=step, epoch=runner.epoch + 1), step=step,
            file_path=diagnostics_log_name(runner.timestamp, means))
        for name, value in means.items():
            extend_history(runner.message_hub, name, [value])
        runner.logger.info(f'Iter(train) [{step}] ' + '  '.join(f'{k}: {v:.4g}'
                                                                for k, v in means.items()))
