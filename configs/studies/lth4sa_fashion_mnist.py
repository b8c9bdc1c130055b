# Reproduction study: the lottery ticket hypothesis for self-attention (LTH4SA) on the demo model.
#
#   make data
#   make reproduce STUDY=configs/studies/lth4sa_fashion_mnist.py
#
# The demo pre-activation ResNet-20 (3 stages × 3 blocks, 3 epochs on Fashion-MNIST) with a
# StepNet adaptor in every block (the config's default) against one adaptor per stage, in the
# first block of each stage (the downsampling step, where the state changes most), and against
# the plain network. 3 variants × 3 seeds. Results: docs/results/lth4sa_fashion_mnist/.
_config = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'

name = 'lth4sa_fashion_mnist'
claim = dict(
    quote=('For each trajectory, only a few features can cause SP ... So if these two '
           'properties generally hold, we argue that LTH4SA may also be an intrinsic property '
           'of the SAM.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, Section 3 (https://arxiv.org/abs/2308.09939)'),
    tested=('on the demo pre-activation ResNet-20 trained 3 epochs on Fashion-MNIST, StepNet '
            'adaptors in one block per stage (3 of 9 blocks) match adaptors in every block in '
            'test top-1 (the declared outcome, within ±0.5 points), and what each does to the '
            'total neural stiffness.'
            ' Scale chosen for 2 CPU cores: the demo network (0.27 M parameters) for 3 epochs '
            '(about 10 minutes a run alone) lets 3 seeds of every variant run in a few hours; the'
            ' CIFAR and ImageNet configs of configs/stepnet/ run it at the paper\'s scale.'))
seeds = [0, 1, 2]
analysis = ['tns']
analysis_args = dict(tns=['--num-batches', '4'])
# the plain and every-block runs are those of stepnet_vs_se_fashion_mnist (same config, options
# and seeds): only the one-per-stage runs train here
reuse = ['stepnet_vs_se_fashion_mnist']
runs = [
    dict(label='plain', config=_config, cfg_options=['model.backbone.adaptor=None'], baseline=True),
    dict(label='stepnet-every-block', config=_config, baseline='plain'),
    dict(label='stepnet-one-per-stage', config=_config,
         cfg_options=['model.backbone.adaptor_blocks=[[0],[0],[0]]'],
         baseline=['plain', 'stepnet-every-block']),
]
_one, _all = 'stepnet-one-per-stage', 'stepnet-every-block'
# The primary outcome: adaptors in one block per stage match adaptors in every block in top-1,
# within ±0.5 points (about half the paper's gains rescaled to Fashion-MNIST's error).
outcome = dict(metric='test/accuracy/top1',
               comparison=['stepnet-one-per-stage',
                           'stepnet-every-block'], direction='equivalent', margin=0.5)
verdict = (
    'Equivalence shown for top-1, at ±0.5 points: one StepNet adaptor per stage (3 of 9 blocks) '
    'and adaptors in every block differ by {diff[%(one)s][%(all)s][test/accuracy/top1]} points '
    '({ci[%(one)s][%(all)s][test/accuracy/top1]}). This is the weak form of LTH4SA only: '
    'adaptors in every block gave no top-1 gain over the plain network here '
    '({diff[%(all)s][plain][test/accuracy/top1]}, {ci[%(all)s][plain][test/accuracy/top1]}), so '
    'there was no gain for a few adaptors to keep. The few adaptors do not do what all of them '
    'do to the stiffness: the total neural stiffness differs, one-per-stage − every-block '
    '{diff[%(one)s][%(all)s][tns/network]} ({ci[%(one)s][%(all)s][tns/network]}, q = '
    '{q[%(one)s][%(all)s][tns/network]}).' % dict(one=_one, all=_all))
