"""The arguments and checks the tools share (mmstiff.apis): one set of checkpoint flags for
tools/test.py and the analysis tools, and bad input that raises ConfigError naming the value
before anything is loaded."""
import argparse
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from script_modules import load_script  # tests/

from mmstiff.apis.analysis_setup import setup
from mmstiff.apis.batches import build_loader
from mmstiff.apis.cli import analysis_parser, positive_int
from mmstiff.apis.runtime import ConfigError
from mmstiff.apis.trained_model import checkpoint_options, load_trained_config
from mmstiff.apis.training_loss import decay_summary, weight_decays

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLS_CONFIG = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
FLAGS = ['--trust-checkpoint', '--allow-partial-load', '--allow-non-finite']


def _test_tool():
    return load_script('tools/test.py', 'test_tool')


def _flag_help(parser):
    return {
        a.option_strings[0]: a.help
        for a in parser._actions if set(a.option_strings) & set(FLAGS)
    }


def test_test_py_and_the_analysis_tools_share_the_checkpoint_flags():
    analysis, test = analysis_parser('x'), _test_tool()
    on = checkpoint_options(analysis.parse_args(['c.py', 'k.pth', *FLAGS]))
    assert on == dict(trust=True, allow_partial=True, allow_non_finite=True)
    off = checkpoint_options(analysis.parse_args(['c.py', 'k.pth']))
    assert off == dict(trust=False, allow_partial=False, allow_non_finite=False)
    args = test.parse_args(['c.py', 'k.pth', *FLAGS])
    assert args.trust_checkpoint and args.allow_partial_load and args.allow_non_finite
    # the same texts, but for the verb
    texts = _flag_help(analysis)
    assert sorted(texts) == sorted(FLAGS)
    assert {
        k: v.replace('analyse', 'evaluate')
        for k, v in texts.items()
    } == _flag_help(test.build_parser())


def test_positive_counts_are_checked_by_the_parser(capsys):
    with pytest.raises(SystemExit) as info:
        analysis_parser('x').parse_args(['c.py', 'k.pth', '--num-batches', '0'])
    assert info.value.code == 2
    assert "argument --num-batches: '0' is not a positive integer" in capsys.readouterr().err


def test_a_missing_checkpoint_is_named_before_the_model_is_built(tmp_path):
    missing = str(tmp_path / 'missing.pth')
    with pytest.raises(ConfigError, match=f"checkpoint '{missing}' does not exist"):
        load_trained_config(CLS_CONFIG, missing)


def test_the_device_is_checked_before_the_config(tmp_path):
    args = analysis_parser('x').parse_args([str(tmp_path / 'no.py'), 'k.pth'])
    args.device = 'mps'
    with pytest.raises(ConfigError, match="--device 'mps' is not supported"):
        setup(args, 'tns')


def test_a_split_the_config_lacks_is_named():
    with pytest.raises(ConfigError, match='the config has no val_dataloader; pick another'):
        build_loader(Config(dict(val_dataloader=None)), 'val')


def test_weight_decays_override_and_summary():
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in range(3)]
    assert weight_decays(Config(dict()), None, params, override=0.5) == [0.5, 0.5, 0.5]
    assert weight_decays(Config(dict()), None, params) == [0.0, 0.0, 0.0]  # no optimizer
    with pytest.raises(ConfigError, match=r'--weight-decay -0\.1 is negative'):
        weight_decays(Config(dict()), None, params, override=-0.1)
    assert decay_summary([0.0, 5e-4, 5e-4]) == {'0.0': 1, '0.0005': 2}


def test_positive_int_is_the_count_type_every_tool_parses_with(capsys):
    """One argparse type for the tools' counts (tools/reproduce.py's --jobs among them): a bad
    count is refused with the option's name and the value."""
    assert load_script('tools/reproduce.py', 'reproduce_tool').positive_int is positive_int
    parser = argparse.ArgumentParser(prog='tool')
    parser.add_argument('--jobs', type=positive_int, default=1)
    assert parser.parse_args(['--jobs', '3']).jobs == 3
    for bad, reason in (('0', "'0' is not a positive integer"), ('-2',
                                                                 "'-2' is not a positive integer"),
                        ('two', "invalid positive_int value: 'two'")):
        with pytest.raises(SystemExit):
            parser.parse_args(['--jobs', bad])
        assert f'argument --jobs: {reason}' in capsys.readouterr().err
