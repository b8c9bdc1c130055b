"""Which residual blocks get a step-size adaptor (docs/methods.md §4, LTH4SA).

The lottery ticket hypothesis for self-attention says a few adaptors, well placed, give most of
the gain. Backbones therefore take two optional knobs and turn them into one boolean per block
with :func:`adaptor_placement`; a block whose flag is ``False`` builds no adaptor module at all
and computes the plain step ``x_t + f`` (Δ ≡ 1), so it costs nothing.
"""
from collections.abc import Sequence
from typing import List, Optional

from mmstiff.utils.checks import check_indices


def _check_sequence(name, value, length, what):
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f'{name}={value!r} is not supported; expected None or a sequence of '
                         f'{length} {what} (one per stage)')
    if len(value) != length:
        raise ValueError(f'{name}={value!r} has {len(value)} entries; expected {length} '
                         f'(one per stage, the backbone has {length} stages)')


def adaptor_placement(
        stage_blocks: Sequence[int], adaptor_stages: Optional[Sequence[bool]] = None,
        adaptor_blocks: Optional[Sequence[Optional[Sequence[int]]]] = None) -> List[List[bool]]:
    """One boolean per block: does this block carry a step-size adaptor?

    Args:
        stage_blocks (Sequence[int]): number of blocks in each stage, e.g. ``(3, 4, 6, 3)``.
        adaptor_stages (Sequence[bool], optional): one flag per stage; ``None`` selects every
            stage.
        adaptor_blocks (Sequence[Sequence[int] | None], optional): one entry per stage, the
            indices of the blocks of that stage that get an adaptor (negative indices count
            from the end, ``-1`` is the last block); an entry of ``None`` selects every block of
            that stage. ``None`` selects every block of every chosen stage.

    Returns:
        list[list[bool]]: ``placement[i][j]`` is True when block ``j`` of stage ``i`` gets an
        adaptor, i.e. the stage is chosen by ``adaptor_stages`` and the block by
        ``adaptor_blocks``.

    Raises:
        ValueError: a mask or index list of the wrong length, a non-boolean stage flag, or a
            block index out of range; the message names the field and the bad value.

    Example:
        >>> adaptor_placement((2, 3, 2), adaptor_stages=(False, True, True),
        ...                   adaptor_blocks=([0], [-1], None))
        [[False, False], [False, False, True], [True, True]]
    """
    stage_blocks = [int(n) for n in stage_blocks]
    num_stages = len(stage_blocks)

    if adaptor_stages is None:
        adaptor_stages = [True] * num_stages
    _check_sequence('adaptor_stages', adaptor_stages, num_stages, 'bools')
    for flag in adaptor_stages:
        if not isinstance(flag, bool):
            raise ValueError(f'adaptor_stages={adaptor_stages!r} holds {flag!r}; expected '
                             'True or False for each stage')

    if adaptor_blocks is None:
        adaptor_blocks = [None] * num_stages
    _check_sequence('adaptor_blocks', adaptor_blocks, num_stages, 'block-index lists or None')

    placement = []
    for stage, (num_blocks, chosen,
                indices) in enumerate(zip(stage_blocks, adaptor_stages, adaptor_blocks)):
        if indices is None:
            selected = range(num_blocks)
        else:
            selected = check_indices(f'adaptor_blocks[{stage}]', indices, num_blocks,
                                     what=f'blocks of stage {stage}', alternatives=('None', ))
        placement.append([chosen and j in selected for j in range(num_blocks)])
    return placement
