"""The shared argument checks: accepted values come back as kept, bad ones name field and value."""
import pytest

from mmstiff.utils import (check_config, check_indices, check_non_negative_int, check_patterns,
                           check_positive_int, matches_any)


def test_check_positive_int():
    assert check_positive_int('interval', 3) == 3
    assert check_positive_int('num_samples', None, optional=True) is None
    for bad in (0, -2, 1.0, True, '3', None):
        with pytest.raises(ValueError) as err:
            check_positive_int('interval', bad)
        assert f'interval={bad!r}' in str(err.value)
        assert str(err.value).endswith('expected a positive int')
    with pytest.raises(ValueError, match='num_samples=0 is not supported; expected None or a '
                       'positive int'):
        check_positive_int('num_samples', 0, optional=True)


def test_check_non_negative_int():
    assert check_non_negative_int('num_extra_tokens', 0) == 0
    assert check_non_negative_int('num_extra_tokens', None, optional=True) is None
    with pytest.raises(ValueError, match='num_extra_tokens=-1 .* expected None or an int >= 0'):
        check_non_negative_int('num_extra_tokens', -1, optional=True)
    with pytest.raises(ValueError, match='num_extra_tokens=False'):
        check_non_negative_int('num_extra_tokens', False)


def test_check_indices_wraps_negative_ones():
    assert check_indices('layers', [0, -1, 3, -4], 4) == frozenset({0, 3})
    assert check_indices('layers', (), 4) == frozenset()


@pytest.mark.parametrize('value, message', [
    ([4], 'layers holds 4, which is not an index of 4 layers; expected ints in [-4, 3]'),
    ([-5], 'layers holds -5'),
    ([0.5], 'layers holds 0.5'),
    ([True], 'layers holds True'),
    ('all', "layers='all' is not supported; expected None, 'all' or a sequence of indices of "
     'the layers'),
    (3, 'layers=3 is not supported'),
])
def test_check_indices_names_field_value_and_range(value, message):
    with pytest.raises(ValueError) as err:
        check_indices('layers', value, 4, what='layers', alternatives=('None', "'all'"))
    assert message in str(err.value)


def test_check_patterns_and_matches_any():
    assert check_patterns('blocks', None) is None
    assert check_patterns('blocks', 'layer1.*') == ['layer1.*']
    assert check_patterns('blocks', ('layer1.*', 'layer3.0')) == ['layer1.*', 'layer3.0']
    for bad in (5, ['layer1', 2], b'layer1'):
        with pytest.raises(ValueError, match=f'blocks={bad!r}'.replace('[', r'\[')):
            check_patterns('blocks', bad)
    patterns = ['layer1.*', 'layer3.0']
    assert [
        n for n in ('layer1.0', 'layer1.1', 'layer2.0', 'layer3.0', 'layer3.01')
        if matches_any(n, patterns)
    ] == ['layer1.0', 'layer1.1', 'layer3.0']
    assert matches_any('anything', None)
    assert not matches_any('Layer1.0', patterns)  # case-sensitive


def test_check_config():
    assert check_config('adaptor', None) is None
    cfg = dict(type='mmstiff.SEAdaptor', ratio=8)
    checked = check_config('adaptor', cfg, reserved=('channels', ))
    assert checked == cfg and checked is not cfg  # a copy: the caller may fill it in
    with pytest.raises(
            ValueError, match="adaptor='se' is not supported; expected None or a "
            "dict with a 'type', e.g. dict"):
        check_config('adaptor', 'se', example="dict(type='mmstiff.SEAdaptor')")
    with pytest.raises(ValueError, match=r"msa_adaptor=\{'ratio': 8\}"):
        check_config('msa_adaptor', dict(ratio=8))
    with pytest.raises(ValueError, match="sets 'channels'"):
        check_config('adaptor', dict(type='X', channels=8), reserved=('channels', 'layout'))
