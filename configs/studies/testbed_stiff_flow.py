# The stiff-dynamics testbed (docs/methods.md §14): does StepNet lower the error of a residual
# network learning the flow of a stiff system, against plain and SE steps, and not on the
# non-stiff version of the same task? 3 step kinds × 2 tasks × 20 seeds,
# a minute or so each on one CPU core. Data are generated from the configs (system, starting
# states), identical for every seed; the seed sets the network's initialisation and the batch
# order.
#
#   python tools/reproduce.py configs/studies/testbed_stiff_flow.py --jobs 2
_stiff = 'configs/testbed/flow-resnet8-stepnet_relaxation-stiff.py'
_nonstiff = 'configs/testbed/flow-resnet8-stepnet_relaxation-nonstiff.py'
_plain = ['model.adaptor=None']
_se = ['model.adaptor.type=mmstiff.SEAdaptor']

name = 'testbed_stiff_flow'
claim = dict(
    quote=('Similar to the adaptive step-size method which is effective in solving stiff ODEs, '
           'we show that the SAM is also a stiffness-aware step size adaptor that can enhance '
           "the model's representational ability to measure intrinsic SP by refining the "
           'estimation of stiffness information and generating adaptive attention values.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, abstract (https://arxiv.org/abs/2308.09939); the '
            'testbed and its prediction are the project\'s own'),
    tested=('on a task whose stiffness is known by construction (an 8-step residual network '
            'learning the flow of an 8-dimensional nonlinear relaxation system with rates '
            'spread over [1, 100]), StepNet steps give a lower final error than plain steps; '
            'secondary: against SE, and the same comparisons on the non-stiff version (rates '
            'over [1, 2]), where an adaptive step should matter less. Error as ln of the '
            'relative error on 512 test trajectories, 20 seeds per variant.'))
outcome = dict(metric='test/flow/final_log_error', comparison=['stepnet_stiff', 'plain_stiff'],
               direction='less', margin=0.1)  # 0.1 in ln: a 10 % lower error
# 20 seeds, the full design (about 20 s a run on one core; finished runs are kept)
seeds = list(range(20))
runs = [
    dict(label='plain_stiff', config=_stiff, cfg_options=_plain, baseline=True),
    dict(label='stepnet_stiff', config=_stiff, baseline=['plain_stiff', 'se_stiff']),
    dict(label='se_stiff', config=_stiff, cfg_options=_se, baseline='plain_stiff'),
    dict(label='plain_nonstiff', config=_nonstiff, cfg_options=_plain, baseline=True),
    dict(label='stepnet_nonstiff', config=_nonstiff, baseline=['plain_nonstiff', 'se_nonstiff']),
    dict(label='se_nonstiff', config=_nonstiff, cfg_options=_se, baseline='plain_nonstiff'),
]
_e = '[test/flow/final_log_error]'
verdict = (
    'On the stiff task StepNet\'s final error differs from the plain network\'s by '
    '{diff[stepnet_stiff][plain_stiff]' + _e + '} in ln (95% CI '
    '{ci[stepnet_stiff][plain_stiff]' + _e + '}), and from SE\'s by '
    '{diff[stepnet_stiff][se_stiff]' + _e + '} ({ci[stepnet_stiff][se_stiff]' + _e + '}): '
    'the declared comparison held at 20 seeds. SE steps lower the error too, by less '
    '({diff[se_stiff][plain_stiff]' + _e + '} against plain, '
    '{ci[se_stiff][plain_stiff]' + _e + '}). The '
    'other half of the question, that the gain belongs to stiffness, is contradicted by the '
    'non-stiff version of the same task (rates over [1, 2]): there StepNet\'s error differs '
    'from plain\'s by {diff[stepnet_nonstiff][plain_nonstiff]' + _e + '} '
    '({ci[stepnet_nonstiff][plain_nonstiff]' + _e + '}), a larger gain than on the stiff '
    'task, and SE\'s by {diff[se_nonstiff][plain_nonstiff]' + _e + '} '
    '({ci[se_nonstiff][plain_nonstiff]' + _e + '}). Nor does the gain come from steps that '
    'shrink where the system is stiff: on the same runs StepNet\'s steps are larger where the '
    'system is stiffer (testbed_step_stiffness).')
