"""The warps a Triton program of a tile pass launches (:func:`tile_warps`): 8 for a full tile of
:data:`TILE_VALUES` values (16 for StepNet's backward), 4 below; every launcher of a tile or
column pass passes them."""
import pytest
import torch
from script_modules import load_script  # tests/

from mmstiff.utils.triton_launch import HAS_TRITON, TILE_VALUES, state_blocks, tile_warps


def test_a_full_tile_takes_eight_warps():
    assert TILE_VALUES == 2048
    # the tiles state_blocks picks on ResNet-50's first and last stage and on ViT-S tokens
    assert state_blocks(3136, 256, 1, 3136) == (1024, 2) and tile_warps(1024, 2) == 8
    assert state_blocks(49, 2048, 1, 49) == (64, 32) and tile_warps(64, 32) == 8
    assert state_blocks(197, 384, 384, 1) == (32, 64) and tile_warps(32, 64) == 8
    # a column pass over 2048 samples, one channel a program
    assert tile_warps(2048, 1) == 8
    # tiles a small state or a small batch leaves below TILE_VALUES
    assert state_blocks(4, 16, 1, 4) == (4, 16) and tile_warps(4, 16) == 4
    assert tile_warps(2, 512) == tile_warps(1024, 1) == 4
    # StepNet's backward takes 16 warps for a full tile
    assert tile_warps(64, 32, full=16) == 16 and tile_warps(2, 512, full=16) == 4


@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch on Linux)')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_every_tile_launch_passes_its_warps(dtype):
    """Each launch of the fused step's, the NSI sums' and the frequency sums' kernels (recorded on
    meta tensors at batch 2, 64 and 2048) launches the warps its tile calls for: 8 for the full
    tiles, which all of them have at batch 64 (16 for StepNet's backward), 4 for the smaller ones
    at batch 2."""
    resources = load_script('tools/benchmark/kernel_resources.py')
    launches = resources.every_launch(dtype, (2, 64, 2048))
    warps = {}
    for fn, _, _, kwargs in launches:
        if fn.__name__.startswith('_se_'):  # SE's kernels: blocks of (B, S, C), 4 warps
            assert 'num_warps' not in kwargs, fn.__name__
            continue
        rows = kwargs.get('BLOCK_N', kwargs.get('BLOCK_B'))
        values = rows * kwargs['BLOCK_C']
        full = 16 if fn.__name__ == '_phi_backward_kernel' else 8
        assert kwargs['num_warps'] == (full if values >= TILE_VALUES else 4), (fn.__name__, kwargs)
        warps.setdefault(fn.__name__, set()).add(kwargs['num_warps'])
    assert len(warps) == 11  # every tile and column kernel was seen
    assert all(8 in seen or 16 in seen for seen in warps.values()), warps
    assert any(4 in seen for seen in warps.values()), warps
