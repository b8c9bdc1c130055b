"""HessianHook through a real MMEngine Runner: the logged eigenvalues equal those of the
explicit Hessian of the training loss, and the training run is unchanged by the hook."""
import glob
import os.path as osp

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from diagnostics_toy import read_json_lines
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.func import functional_call
from torch.utils.data import DataLoader, TensorDataset

from mmstiff.engine.hooks import HessianHook

BATCH = 4
FEATURES = 6
CLASSES = 3


class TinyNet(BaseModel):
    """``linear -> BN -> tanh -> dropout -> linear`` on feature vectors: 63 parameters, so the
    Hessian can be formed explicitly."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 5)
        self.bn = nn.BatchNorm1d(5)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(5, CLASSES)

    def forward(self, inputs, labels=None, mode='tensor'):
        logits = self.fc2(self.drop(torch.tanh(self.bn(self.fc1(inputs)))))
        if mode == 'loss':
            return dict(loss=F.cross_entropy(logits, labels))
        return logits


def _data():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(16, FEATURES,
                        generator=gen), torch.randint(0, CLASSES, (16, ), generator=gen))


def _runner(work_dir, model, hooks, lr=0.0, weight_decay=0.1, max_iters=4):
    return Runner(
        model=model, work_dir=str(work_dir),
        train_dataloader=DataLoader(TensorDataset(*_data()), batch_size=BATCH,
                                    shuffle=False), train_cfg=dict(by_epoch=False,
                                                                   max_iters=max_iters),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=lr, weight_decay=weight_decay)),
        custom_hooks=hooks,
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1),
                           checkpoint=None), randomness=dict(seed=0), default_scope='mmengine',
        experiment_name=osp.basename(str(work_dir)))


def _hessian_lines(runner):
    path = glob.glob(osp.join(runner.log_dir, 'vis_data', 'scalars.json'))[0]
    lines = {
        line['step']: line
        for line in read_json_lines(path) if any(k.startswith('hessian/') for k in line)
    }
    # the same rows, with their iteration and epoch, in the hook's own JSON log; none in the
    # run's main log, which upstream analyze_logs.py reads
    own = glob.glob(osp.join(runner.log_dir, 'vis_data', f'{runner.timestamp}_hessian.json'))
    assert own and {line['step']: line for line in read_json_lines(own[0])} == lines
    assert all(line['iter'] == step and line['epoch'] == 1 for step, line in lines.items())
    main = osp.join(runner.log_dir, 'vis_data', f'{runner.timestamp}.json')
    assert not any(k.startswith('hessian/') for line in read_json_lines(main) for k in line)
    return lines


def _explicit_hessian(model, inputs, labels, weight_decay):
    """The Hessian of the training-mode loss + λ/2 ||w||² in every parameter, as a matrix."""
    names = [n for n, _ in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    shapes = [p.shape for p in model.parameters()]

    def loss_of(vector):
        params, offset = {}, 0
        for name, shape in zip(names, shapes):
            params[name] = vector[offset:offset + shape.numel()].view(shape)
            offset += shape.numel()
        logits = functional_call(model, params, (inputs, ))
        return F.cross_entropy(logits, labels) + 0.5 * weight_decay * vector.pow(2).sum()

    model.train()
    with torch.no_grad():
        state = {k: v.clone() for k, v in model.state_dict().items()}
    hessian = torch.autograd.functional.hessian(loss_of, flat)
    model.load_state_dict(state)  # the BN running statistics as they were
    return hessian


@pytest.mark.slow
def test_logged_eigenvalues_equal_the_explicit_hessian(tmp_path):
    torch.manual_seed(0)
    model = TinyNet()
    # float32 parameters: a relative change of 1e-6 is as close as the products resolve
    hook = dict(type='mmstiff.HessianHook', interval=2, num_eigs=2, negative=True, max_iter=1000,
                tol=1e-6)
    runner = _runner(tmp_path, model, [hook], max_iters=3)
    runner.train()
    lines = _hessian_lines(runner)
    assert sorted(lines) == [2]
    line = lines[2]
    assert {
        'hessian/eigenvalue_1', 'hessian/eigenvalue_2', 'hessian/min_eigenvalue', 'hessian/loss',
        'hessian/products'
    } <= set(line)

    # lr 0: the weights are as built; iteration 2 trains on samples 4..7, with the optimizer's
    # weight decay 0.1 as the l2 term
    inputs, labels = _data()
    batch = slice(BATCH, 2 * BATCH)
    hessian = _explicit_hessian(model, inputs[batch], labels[batch], 0.1)
    exact = torch.linalg.eigvalsh(hessian.double())
    by_magnitude = sorted(exact.tolist(), key=abs, reverse=True)
    assert line['hessian/eigenvalue_1'] == pytest.approx(by_magnitude[0], rel=1e-4)
    assert line['hessian/eigenvalue_2'] == pytest.approx(by_magnitude[1], rel=1e-4)
    assert exact[0] < 0  # the loss is not convex here: the most negative one is found
    assert line['hessian/min_eigenvalue'] == pytest.approx(float(exact[0]), rel=1e-3)
    with torch.no_grad():
        model.train()
        loss = F.cross_entropy(model(
            inputs[batch]), labels[batch]) + 0.05 * sum(p.pow(2).sum() for p in model.parameters())
    assert line['hessian/loss'] == pytest.approx(float(loss), rel=1e-5)
    # the MessageHub keeps the latest value under the same name
    assert runner.message_hub.get_scalar('hessian/eigenvalue_1').current() == pytest.approx(
        line['hessian/eigenvalue_1'])


@pytest.mark.slow
def test_the_training_run_is_unchanged_by_the_hook(tmp_path):
    """Dropout draws and BN running statistics: the hook's extra pass restores both."""
    states = []
    for i, hooks in enumerate(([], [dict(type='mmstiff.HessianHook', interval=1, max_iter=5)])):
        torch.manual_seed(0)
        model = TinyNet(dropout=0.3)
        runner = _runner(tmp_path / str(i), model, hooks, lr=0.1, max_iters=4)
        runner.train()
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        if hooks:
            assert sorted(_hessian_lines(runner)) == [1, 2, 3, 4]
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


@pytest.mark.slow
def test_weight_decay_override_lanczos_and_bad_arguments():
    torch.manual_seed(0)
    model = TinyNet()  # training mode, as in a run
    inputs, labels = _data()
    batch = [inputs[:BATCH], labels[:BATCH]]
    exact = torch.linalg.eigvalsh(_explicit_hessian(model, *batch, 0.0).double())
    # an l2 coefficient λ for every parameter: H + λI, every eigenvalue moves by λ
    for decay in (0.0, 0.5):
        found = HessianHook(weight_decay=decay, negative=True, max_iter=1000,
                            tol=1e-6).compute(model, batch, 0)
        shifted = (exact + decay).tolist()
        assert found['eigenvalue_1'] == pytest.approx(max(shifted, key=abs), rel=1e-3)
        assert found['min_eigenvalue'] == pytest.approx(min(shifted), rel=1e-2, abs=1e-3)
    # Lanczos with as many steps as parameters: the Ritz values are the whole spectrum
    lanczos = HessianHook(method='lanczos', lanczos_steps=63, num_eigs=2, negative=True,
                          weight_decay=0.0).compute(model, batch, 0)
    by_magnitude = sorted(exact.tolist(), key=abs, reverse=True)
    assert [lanczos['eigenvalue_1'],
            lanczos['eigenvalue_2']] == pytest.approx(by_magnitude[:2], rel=1e-4)
    assert lanczos['min_eigenvalue'] == pytest.approx(float(exact[0]), rel=1e-4)
    # fewer steps where the Krylov space closes (repeated eigenvalues, such as BN's zeros)
    assert 2 <= lanczos['products'] <= 63 and lanczos['converged'] == 1.0
    for kwargs, match in ((dict(interval=0), 'interval=0'), (dict(num_eigs=0), 'num_eigs=0'),
                          (dict(tol=-1.0), 'tol=-1.0'), (dict(negative='yes'), "negative='yes'"),
                          (dict(weight_decay=-0.1), 'weight_decay=-0.1'),
                          (dict(seed=1.5), 'seed=1.5'), (dict(method='arnoldi'), 'arnoldi'),
                          (dict(method='lanczos', num_eigs=3,
                                lanczos_steps=2), 'lanczos_steps=2 is smaller than num_eigs=3')):
        with pytest.raises(ValueError, match=match):
            HessianHook(**kwargs)


@pytest.mark.slow
def test_trajectory_recorders_do_not_see_the_extra_pass(tmp_path):
    """The hook runs before the diagnostic hooks start their recorders: no forward hook is on
    the model during its extra pass, and StiffnessHook records on its iterations as usual."""
    from diagnostics_toy import ToyClassifier, tiny_backbone, toy_loader

    class Spy(HessianHook):
        seen = []

        def compute(self, model, data_batch, iteration, param_groups=()):
            self.seen.append(
                sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()))
            return super().compute(model, data_batch, iteration, param_groups)

    torch.manual_seed(0)
    spy = Spy(interval=2, max_iter=2)
    runner = Runner(
        model=ToyClassifier(tiny_backbone()), work_dir=str(tmp_path),
        train_dataloader=toy_loader(batch_size=BATCH), train_cfg=dict(by_epoch=False, max_iters=4),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)),
        custom_hooks=[dict(type='mmstiff.StiffnessHook', interval=2), spy],
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1),
                           checkpoint=None), randomness=dict(seed=0), default_scope='mmengine',
        experiment_name=osp.basename(str(tmp_path)))
    runner.train()
    assert spy.seen == [0, 0]
    assert sorted(_hessian_lines(runner)) == [2, 4]
    path = glob.glob(osp.join(runner.log_dir, 'vis_data', 'scalars.json'))[0]
    assert sorted(line['step'] for line in read_json_lines(path)
                  if 'stiffness/nsi/layer1.0' in line) == [2, 4]
