"""How well a residual network reproduces a flow, and how its step sizes follow the local
stiffness (docs/methods.md §14).

* ``final_rel_error``: ``‖x̂_L − x(T)‖ / ‖x(T)‖`` over the whole split (root of the summed
  squares), the flow's error; ``final_log_error`` its natural log (differences are log
  ratios); ``trajectory_rel_error`` the same over all ``L`` states.
* ``step_stiffness_corr``: the Pearson correlation, over every (sample, step) pair, of the
  step's mean step size ``mean_c Δ_{l,c}`` with ``log ρ_l``, ``ρ_l`` the local stiffness
  (spectral radius of the Jacobian) at the state the step starts from;
  ``step_stiffness_corr_trajectory`` the mean over samples of the same correlation along each
  trajectory (over its steps). A step size that shrinks where the system is stiff gives a
  negative correlation. Undefined (left out) for the plain step and where ``ρ`` is constant.
* ``step/<l>``: the mean step size of step ``l`` (1-based).
"""
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
from mmengine.evaluator import BaseMetric

from mmstiff.registry import METRICS


def _pearson(a, b):
    if a.std() == 0 or b.std() == 0:
        return float('nan')
    return float(np.corrcoef(a, b)[0, 1])


def step_stiffness_correlations(steps: np.ndarray, stiffness: np.ndarray) -> Tuple[float, float]:
    """The pooled and the mean per-trajectory correlation of step size with ``log ρ``.

    Args:
        steps (ndarray): ``(N, L)`` mean step sizes.
        stiffness (ndarray): ``(N, L)`` local stiffness ``ρ > 0``.

    Returns:
        tuple[float, float]: pooled (over ``N · L`` pairs), mean per trajectory (over the
        samples whose ``L`` values vary in both); nan where undefined.
    """
    steps, log_rho = np.asarray(steps, float), np.log(np.asarray(stiffness, float))
    if steps.shape != log_rho.shape or steps.ndim != 2:
        raise ValueError(f'steps {steps.shape} and stiffness {log_rho.shape} must both be '
                         '(samples, steps)')
    pooled = _pearson(steps.ravel(), log_rho.ravel())
    per_sample = [_pearson(s, k) for s, k in zip(steps, log_rho)]
    per_sample = [c for c in per_sample if np.isfinite(c)]
    return pooled, float(np.mean(per_sample)) if per_sample else float('nan')


@METRICS.register_module()
class FlowMetric(BaseMetric):
    """The flow's errors and the step sizes against the local stiffness (module docstring)."""

    default_prefix = 'flow'

    def process(self, data_batch: Any, data_samples: Sequence[dict]) -> None:
        """Keep each predicted sample's tensors (``states``, ``trajectory``, ``stiffness``,
        ``steps`` or None) detached, on the CPU, in float64."""
        for sample in data_samples:
            self.results.append({
                k: (None if v is None else v.detach().cpu().double())
                for k, v in sample.items()
            })

    def compute_metrics(self, results: List[dict]) -> Dict[str, float]:
        """The metrics of the module docstring from every kept sample: the errors always, the
        correlations and ``step/<l>`` where the model has step sizes."""
        states = torch.stack([r['states'] for r in results])  # (N, L, d)
        target = torch.stack([r['trajectory'] for r in results])
        final = float((states[:, -1] - target[:, -1]).norm() / target[:, -1].norm())
        metrics = dict(final_rel_error=final, final_log_error=float(np.log(final)),
                       trajectory_rel_error=float((states - target).norm() / target.norm()))
        if results[0]['steps'] is not None:
            steps = torch.stack([r['steps'] for r in results]).mean(dim=2)  # (N, L)
            rho = torch.stack([r['stiffness'] for r in results])
            pooled, per_trajectory = step_stiffness_correlations(steps.numpy(), rho.numpy())
            metrics.update(step_stiffness_corr=pooled,
                           step_stiffness_corr_trajectory=per_trajectory)
            for i, value in enumerate(steps.mean(dim=0).tolist()):
                metrics[f'step/{i + 1}'] = value
        return metrics
