"""tools/analysis/hessian.py, loss_landscape.py and feature_variance.py through their command
lines, on a tiny CNN (mmstiff's StepResNet_CIFAR) and a tiny upstream ViT, against values
computed here independently: an explicit Hessian, the loss and the filter-normalised
directions rebuilt by hand, the states read with plain forward hooks."""
import json
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
WEIGHT_DECAY = 5e-4

CONFIG = '''
_base_ = ['mmpretrain::_base_/default_runtime.py']
data_root = {data_root!r}
model = dict(
    type='ImageClassifier',
    backbone={backbone},
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels={channels},
              loss=dict(type='CrossEntropyLoss', use_soft=True)))
# Mixup in training: the Hessian and the landscape are measured with the training augmentation
data_preprocessor = dict(num_classes=10, mean=[33.3], std=[78.6], to_rgb=False,
                         batch_augments=dict(augments=[dict(type='Mixup', alpha=0.8)]))
train_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                        dataset=dict(type='MNIST', data_root=data_root, split='train',
                                     pipeline=[dict(type='RandomFlip', prob=0.5),
                                               dict(type='PackInputs')]),
                        sampler=dict(type='DefaultSampler', shuffle=True))
test_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                       dataset=dict(type='MNIST', data_root=data_root, split='test',
                                    pipeline=[dict(type='PackInputs')]),
                       sampler=dict(type='DefaultSampler', shuffle=False))
test_evaluator = dict(type='Accuracy', topk=(1, ))
test_cfg = dict()
val_dataloader = val_cfg = val_evaluator = None
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay={wd}),
                     paramwise_cfg=dict(norm_decay_mult=0.0))
train_cfg = dict(by_epoch=False, max_iters=2)
param_scheduler = []
randomness = dict(seed=0)  # the same weights whatever ran before
'''
CNN = ("dict(type='mmstiff.StepResNet_CIFAR', depth=18, in_channels=1, stem_channels=4, "
       "base_channels=4, zero_init_residual=False, adaptor=dict(type='mmstiff.StepNetAdaptor'))",
       32)
# about a thousand parameters: its Hessian can be formed explicitly
VIT = ("dict(type='VisionTransformer', arch=dict(embed_dims=4, num_layers=1, num_heads=1, "
       "feedforward_channels=8), img_size=28, patch_size=14, in_channels=1, "
       "out_type='featmap')", 4)


def _write(root, data_root, backbone):
    """Config and checkpoint of a freshly built model (the tools only need weights)."""
    from mmengine.config import Config
    from mmengine.runner import Runner
    config = osp.join(root, 'config.py')
    with open(config, 'w') as f:
        f.write(
            CONFIG.format(data_root=data_root, backbone=backbone[0], channels=backbone[1],
                          wd=WEIGHT_DECAY))
    cfg = Config.fromfile(config)
    cfg.work_dir = osp.join(root, 'work_dir')
    cfg.experiment_name = f'build_{osp.basename(root)}'
    torch.manual_seed(0)
    model = Runner.from_cfg(cfg).model
    with torch.no_grad():  # away from the initialisation's zeros and ones
        for name, p in model.named_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    checkpoint = osp.join(root, 'model.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), checkpoint)
    return config, checkpoint


@pytest.fixture(scope='module')
def cnn(tmp_path_factory, tiny_data):
    return _write(str(tmp_path_factory.mktemp('cnn')), tiny_data('mnist'), CNN)


@pytest.fixture(scope='module')
def vit(tmp_path_factory, tiny_data):
    return _write(str(tmp_path_factory.mktemp('vit')), tiny_data('mnist'), VIT)


def _tool(run_tool, name, *args):
    proc = run_tool(osp.join('tools', 'analysis', name), *args, '--device', 'cpu')
    return proc.stdout


def _check_pngs(out_dir, names):
    for name in names:
        path = osp.join(out_dir, name)
        with open(path, 'rb') as f:
            assert f.read(8) == PNG_MAGIC, name
        assert osp.getsize(path) > 5000, name  # a drawn figure, not an empty canvas


def _model_and_test_batch(config, checkpoint):
    """The model and its first preprocessed test batch, loaded without the tools' code."""
    import tempfile

    from mmengine.config import Config
    from mmengine.runner import Runner

    from mmstiff.utils.checkpoint import load_checkpoint_file
    cfg = Config.fromfile(config)
    cfg.work_dir = tempfile.mkdtemp()
    cfg.experiment_name = f'reference_{osp.basename(cfg.work_dir)}'
    model = Runner.from_cfg(cfg).model
    model.load_state_dict(load_checkpoint_file(checkpoint)['state_dict'], strict=True)
    model.eval()
    data = next(iter(Runner.build_dataloader(cfg.test_dataloader)))
    return model, model.data_preprocessor(data, False)


def _decays(model):
    """The optimizer's decay per parameter: ``WEIGHT_DECAY``, 0 for norm layers
    (``norm_decay_mult=0``)."""
    norms = (torch.nn.LayerNorm, torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm)
    zero = {id(p) for m in model.modules() if isinstance(m, norms) for p in m.parameters()}
    return [0.0 if id(p) in zero else WEIGHT_DECAY for p in model.parameters()]


def _loss(model, data, params=None):
    """Training loss (soft cross-entropy on the one-hot labels) + Σ λ/2 ||w||²."""
    logits = model(data['inputs'], mode='tensor')
    target = torch.stack([s.gt_score for s in data['data_samples']])
    nll = -(target * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
    params = list(model.parameters()) if params is None else params
    return nll + sum(0.5 * d * p.pow(2).sum() for d, p in zip(_decays(model), params))


@pytest.mark.slow
def test_hessian_tool_on_a_vit_equals_the_explicit_hessian(vit, run_tool, tmp_path):
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel
    config, checkpoint = vit
    model, data = _model_and_test_batch(config, checkpoint)
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    model.double()
    data = dict(inputs=data['inputs'].double(), data_samples=data['data_samples'])
    for sample in data['data_samples']:
        sample.set_gt_score(sample.gt_score.double())

    def loss_of(vector):
        params, offset = {}, 0
        for name, shape in zip(names, shapes):
            params[name] = vector[offset:offset + shape.numel()].view(shape)
            offset += shape.numel()
        logits = functional_call(model, params, (data['inputs'], ), dict(mode='tensor'))
        target = torch.stack([s.gt_score for s in data['data_samples']])
        nll = -(target * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
        return nll + sum(0.5 * d * params[n].pow(2).sum() for d, n in zip(_decays(model), names))

    with sdpa_kernel([SDPBackend.MATH]):
        hessian = torch.autograd.functional.hessian(loss_of, flat)
        loss = float(loss_of(flat))
    exact = torch.linalg.eigvalsh(hessian)
    by_magnitude = sorted(exact.tolist(), key=abs, reverse=True)

    out = str(tmp_path / 'lanczos')
    _tool(run_tool, 'hessian.py', config, checkpoint, '--out-dir', out, '--split', 'test',
          '--batch-size', '8', '--num-batches', '1', '--top-k', '2', '--most-negative', '--method',
          'lanczos', '--lanczos-steps', '120')
    result = json.load(open(osp.join(out, 'hessian.json')))
    assert result['num_params'] == flat.numel() and result['augmented'] is False
    assert result['weight_decays'] == {
        '0.0': sum(d == 0 for d in _decays(model)),
        repr(WEIGHT_DECAY): sum(d > 0 for d in _decays(model))
    }
    batch = result['batches'][0]
    assert batch['loss'] == pytest.approx(loss, rel=1e-5)
    assert batch['eigenvalues'] == pytest.approx(by_magnitude[:2], rel=1e-3)
    assert batch['most_negative'] == pytest.approx(float(exact[0]), rel=1e-3)

    out = str(tmp_path / 'power')
    _tool(run_tool, 'hessian.py', config, checkpoint, '--out-dir', out, '--split', 'test',
          '--batch-size', '8', '--num-batches', '1', '--top-k', '1', '--tol', '1e-6', '--max-iter',
          '2000')
    batch = json.load(open(osp.join(out, 'hessian.json')))['batches'][0]
    assert batch['converged'] and batch['eigenvalues'] == pytest.approx(by_magnitude[:1], rel=1e-3)

    # the trace (Hutchinson) and the density of the whole spectrum (stochastic Lanczos
    # quadrature) against the same explicit Hessian
    out = str(tmp_path / 'density')
    samples = 300
    _tool(run_tool, 'hessian.py', config, checkpoint, '--out-dir', out, '--split', 'test',
          '--batch-size', '8', '--num-batches', '1', '--top-k', '1', '--max-iter', '3',
          '--trace-samples', str(samples), '--density-runs', '2', '--density-steps', '40')
    result = json.load(open(osp.join(out, 'hessian.json')))
    batch = result['batches'][0]
    off = hessian - torch.diag(hessian.diag())
    error = (2 * float((off**2).sum()) / samples)**0.5  # Rademacher: 2 Σ_{i≠j} H_ij²
    assert abs(batch['trace'] - float(hessian.trace())) < 4 * error
    assert batch['trace_std_error'] == pytest.approx(error, rel=0.3)
    for nodes, weights in zip(batch['quadrature']['nodes'], batch['quadrature']['weights']):
        assert len(nodes) == 40 and sum(weights) == pytest.approx(1.0, abs=1e-6)
        # Ritz values lie inside the spectrum, and the extremes converge first
        assert float(exact[0]) - 1e-3 <= min(nodes) and max(nodes) <= float(exact[-1]) + 1e-3
        assert max(nodes) == pytest.approx(float(exact[-1]), rel=1e-2)
    density = result['spectrum']['density']
    grid, phi = torch.tensor(density['grid']), torch.tensor(density['density'])
    assert float(torch.trapezoid(phi, grid)) == pytest.approx(1.0, abs=1e-3)
    assert result['spectrum']['trace']['mean'] == pytest.approx(batch['trace'])


@pytest.mark.slow
def test_hessian_tool_spectrum_over_augmented_training_batches(cnn, run_tool, tmp_path):
    config, checkpoint = cnn
    out = str(tmp_path / 'hessian')
    stdout = _tool(run_tool, 'hessian.py', config, checkpoint, '--out-dir', out, '--num-batches',
                   '2', '--top-k', '2', '--max-iter', '20')
    assert 'NEP' in stdout
    result = json.load(open(osp.join(out, 'hessian.json')))
    # the paper's protocol by default: the training split, its augmentations, batches of 16
    assert result['split'] == 'train' and result['augmented'] and result['batch_size'] == 16
    assert len(result['batches']) == 2  # 40 training images: two full batches of 16
    spectrum = result['spectrum']
    values = [v for b in result['batches'] for v in b['eigenvalues']]
    assert spectrum['values'] == values and len(values) == 4
    assert spectrum['nep'] == pytest.approx(sum(v < 0 for v in values) / 4)
    positive = [v for v in values if v > 0]
    if positive:
        assert spectrum['ape'] == pytest.approx(sum(positive) / len(positive))
    edges, density = spectrum['histogram']['edges'], spectrum['histogram']['density']
    assert sum(d * (b - a) for d, a, b in zip(density, edges, edges[1:])) == pytest.approx(1.0)
    assert result['figures'] == ['hessian_spectrum.png']
    _check_pngs(out, result['figures'])


def _direction(model, seed, exclude=()):
    """The tool's first direction rebuilt here: one float64 Gaussian draw per parameter in
    order, each filter rescaled to the weight filter's norm, zero for one-axis parameters."""
    import fnmatch
    gen = torch.Generator().manual_seed(seed)
    directions = []
    for name, p in model.named_parameters():
        d = torch.randn(p.shape, generator=gen, dtype=torch.float64).float()
        if p.dim() <= 1 or any(fnmatch.fnmatchcase(name, pat) for pat in exclude):
            directions.append(torch.zeros_like(p))
            continue
        for j in range(p.shape[0]):
            d[j] *= p[j].detach().norm() / (d[j].norm() + 1e-10)
        directions.append(d)
    return directions


@pytest.mark.slow
def test_loss_landscape_tool_1d_on_the_test_split(cnn, run_tool, tmp_path):
    config, checkpoint = cnn
    out = str(tmp_path / 'landscape')
    stdout = _tool(run_tool, 'loss_landscape.py', config, checkpoint, '--out-dir', out, '--dim',
                   '1', '--range', '0.5', '--steps', '3', '--split', 'test', '--num-batches', '1',
                   '--seed', '3')
    assert 'loss at the weights' in stdout
    result = json.load(open(osp.join(out, 'landscape.json')))
    assert result['coords'] == [[-0.5, 0.0, 0.5]] and result['augmented'] is False
    model, data = _model_and_test_batch(config, checkpoint)
    params = list(model.parameters())
    weights = [p.detach().clone() for p in params]
    direction = _direction(model, 3)
    with torch.no_grad():
        centre = float(_loss(model, data))
        assert result['centre']['loss'] == pytest.approx(centre, rel=1e-5)
        assert result['loss'][1] == pytest.approx(centre, rel=1e-5)
        for alpha, value in ((-0.5, result['loss'][0]), (0.5, result['loss'][2])):
            for p, w, d in zip(params, weights, direction):
                p.copy_(w + alpha * d)
            assert value == pytest.approx(float(_loss(model, data)), rel=1e-4)
            assert abs(value - centre) > 1e-5  # the direction moves the loss
    for i, total in enumerate(result['loss']):
        assert total == pytest.approx(result['nll'][i] + result['l2'][i])
    assert 'backbone.bn1.weight' in result['directions']['zero_params']  # the stem's BN
    _check_pngs(out, ['landscape_1d.png'])


@pytest.mark.slow
def test_loss_landscape_tool_2d_with_augmentation(vit, run_tool, tmp_path):
    config, checkpoint = vit
    out = str(tmp_path / 'landscape')
    _tool(run_tool, 'loss_landscape.py', config, checkpoint, '--out-dir', out, '--dim', '2',
          '--steps', '3', '--num-batches', '1')
    result = json.load(open(osp.join(out, 'landscape.json')))
    assert result['augmented'] and result['split'] == 'train'
    assert len(result['loss']) == 3 and all(len(row) == 3 for row in result['loss'])
    # the batches are drawn once: the centre of the grid is the loss at the weights
    assert result['loss'][1][1] == pytest.approx(result['centre']['loss'], rel=1e-6)
    # position embeddings are left out, as the authors' landscapes do
    assert 'backbone.pos_embed' in result['directions']['zero_params']
    assert -0.5 < result['directions']['cosine'] < 0.5
    _check_pngs(out, ['landscape_contour.png', 'landscape_surface.png'])


@pytest.mark.slow
def test_feature_variance_tool_on_a_vit(vit, run_tool, tmp_path):
    config, checkpoint = vit
    out = str(tmp_path / 'variance')
    _tool(run_tool, 'feature_variance.py', config, checkpoint, '--out-dir', out, '--num-batches',
          '1')
    result = json.load(open(osp.join(out, 'feature_variance.json')))
    assert list(result['states']) == ['input', 'layers.0.msa', 'layers.0.mlp']
    assert [s['msa'] for s in result['states'].values()] == [False, True, False]
    assert result['num_extra_tokens'] == 1 and result['num_samples'] == 8
    model, data = _model_and_test_batch(config, checkpoint)
    layer = model.backbone.layers[0]
    seen = {}
    handles = [
        layer.register_forward_pre_hook(lambda m, a: seen.setdefault('input', a[0])),
        layer.ln2.register_forward_pre_hook(lambda m, a: seen.setdefault('msa', a[0])),
        layer.register_forward_hook(lambda m, a, o: seen.setdefault('mlp', o))
    ]
    with torch.no_grad():
        model.backbone(data['inputs'])
    for handle in handles:
        handle.remove()
    for state, key in (('input', 'input'), ('layers.0.msa', 'msa'), ('layers.0.mlp', 'mlp')):
        patches = seen[key][:, 1:].double()  # the class token left out
        expected = patches.var(dim=1).mean(dim=1)  # over positions, then channels
        assert result['states'][state]['variance'] == pytest.approx(
            float(expected.mean()), rel=1e-5)
    _check_pngs(out, ['feature_variance.png'])


@pytest.mark.slow
def test_feature_variance_tool_on_a_cnn_marks_the_subsampling(cnn, run_tool, tmp_path):
    config, checkpoint = cnn
    out = str(tmp_path / 'variance')
    _tool(run_tool, 'feature_variance.py', config, checkpoint, '--out-dir', out, '--num-batches',
          '2')
    result = json.load(open(osp.join(out, 'feature_variance.json')))
    shortcuts = [n for n, s in result['states'].items() if s['kind'] == 'shortcut']
    assert shortcuts == ['layer2.0.shortcut', 'layer3.0.shortcut', 'layer4.0.shortcut']
    assert result['num_samples'] == 16 and not any(s['msa'] for s in result['states'].values())
    assert result['stages']['layer4']['states'][-1] == 'layer4.1'
    # one batch: the tool's values are those of the first test batch
    one = str(tmp_path / 'one')
    _tool(run_tool, 'feature_variance.py', config, checkpoint, '--out-dir', one, '--num-batches',
          '1')
    states = json.load(open(osp.join(one, 'feature_variance.json')))['states']
    model, data = _model_and_test_batch(config, checkpoint)
    b = model.backbone
    with torch.no_grad():
        x = b.relu(b.norm1(b.conv1(data['inputs'])))
        projected = torch.relu(b.layer2[0].downsample(b.layer1(x)))
        after = b.layer2[0](b.layer1(x))
    for name, state in (('input', x), ('layer2.0.shortcut', projected), ('layer2.0', after)):
        expected = state.double().flatten(2).var(dim=2).mean(dim=1).mean()
        assert states[name]['variance'] == pytest.approx(float(expected), rel=1e-5), name
    _check_pngs(out, ['feature_variance.png'])


@pytest.mark.slow
def test_a_checkpoint_of_another_model_fails_naming_the_mismatch(cnn, vit, run_tool):
    cnn_config, _ = cnn
    _, vit_checkpoint = vit
    for tool in ('hessian.py', 'loss_landscape.py', 'feature_variance.py'):
        proc = run_tool(
            osp.join('tools', 'analysis', tool), cnn_config, vit_checkpoint, '--device', 'cpu',
            check=False)
        assert proc.returncode != 0
        assert 'does not match the model' in proc.stderr, proc.stderr[-2000:]
        assert 'backbone.' in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message without CUDA')
def test_cuda_without_cuda_fails_before_any_work(run_tool):
    for tool in ('hessian.py', 'loss_landscape.py', 'feature_variance.py'):
        proc = run_tool(
            osp.join('tools', 'analysis', tool), 'no_config.py', 'no_model.pth', '--device', 'cuda',
            check=False)
        assert proc.returncode != 0
        assert "--device 'cuda' asks for CUDA, which is not available" in proc.stderr
