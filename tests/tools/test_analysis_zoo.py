"""The analysis tools on mmpretrain's own zoo configs (inherited from the wheel), with random
weights saved as the user's checkpoint: per-step JSON whose steps name their family, and the
figures."""
import json
import os.path as osp

import pytest
import torch
from analysis_runs import analysis_tool

pytest.importorskip('mmpretrain')

ZOO = {
    'convnext': ('mmpretrain::convnext/convnext-tiny_32xb128_in1k.py', 'ConvNeXt', 'stages.0.0'),
    'deit3': ('mmpretrain::deit3/deit3-small-p16_64xb64_in1k.py', 'DeiT3', 'layers.0.msa'),
    'poolformer':
    ('mmpretrain::poolformer/poolformer-s12_32xb128_in1k.py', 'PoolFormer', 'network.0.0.mlp'),
}


def _zoo_run(tmp_path, tiny_data, base):
    """A config inheriting ``base`` whose test split reads the tiny ImageNet, and a checkpoint
    of the model it builds with random weights."""
    from mmengine.config import Config

    from mmstiff.registry import MODELS
    root = tiny_data('imagenet')
    config = tmp_path / 'config.py'
    config.write_text(
        f'_base_ = {base!r}\n'
        f"test_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,\n"
        f"                       dataset=dict(data_root={root!r}))\n"
        "model = dict(backbone=dict(init_cfg=None))\n")
    cfg = Config.fromfile(str(config))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    checkpoint = tmp_path / 'random.pth'
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), str(checkpoint))
    return str(config), str(checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize('zoo', sorted(ZOO))
def test_tns_and_spectrum_tools_on_zoo_configs(zoo, tiny_data, tmp_path):
    base, family, step = ZOO[zoo]
    config, checkpoint = _zoo_run(tmp_path, tiny_data, base)
    out = str(tmp_path / 'tns')
    analysis_tool('tns.py', config, checkpoint, '--out-dir', out, '--num-batches', '1')
    result = json.load(open(osp.join(out, 'tns.json')))
    assert step in result['blocks'], sorted(result['blocks'])[:6]
    entry = result['blocks'][step]
    assert entry['family'] == family and entry['nsi_mean'] is not None
    assert result['network_tns'] is not None
    assert osp.isfile(osp.join(out, 'nsi_per_block.png'))
    out = str(tmp_path / 'spectrum')
    analysis_tool('spectrum.py', config, checkpoint, '--out-dir', out, '--num-batches', '1')
    spectrum = json.load(open(osp.join(out, 'spectrum.json')))
    assert step in spectrum['states'], sorted(spectrum['states'])[:6]


@pytest.mark.slow
def test_freq_noise_tool_on_an_efficientnet_config(tiny_data, tmp_path):
    config, checkpoint = _zoo_run(tmp_path, tiny_data,
                                  'mmpretrain::efficientnet/efficientnet-b0_8xb32_in1k.py')
    out = str(tmp_path / 'noise')
    analysis_tool('freq_noise.py', config, checkpoint, '--out-dir', out, '--num-batches', '1',
                  '--freqs', '0.1', '0.9')
    result = json.load(open(osp.join(out, 'freq_noise.json')))
    assert result, result
