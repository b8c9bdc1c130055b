"""Whole-config checks before the Runner: misspelled mmstiff types, keys of the other loop,
option keys that name no field of the config."""
import argparse
import os.path as osp

import pytest
from mmengine.config import Config

from mmstiff.apis import ConfigError, prepare_runner_cfg
from mmstiff.apis.config_checks import (check_mmstiff_types, check_options, check_train_loop,
                                        closest_names, option_key_problem, registered_mmstiff_types,
                                        train_loop_of)
from mmstiff.registry import HOOKS, MODELS

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO = osp.join(REPO, 'configs', 'demo', 'preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py')


def train_args(**kw):
    base = dict(config=DEMO, work_dir=None, resume=None, amp=False, no_validate=False,
                auto_scale_lr=False, no_pin_memory=False, no_persistent_workers=False,
                cfg_options=None, launcher='none')
    base.update(kw)
    return argparse.Namespace(**base)


def test_registered_types_are_every_name_of_mmstiffs_registries():
    names = registered_mmstiff_types()
    for registry in (MODELS, HOOKS):
        registry.import_from_location()
        assert {f'mmstiff.{n}' for n in registry.module_dict} <= set(names)
    assert names['mmstiff.StepNetAdaptor'] == 'model'
    assert names['mmstiff.StiffnessHook'] == 'hook'


def test_closest_names_follow_difflib_ratio():
    # 'StepResNett' is one insertion away from 'StepResNet': ratio 2*10/21 > 0.6
    assert closest_names('StepResNett', ['StepResNet', 'CaiT']) == ['StepResNet']
    assert closest_names('stiffnesshook', ['StiffnessHook']) == ['StiffnessHook']  # any case
    assert closest_names('Qwxz', ['StiffnessHook', 'CaiT']) == []


def test_misspelled_type_names_the_field_and_the_closest_names():
    cfg = dict(
        model=dict(
            type='ImageClassifier', backbone=dict(type='mmstiff.StepResNet', depth=18, adaptor=dict(
                type='mmstiff.StepNetAdaptr'))))
    with pytest.raises(ValueError) as err:
        check_mmstiff_types(cfg)
    assert str(err.value).startswith(
        "model.backbone.adaptor.type='mmstiff.StepNetAdaptr' is not a type mmstiff registers; "
        "did you mean 'mmstiff.StepNetAdaptor'")
    hooks = dict(
        custom_hooks=[dict(type='mmstiff.StiffnessHook'),
                      dict(type='mmstiff.FrequncyHook')])
    with pytest.raises(
            ValueError, match=r"^custom_hooks\.1\.type='mmstiff\.FrequncyHook' .*"
            r"did you mean 'mmstiff\.FrequencyHook'"):
        check_mmstiff_types(hooks)
    # nothing close: every registered name is listed
    with pytest.raises(ValueError, match=r"mmstiff registers .*mmstiff\.StiffnessHook"):
        check_mmstiff_types(dict(model=dict(type='mmstiff.Qwxz')))
    # registered names and other scopes pass
    check_mmstiff_types(Config.fromfile(DEMO))
    check_mmstiff_types(dict(model=dict(type='mmpretrain.Whatever')))


def test_train_loop_is_read_like_mmengine():
    assert train_loop_of(dict(by_epoch=True, max_epochs=3)) == 'EpochBasedTrainLoop'
    assert train_loop_of(dict(by_epoch=False, max_iters=3)) == 'IterBasedTrainLoop'
    assert train_loop_of(dict(type='mmengine.IterBasedTrainLoop')) == 'IterBasedTrainLoop'
    assert train_loop_of(dict(type='MyLoop', steps=3)) is None
    check_train_loop(Config(dict(train_cfg=dict(type='MyLoop', steps=3))))  # not ours to judge


def test_max_iters_on_an_epoch_based_config_says_which_key_to_use():
    cfg = Config.fromfile(DEMO)
    cfg.merge_from_dict({'train_cfg.max_iters': 20})
    with pytest.raises(ValueError) as err:
        check_train_loop(cfg)
    assert str(err.value) == (
        'train_cfg.max_iters=20 is not an argument of the epoch-based training loop; this '
        'config trains for train_cfg.max_epochs=3 (EpochBasedTrainLoop: the loop is '
        'epoch-based), so set train_cfg.max_epochs instead')
    iters = Config(dict(train_cfg=dict(type='IterBasedTrainLoop', max_iters=5, max_epochs=1)))
    with pytest.raises(
            ValueError, match=r'^train_cfg.max_epochs=1 .* iteration-based .* '
            r'train_cfg.max_iters=5 \(IterBasedTrainLoop'):
        check_train_loop(iters)
    typo = Config(dict(train_cfg=dict(by_epoch=True, max_epochs=1, val_intervall=1)))
    with pytest.raises(
            ValueError, match=r'^train_cfg.val_intervall=1 .* did you mean '
            r'train_cfg.val_interval\?$'):
        check_train_loop(typo)


def test_tools_report_the_checks_as_config_errors():
    with pytest.raises(ConfigError, match=r'set train_cfg.max_epochs instead'):
        prepare_runner_cfg(
            Config.fromfile(DEMO), train_args(cfg_options={'train_cfg.max_iters': 5}), 'train')
    with pytest.raises(ConfigError, match=r"did you mean 'mmstiff.PreActStepResNet'"):
        prepare_runner_cfg(
            Config.fromfile(DEMO),
            train_args(cfg_options={'model.backbone.type': 'mmstiff.PreActStepResNt'}), 'train')


@pytest.mark.slow
def test_train_cli_stops_with_one_line_before_any_work(run_tool, tmp_path):
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', DEMO, '--work-dir', str(work), '--cfg-options',
                    'train_cfg.max_iters=5', check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: train_cfg.max_iters=5 is not an argument of the epoch-based training loop; '
        'this config trains for train_cfg.max_epochs=3 (EpochBasedTrainLoop: the loop is '
        'epoch-based), so set train_cfg.max_epochs instead')
    assert 'Traceback' not in proc.stderr and not work.exists()


NESTED = dict(
    model=dict(
        type='ImageClassifier', backbone=dict(type='mmstiff.StepResNet', adaptor=None,
                                              stages=dict(adaptor_norm='auto'))),
    train_cfg=dict(by_epoch=True, max_epochs=3), custom_hooks=[dict(type='A', interval=5)])


@pytest.mark.parametrize(
    'key, problem',
    [
        ('train_cfg.max_epochs', None),  # an existing field
        ('custom_hooks.0.interval', None),  # a list item by index, as MMEngine merges it
        ('model.backbone.drop_path_rate', None),  # a new field, close to nothing: MMEngine adds it
        ('optim_wrapper.paramwise_cfg.norm_decay_mult', None),  # a new top-level section
        ('model.init_cfg', None),  # a new last part, even where a key of that name is deeper down
        ('train_cfg.max_epoch',
         "train_cfg has no key 'max_epoch'; did you mean train_cfg.max_epochs?"),
        ('trian_cfg.max_epochs', "the config has no key 'trian_cfg'; did you mean "
         'train_cfg.max_epochs?'),
        ('model.adaptr.type',
         "model has no key 'adaptr'; did you mean model.backbone.adaptor.type?"),
        ('model.stages.adaptor_norm', "model has no key 'stages'; did you mean "
         'model.backbone.stages.adaptor_norm?'),
        ('model.backbone.adaptor.type',
         'model.backbone.adaptor=None in the config is not a dict, so '
         'nothing can be set below it (set model.backbone.adaptor itself)'),
        ('custom_hooks.1.interval',
         "custom_hooks is a list of 1 item(s); '1' is not an index of it"),
    ])
def test_option_keys_are_walked_through_the_config(key, problem):
    assert option_key_problem(NESTED, key) == problem


def test_options_merged_and_checked_like_cfg_options():
    cfg = check_options(
        Config.fromfile(DEMO), {
            'train_cfg.max_epochs': 1,
            'model.backbone.adaptor': None
        })
    assert cfg.train_cfg.max_epochs == 1 and cfg.model.backbone.adaptor is None
    with pytest.raises(
            ValueError, match=r"^option train_cfg.max_epoch=1: train_cfg has no key "
            r"'max_epoch'; did you mean train_cfg\.max_epochs\?$"):
        check_options(Config.fromfile(DEMO), {'train_cfg.max_epoch': 1})
    # the merged config goes through the whole-config checks (the loop's keys here)
    with pytest.raises(
            ValueError, match=r'^train_cfg.max_iters=5 is not an argument of the '
            'epoch-based training loop'):
        check_options(Config.fromfile(DEMO), {'train_cfg.max_iters': 5})


# ------------------------------------------------------------------ the lists the Runner builds
def runner_lists_cfg(**fields):
    cfg = Config.fromfile(DEMO)
    cfg.merge_from_dict(fields)
    return cfg


@pytest.mark.parametrize(
    'fields, message', [
        (dict(custom_hooks=['EMAHook']), "custom_hooks.0='EMAHook' is a str, not a hook config; "
         "expected a dict with a type, such as dict(type='...'); write dict(type='EMAHook') for "
         'the hook of that name'),
        (dict(custom_hooks=[dict(type='EMAHook'), 'not-a-hook']),
         "custom_hooks.1='not-a-hook' is a str, not a hook config; expected a dict with a type, "
         "such as dict(type='...')"),
        (dict(custom_hooks=[dict(
            type='EMAHook'), dict(
                type='EMAHook'), dict(priority='LOW')]),
         "custom_hooks.2={'priority': 'LOW'} has no type; expected the hook to build named as "
         "type='...'"),
        (dict(custom_hooks=[dict(type='EMAHok')]),
         "custom_hooks.0.type='EMAHok' is not a hook type "
         "registered in mmpretrain; did you mean 'EMAHook'"),
        (dict(custom_hooks=None), None),
        (dict(param_scheduler=[dict(type='LinearLR'), 3]), "param_scheduler.1=3 is an int, not a "
         'parameter scheduler config'),
        (dict(param_scheduler=[dict(type='CosineAnealingLR')]), "param_scheduler.0.type="
         "'CosineAnealingLR' is not a parameter scheduler type registered in mmpretrain; did you "
         "mean 'CosineAnnealingLR'"),
        (dict(
            visualizer=dict(vis_backends=[dict(type='LocalVisBackend'), 'TensorboardVisBackend'])),
         "visualizer.vis_backends.1='TensorboardVisBackend' is a str, not a visualizer backend "
         "config; expected a dict with a type, such as dict(type='...'); write "
         "dict(type='TensorboardVisBackend')"),
        (dict(default_hooks=dict(logger=dict(interval=5, type=None))), "default_hooks.logger="),
    ], ids=[
        'hook-name', 'hook-other-string', 'hook-without-type', 'hook-misspelled', 'hooks-dict',
        'scheduler-int', 'scheduler-misspelled', 'backend-string', 'default-hook-no-type'
    ])
def test_runner_list_entries_are_checked_naming_field_index_and_value(fields, message):
    from mmstiff.apis.config_checks import check_runner_lists
    cfg = runner_lists_cfg(**fields)
    if message is None:  # a dict where MMEngine iterates a list
        cfg.custom_hooks = dict(type='EMAHook')
        with pytest.raises(
                ValueError, match=r"custom_hooks=\{'type': 'EMAHook'\} is a dict; "
                r"expected a list of hooks, such as \[\{'type': 'EMAHook'\}\]"):
            check_runner_lists(cfg)
        return
    with pytest.raises(ValueError) as err:
        check_runner_lists(cfg)
    assert str(err.value).startswith(message), str(err.value)


def test_runner_lists_that_mmengine_builds_pass():
    from mmstiff.apis.config_checks import check_runner_lists
    check_runner_lists(Config.fromfile(DEMO))  # its own hooks, schedulers and backends
    check_runner_lists(
        runner_lists_cfg(custom_hooks=[dict(type='mmstiff.DivergenceHook')],
                         default_hooks=dict(visualization=None)))
    check_runner_lists(
        Config(
            dict(
                default_scope='mmpretrain',
                param_scheduler=dict(backbone=[dict(type='ConstantLR')],
                                     head=dict(type='LinearLR')))))  # per optimizer
    with pytest.raises(ValueError, match=r"param_scheduler.head.type='LinearLRR' is not"):
        check_runner_lists(
            Config(
                dict(
                    default_scope='mmpretrain',
                    param_scheduler=dict(backbone=[dict(type='ConstantLR')],
                                         head=dict(type='LinearLRR')))))


def test_tools_stop_on_a_runner_list_entry_before_any_work():
    args = train_args(cfg_options={'custom_hooks': ['EMAHook']})
    with pytest.raises(ConfigError, match=r"custom_hooks.0='EMAHook' is a str"):
        prepare_runner_cfg(Config.fromfile(DEMO), args, 'train')
