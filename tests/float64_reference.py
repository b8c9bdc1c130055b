"""Float32 results judged against the same computation in float64, for comparisons whose
float32 rounding is amplified (a deep network in train mode: the batch statistics of small
maps). Importable from any test folder (it sits beside the root conftest.py)."""


def relative_errors(got, exact):
    """``||got_i − exact_i|| / ||exact_i||`` of each pair of tensors (float64 norms)."""
    return [((g.double().cpu() - e.double().cpu()).norm() /
             e.double().cpu().norm().clamp_min(1e-300)).item() for g, e in zip(got, exact)]


def assert_no_farther(got, reference, exact, factor=2.5, overall=1.25, slack=1e-5, names=None):
    """``got`` is no farther from its float64 ``exact`` than the ``reference`` computation:
    each tensor's relative error within ``factor`` times the reference's plus ``slack`` (the
    rounding of one tensor moves by up to about 2x between two float32 computations of an
    ill-conditioned gradient), and the root sum of squares of all of them within ``overall``
    times the reference's plus ``slack``."""
    assert len(got) == len(reference) == len(exact)
    errors, reference_errors = relative_errors(got, exact), relative_errors(reference, exact)
    for i, (g, r) in enumerate(zip(errors, reference_errors)):
        assert g <= factor * r + slack, (names[i] if names else i, g, r)
    total, reference_total = (
        sum(e * e for e in values)**0.5 for values in (errors, reference_errors))
    assert total <= overall * reference_total + slack, ('all', total, reference_total)
