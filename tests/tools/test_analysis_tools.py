"""tools/analysis/*.py on tiny checkpoints trained here: JSON numbers and PNG figures."""
import json
import os.path as osp

import pytest
import torch
from analysis_runs import CNN, VIT, analysis_tool, train_tiny

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


@pytest.fixture(scope='module')
def cnn_run(tmp_path_factory, tiny_data):
    root = str(tmp_path_factory.mktemp('cnn'))
    return train_tiny(root, tiny_data('mnist'), CNN)


@pytest.fixture(scope='module')
def vit_run(tmp_path_factory, tiny_data):
    root = str(tmp_path_factory.mktemp('vit'))
    return train_tiny(root, tiny_data('mnist'), VIT)


def _check_pngs(out_dir, names):
    for name in names:
        path = osp.join(out_dir, name)
        assert osp.isfile(path), name
        with open(path, 'rb') as f:
            assert f.read(8) == PNG_MAGIC
        assert osp.getsize(path) > 5000  # a drawn figure, not an empty canvas


def _first_test_batch(config, checkpoint):
    """The model and the first preprocessed test batch, loaded independently of the tools."""
    import tempfile

    from mmengine.config import Config
    from mmengine.runner import Runner

    from mmstiff.utils.checkpoint import load_checkpoint_file
    cfg = Config.fromfile(config)
    # the Runner builds the model exactly as training did (top-level data_preprocessor included)
    cfg.work_dir = tempfile.mkdtemp()
    cfg.experiment_name = f'reference_{osp.basename(cfg.work_dir)}'
    model = Runner.from_cfg(cfg).model
    model.load_state_dict(load_checkpoint_file(checkpoint)['state_dict'])
    model.eval()
    data = next(iter(Runner.build_dataloader(cfg.test_dataloader)))
    return model, model.data_preprocessor(data, False)


@pytest.mark.slow
def test_tns_tool(cnn_run, tmp_path):
    config, checkpoint, _, _ = cnn_run
    out = str(tmp_path / 'tns')
    stdout = analysis_tool('tns.py', config, checkpoint, '--out-dir', out, '--num-batches', '1')
    assert 'TNS (network)' in stdout
    result = json.load(open(osp.join(out, 'tns.json')))
    names = [f'layer{i}.{j}' for i in range(1, 5) for j in range(2)]
    assert list(result['blocks']) == names and result['num_samples'] == 8
    _check_pngs(out, result['figures'])
    assert {'nsi_heatmap.png', 'tns_per_stage.png', 'nsi_per_block.png'} <= set(result['figures'])

    # recompute the trajectory block by block, Δ = the block's adaptor output
    model, data = _first_test_batch(config, checkpoint)
    b = model.backbone
    with torch.no_grad():
        x = b.relu(b.norm1(b.conv1(data['inputs'])))
        zeta = []
        for name in names:
            i, j = name[5], int(name[-1])
            block = getattr(b, f'layer{i}')[j]
            shortcut = x if block.downsample is None else block.downsample(x)
            f = block.norm2(block.conv2(block.relu(block.norm1(block.conv1(x)))))
            step = block.step_adaptor(shortcut, f)
            x_t = torch.relu(shortcut)  # the projected state, in the space of x_{t+1}
            x = block(x)
            zeta.append(((x - x_t) / step).flatten(1).norm(dim=1) / x_t.flatten(1).norm(dim=1))
            assert result['blocks'][name]['step_mean'] == pytest.approx(
                float(step.mean()), rel=1e-4)
    zeta = torch.stack(zeta, dim=1).double()
    peak, mu = zeta.max(dim=1).values, zeta.mean(dim=1)
    assert result['network_tns'] == pytest.approx(float(((peak / mu - 1) * peak).mean()), rel=1e-4)
    stage = zeta[:, :2]
    assert result['trajectories']['layer1']['tns'] == pytest.approx(
        float(((stage.max(1).values / stage.mean(1) - 1) * stage.max(1).values).mean()), rel=1e-4)


@pytest.mark.slow
def test_spectrum_tool_on_a_vit(vit_run, tmp_path):
    config, checkpoint, _, _ = vit_run
    out = str(tmp_path / 'spectrum')
    analysis_tool('spectrum.py', config, checkpoint, '--out-dir', out, '--num-batches', '1')
    result = json.load(open(osp.join(out, 'spectrum.json')))
    assert list(result['states']) == [
        'input', 'layers.0.msa', 'layers.0.mlp', 'layers.1.msa', 'layers.1.mlp'
    ]
    state = result['states']['layers.1.msa']
    assert state['freqs'] == [0.0, 0.5, 1.0]  # a 4 x 4 patch grid
    assert state['profile'][0] == 0.0 and state['dlogamp'] == state['profile'][-1]
    assert 0.0 <= state['hf_ratio'] <= 1.0 and 0.0 <= state['token_cos'] <= 1.0
    layer = result['attention']['layers.0']
    assert len(layer['spectral_response']) == 17  # class token + 16 patches
    # rows of a softmax map sum to 1: Λ maps the DC basis to itself, so Λ_00 = 1 and the
    # DC row has norm >= 1 (the mean over maps and heads keeps that bound)
    assert layer['spectral_response'][0] >= 1.0 - 1e-6
    _check_pngs(out, result['figures'])
    assert {
        'dlogamp_profiles.png', 'dlogamp_per_block.png', 'hf_ratio_per_block.png',
        'attention_spectra.png', 'cosine_similarity.png'
    } <= set(result['figures'])


@pytest.mark.slow
def test_freq_noise_tool(cnn_run, tmp_path):
    config, checkpoint, _, _ = cnn_run
    out = str(tmp_path / 'noise')
    analysis_tool('freq_noise.py', config, checkpoint, '--out-dir', out, '--num-batches', '2',
                  '--freqs', '0', '0.5', '1.0', '--eps', '0.5')
    result = json.load(open(osp.join(out, 'freq_noise.json')))
    assert result['num_samples'] == 16 and [b['freq'] for b in result['bands']] == [0, 0.5, 1.0]
    for band in result['bands']:
        assert band['drop'] == pytest.approx(result['clean_accuracy'] - band['accuracy'])
        assert band['num_bins'] > 0
    # clean accuracy of the first batch equals the Runner-built model's (normalised inputs)
    one = str(tmp_path / 'one')
    analysis_tool('freq_noise.py', config, checkpoint, '--out-dir', one, '--num-batches', '1',
                  '--freqs', '0')
    model, data = _first_test_batch(config, checkpoint)
    with torch.no_grad():
        preds = model(data['inputs'], data['data_samples'], mode='predict')
    correct = sum(int(p.pred_label[0] == p.gt_label[0]) for p in preds)
    assert json.load(open(osp.join(one, 'freq_noise.json')))['clean_accuracy'] == \
        pytest.approx(100.0 * correct / len(preds))
    # 28 x 28: the DC band holds one bin, the 1.0π band the bins with |k| = 14 on either axis
    assert result['bands'][0]['num_bins'] == 1
    assert result['bands'][2]['num_bins'] == 28 + 28 - 1
    _check_pngs(out, ['freq_noise.png'])


@pytest.mark.slow
def test_plot_logs_tool(cnn_run, tmp_path):
    _, _, work_dir, runner = cnn_run
    out = str(tmp_path / 'plots')
    analysis_tool('plot_logs.py', work_dir, '--out-dir', out)
    result = json.load(open(osp.join(out, 'curves.json')))
    nsi = result['series']['stiffness/nsi']['layer1.0']
    assert nsi['steps'] == [2, 4]
    assert nsi['values'][-1] == pytest.approx(
        runner.message_hub.get_scalar('stiffness/nsi/layer1.0').current())
    assert result['series']['freq/hf_ratio']['input']['steps'] == [2, 4]
    _check_pngs(out, result['figures'])
    assert {
        'stiffness_nsi.png', 'stiffness_tns.png', 'freq_hf_ratio.png', 'freq_dlogamp.png',
        'loss.png'
    } <= set(result['figures'])
