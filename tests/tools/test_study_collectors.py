"""The study runner's readers of the Hessian and spectrum tools' JSON."""
import math

import pytest

from mmstiff.studies.collect import collect_hessian, collect_spectrum
from mmstiff.studies.spec import ANALYSIS_TOOLS


def _record():
    return dict(metrics={}, curves={}, profiles={})


def test_hessian_summaries_become_metrics():
    assert ANALYSIS_TOOLS['hessian'] == ('tools/analysis/hessian.py', 'hessian.json')
    record = _record()
    collect_hessian(
        dict(
            spectrum=dict(values=[4.0, -1.0, 2.0, 3.0], nep=0.25, ape=3.0, max=4.0, min=-1.0,
                          most_negative=dict(values=[-2.0, -4.0], mean=-3.0), trace=dict(
                              values=[10.0, 14.0], mean=12.0))), record)
    assert record['metrics'] == {
        'hessian/nep': 0.25,
        'hessian/ape': 3.0,
        'hessian/max': 4.0,
        'hessian/min': -1.0,
        'hessian/log_ape': pytest.approx(math.log(3.0)),
        'hessian/most_negative': -3.0,
        'hessian/trace': 12.0
    }
    # no positive eigenvalue: APE is undefined (the tool writes null), so is its log
    record = _record()
    collect_hessian(
        dict(spectrum=dict(values=[-1.0], nep=1.0, ape=None, max=-1.0, min=-1.0)), record)
    assert 'hessian/ape' not in record['metrics'] and 'hessian/log_ape' not in record['metrics']
    assert record['metrics']['hessian/nep'] == 1.0


def test_spectrum_token_cosine_by_state_and_at_the_last():
    record = _record()
    states = {
        'patch_embed': dict(hf_ratio=0.5, token_cos=0.2),
        'layers.0': dict(hf_ratio=0.4, token_cos=0.3),
        'layers.1': dict(hf_ratio=0.3, token_cos=0.6)
    }
    collect_spectrum(dict(states=states), record)
    assert record['profiles']['spectrum/token_cos']['y'] == [0.2, 0.3, 0.6]
    assert record['metrics']['spectrum/token_cos/last'] == 0.6
