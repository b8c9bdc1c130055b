# Reproduction study: plain vs SE vs StepNet step sizes on the demo model and Fashion-MNIST.
#
#   make data                       # the real Fashion-MNIST in data/fashion_mnist
#   make reproduce STUDY=configs/studies/stepnet_vs_se_fashion_mnist.py
#   python tools/reproduce.py stepnet_vs_se_fashion_mnist --report-only   # after filling `verdict`
#
# The demo config (a pre-activation ResNet-20, 3 epochs) with its `adaptor` switched on the
# command line: None (plain ResNet, Δ ≡ 1), SE (Δ from f(x_t)), StepNet (the config's default,
# Δ from x_t and x_t + f(x_t)). 3 variants × 8 seeds, each trained, tested and analysed; the
# fields are described in docs/studies.md. Results: docs/results/stepnet_vs_se_fashion_mnist/.
_config = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'

name = 'stepnet_vs_se_fashion_mnist'
claim = dict(
    quote=('Similar to the adaptive step-size method which is effective in solving stiff ODEs, '
           'we show that the SAM is also a stiffness-aware step size adaptor that can enhance '
           "the model's representational ability to measure intrinsic SP by refining the "
           'estimation of stiffness information and generating adaptive attention values.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, abstract (https://arxiv.org/abs/2308.09939)'),
    tested=('on the demo pre-activation ResNet-20 trained 3 epochs on Fashion-MNIST, StepNet '
            'raises the total neural stiffness (TNS, the paper\'s metric of the ability to '
            'measure SP) over the plain network (the declared outcome), TNS goes with test '
            'top-1 across the runs, and top-1 rises with SE and more with StepNet (secondary).'
            ' Scale chosen for 2 CPU cores: the demo network (0.27 M parameters) for 3 epochs '
            '(about 10 minutes a run alone), 8 seeds of every variant; `--configs converged` '
            'runs 30 epochs and 10 seeds, configs/studies/stepnet_vs_se_cifar100.py the '
            "paper's CIFAR-100 ResNet-164."))
seeds = [0, 1, 2, 3, 4, 5, 6, 7]
analysis = ['tns', 'spectrum', 'freq_noise']
# as many test batches as tools/demo.py analyses
analysis_args = dict(tns=['--num-batches', '4'], spectrum=['--num-batches', '2'],
                     freq_noise=['--num-batches', '2'])
runs = [
    dict(label='plain', config=_config, cfg_options=['model.backbone.adaptor=None'], baseline=True),
    dict(label='se', config=_config, cfg_options=['model.backbone.adaptor.type=mmstiff.SEAdaptor'],
         baseline='plain'),
    dict(label='stepnet', config=_config, baseline=['plain', 'se']),
]
# Filled in after looking at the results page, with its numbers as placeholders, e.g.
# 'StepNet − SE: {diff[stepnet][se][test/accuracy/top1]} points (95% CI
#  {ci[stepnet][se][test/accuracy/top1]}).'
# `--configs converged`: the same study trained 30 epochs (cosine schedule to the end) with 10
# seeds, for a GPU slot: `--configs converged --device cuda --jobs 10` packs the runs onto it
configs = dict(
    converged=dict(
        cfg_options=[
            'train_cfg.max_epochs=30', 'train_cfg.val_interval=30', 'param_scheduler.1.T_max=30'
        ], seeds=list(range(10))))

# The primary outcome (the abstract's "stiffness-aware step size adaptor ... to measure intrinsic
# SP", and TNS as its "quantitative metric of representational ability"): StepNet raises the
# total neural stiffness over the plain network; smallest effect of interest 0.2 (about 10% of
# the plain network's TNS here); its link to top-1 over every run is reported beside it.
outcome = dict(metric='tns/network', comparison=['stepnet', 'plain'], direction='greater',
               margin=0.2, link='test/accuracy/top1')
_tns, _top1 = '[tns/network]', '[test/accuracy/top1]'
verdict = (
    'Inconclusive at 8 seeds. The declared outcome is the abstract\'s: a step-size adaptor that '
    'measures stiffness should raise the total neural stiffness (TNS) over the plain network. '
    'StepNet − plain TNS is {diff[stepnet][plain]' + _tns + '} (95% CI '
    '{ci[stepnet][plain]' + _tns + '}), as many seeds above as below; the interval contains 0 '
    'and the margin of 0.2, and at the seeds\' spread (SD {std[plain]' + _tns + '} plain, '
    '{std[stepnet]' + _tns + '} StepNet) the study could only have seen about the MDE above. '
    'SE lowered TNS: SE − plain {diff[se][plain]' + _tns + '} ({ci[se][plain]' + _tns + '}, '
    'q = {q[se][plain]' + _tns + '}); StepNet − SE {diff[stepnet][se]' + _tns + '} '
    '({ci[stepnet][se]' + _tns + '}, q = {q[stepnet][se]' + _tns + '}). TNS goes with top-1 '
    'across the 24 runs (the Link line). '
    'Top-1 (secondary): StepNet − plain {diff[stepnet][plain]' + _top1 + '} points '
    '({ci[stepnet][plain]' + _top1 + '}, q = {q[stepnet][plain]' + _top1 + '}), SE − plain '
    '{diff[se][plain]' + _top1 + '} ({ci[se][plain]' + _top1 + '}, q = '
    '{q[se][plain]' + _top1 + '}): neither adaptor raised top-1 after 3 epochs. The training '
    'times were measured on a shared 2-core machine running other studies, so the time rows do '
    'not compare the variants.')
