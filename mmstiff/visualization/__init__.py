"""Figures of the diagnostics (matplotlib), for the command-line tools.

Kept apart from :mod:`mmstiff.analysis` (pure functions) and :mod:`mmstiff.engine` (hooks), as
MMEngine keeps ``mmengine.visualization`` apart from its hooks: nothing in the rest of the
package imports it but the dashboard hook, inside the function that draws a run's dashboard at
a checkpoint, so training loads matplotlib only then and the metrics never. Import the figures
with ``from mmstiff.visualization import plots``; matplotlib loads on the first figure drawn.
"""

#: the figure modules: ``plots`` (the diagnostics of one run) and ``overlays`` (the variants of a
#: reproduction study, one line per variant, for tools/reproduce.py)
__all__ = ['plots', 'overlays']
#: ``instruments``: the How-do-ViTs paper's Hessian spectrum, loss landscape and feature-map
#: variance figures (tools/analysis/hessian.py, loss_landscape.py, feature_variance.py)
__all__ += ['instruments']
#: ``study_figures``: the figures of a study page (tools/reproduce.py)
__all__ += ['study_figures']
#: ``dashboard``: one figure of a training run (its curves and heat strips of the per-step
#: diagnostics), for tools/analysis/plot_logs.py and the dashboard hook of mmstiff.engine
__all__ += ['dashboard']
