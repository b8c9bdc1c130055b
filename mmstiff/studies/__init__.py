"""Reproduction studies: a study file in, trained / tested / analysed runs and a page out.

The library half of ``tools/reproduce.py`` (which starts the processes): the study file
(:mod:`.spec`, :mod:`.outcome`), the runs and their commands (:mod:`.plan`), their state on
disk (:mod:`.state`, read through :mod:`.files`, rebuilt from the run folders by
:mod:`.rebuild`), one run carried out (:mod:`.execute`), the numbers of a finished run
(:mod:`.collect`), the inference over seeds (:mod:`.statistics`, :mod:`.numbers`) and the
page (:mod:`.report`, :mod:`.index`). Fields and rules: docs/studies.md.
"""
from .errors import StudyError
from .index import write_index
from .numbers import StudyNumbers
from .outcome import HELD, INCONCLUSIVE, NOT_HELD, Outcome, judge
from .plan import Launch, RunPlan, check_launch, plan_runs
from .report import category, read_runs, render_page, write_page, write_runs
from .runs import runs_json
from .spec import ANALYSIS_TOOLS, Study, load_study

__all__ = [
    'StudyError', 'Study', 'load_study', 'ANALYSIS_TOOLS', 'Outcome', 'judge', 'HELD', 'NOT_HELD',
    'INCONCLUSIVE', 'Launch', 'RunPlan', 'check_launch', 'plan_runs', 'StudyNumbers', 'category',
    'read_runs', 'render_page', 'write_page', 'write_runs', 'write_index', 'runs_json'
]
