"""Descriptive seed statistics: mean, sample variance and SD, pointwise summaries, by hand."""
import math

import pytest

from mmstiff.analysis.statistics import (mean, pointwise_summary, sample_std, sample_variance,
                                         summarize)


def test_mean_and_sample_std_by_hand():
    assert mean([1, 2, 3, 6]) == 3.0
    # deviations -2, -1, 0, 3: sum of squares 14, divisor n - 1 = 3
    assert sample_variance([1, 2, 3, 6]) == pytest.approx(14 / 3)
    assert sample_std([1, 2, 3, 6]) == pytest.approx(math.sqrt(14 / 3))
    assert sample_std([5.0]) is None
    assert summarize([2.0, 4.0]) == (2, 3.0, pytest.approx(math.sqrt(2)))
    with pytest.raises(ValueError, match='empty'):
        mean([])


def test_pointwise_summary_aligns_series():
    summary = pointwise_summary([{2: 1.0, 1: 3.0}, {2: 3.0, 3: 5.0}])
    assert summary.x == [1, 2, 3]
    assert summary.mean == [3.0, 2.0, 5.0]
    assert summary.std == [None, pytest.approx(math.sqrt(2)), None]
    assert summary.count == [1, 2, 1]
    # names keep the order they first appear in (blocks in trajectory order)
    blocks = pointwise_summary([{'layer1.0': 1.0, 'layer1.10': 2.0, 'layer1.2': 3.0}])
    assert blocks.x == ['layer1.0', 'layer1.10', 'layer1.2']
