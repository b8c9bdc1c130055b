"""Resuming an iteration-based run on another number of processes (docs/reliability.md).

MMEngine's ``IterBasedTrainLoop`` resumed at iteration ``i`` skips ``i`` batches on every rank,
whatever the number of processes that trained them. ``DefaultSampler`` deals the epoch's
permutation out to the ranks in turn, so a run of ``W`` processes with ``B`` samples per batch
has seen the first ``i · B · W`` positions of it; resumed on ``W'`` processes, skipping ``k``
batches per rank passes over the first ``k · B' · W'`` positions. The same samples are passed
over when ``k = i · B · W / (B' · W')`` (:func:`batches_to_skip`).
:class:`~mmstiff.engine.hooks.SafeCheckpointHook` records ``W`` and ``B`` in every checkpoint's
meta and, on resume, skips the difference and says so.
"""
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

if TYPE_CHECKING:
    from mmengine.runner import Runner

#: keys of the checkpoint meta that record how the run was distributed
META_KEYS = ('world_size', 'train_batch_size')


def run_layout(runner: 'Runner') -> Dict[str, Optional[int]]:
    """``{'world_size': W, 'train_batch_size': B}`` of a runner (B: per process; None where
    its training loop is not built: MMEngine's ``runner.train_loop`` would build it)."""
    loader = getattr(getattr(runner, '_train_loop', None), 'dataloader', None)
    return dict(world_size=runner.world_size, train_batch_size=getattr(loader, 'batch_size', None))


def batches_to_skip(iters: int, saved: Dict[str, Any], current: Dict[str, Any]) -> int:
    """Batches per rank that pass over the samples ``iters`` iterations of the ``saved``
    layout saw, under the ``current`` one (rounded down: a few samples seen again rather than
    unseen ones skipped)."""
    seen = iters * saved['train_batch_size'] * saved['world_size']
    return seen // (current['train_batch_size'] * current['world_size'])


def layout_change(iters: int, saved: Dict[str, Any],
                  current: Dict[str, Optional[int]]) -> Optional[Tuple[int, str]]:
    """``(extra batches to skip per rank, message)`` when the run resumes at ``iters`` with
    another layout, None when nothing changed or the checkpoint did not record it."""
    if iters <= 0 or any(saved.get(k) is None or current.get(k) is None for k in META_KEYS):
        return None
    if all(saved[k] == current[k] for k in META_KEYS):
        return None
    skip = batches_to_skip(iters, saved, current)
    seen = iters * saved['train_batch_size'] * saved['world_size']
    message = (f"Resuming a run of {saved['world_size']} process(es) x {saved['train_batch_size']}"
               f" samples per batch with {current['world_size']} x "
               f"{current['train_batch_size']}: the {seen} samples already seen are skipped as "
               f'{skip} batches per process (MMEngine would skip {iters})')
    if skip < iters:
        message += (f'; {(iters - skip) * current["train_batch_size"] * current["world_size"]} '
                    'samples not yet seen in this pass are skipped with them, since MMEngine '
                    'skips one batch per iteration done')
    return max(skip - iters, 0), message
