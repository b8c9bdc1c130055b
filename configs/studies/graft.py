# Reproduction study: step-size adaptors grafted onto a plain pretrained network, with the
# paper's start and with the identity start (docs/methods.md §3, "Starting from a plain
# checkpoint").
#
#   make data                                   # the real Fashion-MNIST in data/fashion_mnist
#   OMP_NUM_THREADS=1 python tools/reproduce.py configs/studies/graft.py
#   python tools/reproduce.py graft --report-only                   # after filling `verdict`
#
# 1. `plain-3e`: the demo pre-activation ResNet-20 without adaptors, trained 3 epochs (seed 0);
#    its last checkpoint is the plain checkpoint every other run starts from (the classifier's
#    init_cfg Pretrained, not load_from, which tools/test.py would load again over the checkpoint
#    it tests). The runs
#    read it from the runner's default work dir (work_dirs/studies); with --work-dir D, change
#    _plain_checkpoint below to D/graft/plain-3e/seed0/epoch_3.pth.
# 2. `step0.*`: the network at step 0 of fine-tuning (plain, or with SE / StepNet adaptors in
#    every block, `start` 'paper' or 'identity'): built, initialised and loaded like the `ft.*`
#    run of the same seed, then one iteration at learning rate 0 with every BN frozen
#    (norm_eval=True, adaptor_norm='follow'), which leaves every weight and statistic as it
#    was, and tested. (The runner tests what training saves; this is the no-op training.)
#    `step0.plain` and the identity starts must give exactly the top-1 of `plain-3e`.
# 3. `ft.*`: the same networks fine-tuned one epoch (lr 0.01, warm-up then cosine) and tested.
#
# Every run skips the in-training validation (the runner tests the final checkpoint) and the
# diagnostic hooks. Results: docs/results/graft/.
_config = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'
_plain_checkpoint = 'work_dirs/studies/graft/plain-3e/seed0/epoch_3.pth'
_adaptors = {
    'plain': ['model.backbone.adaptor=None'],
    'se-paper': ['model.backbone.adaptor.type=mmstiff.SEAdaptor',
                 'model.backbone.adaptor.start=paper'],
    'se-identity': ['model.backbone.adaptor.type=mmstiff.SEAdaptor',
                    'model.backbone.adaptor.start=identity'],
    'stepnet-paper': ['model.backbone.adaptor.start=paper'],
    'stepnet-identity': ['model.backbone.adaptor.start=identity'],
}
_one_epoch = ['model.init_cfg.type=Pretrained', f'model.init_cfg.checkpoint={_plain_checkpoint}',
              'train_cfg.max_epochs=1', 'param_scheduler.1.T_max=1']
_fine_tune = _one_epoch + ['optim_wrapper.optimizer.lr=0.01']
# one batch of 128 at learning rate 0, every BN frozen: the saved model is the loaded one
_step0 = _one_epoch + ['optim_wrapper.optimizer.lr=0.0', 'model.backbone.norm_eval=True',
                       'model.backbone.adaptor_norm=follow',
                       'train_dataloader.dataset.indices=128']

name = 'graft'
claim = dict(
    quote=('A residual block is one Euler step x_{t+1} = x_t + Δ_t ⊙ f(x_t); Δ_t ≡ 1 is the '
           'plain block, and SE and StepNet are step-size adaptors that set Δ_t from the '
           'trajectory.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, Sec. 3-4 (https://arxiv.org/abs/2308.09939); the paper '
            'trains its adaptors from scratch or from an adapted ImageNet checkpoint'),
    tested=('grafted onto a plain checkpoint of the demo ResNet-20 (Fashion-MNIST, 3 epochs), '
            "adaptors with the paper's start (StepNet: Δ ≡ sigmoid(-1); SE: random Δ near 0.5) "
            'lose the pretrained accuracy at step 0 and end one epoch of fine-tuning below the '
            'plain network fine-tuned alike, while the identity start (Δ ≡ 1) starts at the '
            'plain accuracy exactly and fine-tunes at least as well as the plain network.'))
seeds = [0, 1, 2]
cfg_options = ['train_cfg.val_begin=1000', 'custom_hooks=[]']
runs = [dict(label='plain-3e', config=_config, cfg_options=_adaptors['plain'], seeds=[0],
             baseline=False)]
runs += [dict(label=f'step0.{label}', config=_config, cfg_options=_step0 + options,
              baseline=True if label == 'plain' else 'step0.plain')
         for label, options in _adaptors.items()]
runs += [dict(label=f'ft.{label}', config=_config, cfg_options=_fine_tune + options,
              baseline=True if label == 'plain' else 'ft.plain')
         for label, options in _adaptors.items()]
# Filled in after looking at the results page, with its numbers as placeholders.
_top1 = '[test/accuracy/top1]'
verdict = (
    "Confirmed. At step 0 the paper's start loses the plain checkpoint's "
    '{mean[plain-3e]' + _top1 + '}% test top-1: StepNet (Δ ≡ sigmoid(-1) in every block) gives '
    '{mean[step0.stepnet-paper]' + _top1 + '}%, SE {mean[step0.se-paper]' + _top1 + '}%; the '
    'identity start gives exactly the plain accuracy (difference '
    '{diff[step0.stepnet-identity]' + _top1 + '} for StepNet, {diff[step0.se-identity]' + _top1
    + '} for SE, on every seed). After one epoch of fine-tuning (lr 0.01) the paper\'s start '
    'ends below the plain network: StepNet {diff[ft.stepnet-paper]' + _top1 + '} points '
    '(95% CI {ci[ft.stepnet-paper]' + _top1 + '}), below even the checkpoint it started from, '
    'SE {diff[ft.se-paper]' + _top1 + '} (CI {ci[ft.se-paper]' + _top1 + '}). The identity '
    'start ends level with the plain network: StepNet {diff[ft.stepnet-identity]' + _top1
    + '} (CI {ci[ft.stepnet-identity]' + _top1 + '}), SE {diff[ft.se-identity]' + _top1
    + '} (CI {ci[ft.se-identity]' + _top1 + '}). One epoch is too short to show an '
    'adaptor gain over the plain network; what the identity start removes is the loss.')
