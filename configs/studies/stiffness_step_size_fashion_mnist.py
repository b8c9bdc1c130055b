# Reproduction study: are the NSI and the step size negatively correlated within a block?
#
#   make reproduce STUDY=configs/studies/stiffness_step_size_fashion_mnist.py
#
# No training of its own: the SE and StepNet runs of stepnet_vs_se_fashion_mnist (the demo
# pre-activation ResNet-20, 3 epochs on Fashion-MNIST, 8 seeds; `reuse` below). The
# StiffnessHook logged, every 50 training iterations, the Pearson correlation over the batch
# between each sample's NSI and its mean step size Δ for every block
# (stiffness/nsi_step_corr/<block>, docs/methods.md §5); the page gives it per block at the last
# recorded iteration and averaged over training, and per stage (log/stiffness/nsi_step_corr/
# <stage>, .../training_mean). Results: docs/results/stiffness_step_size_fashion_mnist/.
_config = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'

name = 'stiffness_step_size_fashion_mnist'
claim = dict(
    quote=('Specifically, we take three blocks in the first stage of SENet as an example, we '
           'can find that the NSI and attention values are negatively correlated. In other '
           'words, in this case, if the stiffness issues exist in the blocks, the module tends '
           'to generate a smaller step size to alleviate the stiff issues'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, Appendix D and Fig. 2 (https://arxiv.org/abs/2308.09939)'),
    tested=('in the first stage of the SE (and, secondary, StepNet) pre-activation ResNet-20 '
            'trained on Fashion-MNIST, the NSI and the step size of the blocks are negatively '
            'correlated, in two readings: per batch (over the samples of a training batch, at '
            'the end of training and on average over it; the declared outcome) and per '
            'trajectory (across the blocks of the stage; docs/methods.md §13).'
            ' The runs are the 3-epoch demo runs of stepnet_vs_se_fashion_mnist, sized for 2 CPU '
            'cores; `--configs converged` runs 30 epochs and 10 seeds.'))
seeds = [0, 1, 2, 3, 4, 5, 6, 7]
analysis = ['tns', 'spectrum', 'freq_noise']
analysis_args = dict(tns=['--num-batches', '4'], spectrum=['--num-batches', '2'],
                     freq_noise=['--num-batches', '2'])
reuse = ['stepnet_vs_se_fashion_mnist']
runs = [
    dict(label='se', config=_config, cfg_options=['model.backbone.adaptor.type=mmstiff.SEAdaptor'],
         baseline=True),
    dict(label='stepnet', config=_config, baseline='se'),
]
_c = 'log/stiffness/nsi_step_corr/'
# `--configs converged`: the same study trained 30 epochs (cosine schedule to the end) with 10
# seeds, for a GPU slot: `--configs converged --device cuda --jobs 10` packs the runs onto it
configs = dict(
    converged=dict(
        cfg_options=[
            'train_cfg.max_epochs=30', 'train_cfg.val_interval=30', 'param_scheduler.1.T_max=30'
        ], seeds=list(range(10))))

# The primary outcome: SE's (the module of Fig. 2) per-batch NSI-step correlation in the first
# stage is negative; smallest effect of interest r = 0.1. The per-trajectory reading
# (derived/nsi_step_corr/per_trajectory/layer1) and StepNet are secondary.
outcome = dict(metric='log/stiffness/nsi_step_corr/layer1', comparison=['se'], direction='less',
               margin=0.1)
verdict = (
    'Inconclusive for SE, the module of the paper\'s Fig. 2, at 8 seeds. Per batch (the '
    'correlation over the samples of a training batch, the declared outcome) SE\'s first-stage '
    'r is {mean[se][%(c)slayer1]} (as many seeds above 0 as below; the per-seed table below) '
    'and {mean[se][%(c)slayer1/training_mean]} on average over training; the interval excludes '
    'neither 0 nor the margin of r = -0.1, and 8 seeds could only have seen a correlation of '
    'about the MDE above. Per trajectory (one correlation across the three blocks of the first '
    'stage, from the per-block means on the test batches; docs/methods.md §13) SE gives '
    '{mean[se][%(t)s]} ({mean_ci[se][%(t)s]}). StepNet, secondary here, leans negative in both '
    'readings, 6 of 8 seeds in each: per batch {mean[stepnet][%(c)slayer1]} '
    '({mean_ci[stepnet][%(c)slayer1]}), per trajectory {mean[stepnet][%(t)s]} '
    '({mean_ci[stepnet][%(t)s]}); neither interval excludes 0. These are 3-epoch runs of the '
    'small demo network; `--configs converged` is the converged version.' %
    dict(c=_c, t='derived/nsi_step_corr/per_trajectory/layer1'))
