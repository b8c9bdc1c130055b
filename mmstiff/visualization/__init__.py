"""Figures of the diagnostics (matplotlib), for the command-line tools.

Kept apart from :mod:`mmstiff.analysis` (pure functions) and :mod:`mmstiff.engine` (hooks), as
MMEngine keeps ``mmengine.visualization`` apart from its hooks: nothing in the rest of the
package imports it, so training and the metrics never load matplotlib. Import the figures with
``from mmstiff.visualization import plots``; matplotlib loads on the first figure drawn.
"""

#: the figure modules: ``plots`` (the diagnostics of one run) and ``overlays`` (the variants of a
#: reproduction study, one line per variant, for tools/reproduce.py)
__all__ = ['plots', 'overlays']
#: ``instruments``: the How-do-ViTs paper's Hessian spectrum, loss landscape and feature-map
#: variance figures (tools/analysis/hessian.py, loss_landscape.py, feature_variance.py)
__all__ += ['instruments']
#: ``study_figures``: the figures of a study page (tools/reproduce.py)
__all__ += ['study_figures']
