"""Recorded iterations of a compiled training run run eagerly.

MMEngine's ``compile=True`` compiles ``train_step`` with ``torch.compile``; a diagnostics hook
registers its recorders' module hooks at its recorded iterations only. Compiling the model with
those hooks in place cuts its graph at every hooked block, takes minutes at the first recorded
iteration, and does not stay confined to it: the compiler tries its newest graph first, and the
cut graph is valid with the hooks and without them, so every later iteration runs it too,
slower than the whole graph (docs/benchmarks.md, "Diagnostics hooks with `torch.compile`").
So while any diagnostics hook records, the compiler stands aside
(``torch.compiler.set_stance('force_eager')``, torch >= 2.6): the recorded iteration runs as
an eager one, hooks and all, and the other iterations keep the whole compiled graph.

Without ``set_stance`` (torch < 2.6) the fallback is the compiler's guards on module hooks
(``torch._dynamo.config.skip_nnmodule_hook_guards = False``), which lets the hooks run in the
cut graph at the cost above.
"""
import logging
from typing import TYPE_CHECKING

import torch
from mmengine.logging import print_log

if TYPE_CHECKING:
    from mmengine.runner import Runner


def stance_supported() -> bool:
    """Whether this torch can set the compiler's stance (``torch.compiler.set_stance``)."""
    return callable(getattr(getattr(torch, 'compiler', None), 'set_stance', None))


class EagerWhileRecording:
    """The compiler's ``force_eager`` stance, held while at least one hook records.

    Several hooks may record the same iteration and finish in any order: :meth:`hold` and
    :meth:`release` count, and the stance before the first hold comes back at the last
    release. Where the stance cannot be set they only count.
    """

    def __init__(self):
        self._holds = 0
        self._stance = None

    @property
    def holds(self) -> int:
        """How many hooks hold the eager stance now."""
        return self._holds

    def hold(self) -> None:
        """Take one hold; the first sets the ``force_eager`` stance where this torch can set it."""
        if self._holds == 0 and stance_supported():
            self._stance = torch.compiler.set_stance('force_eager')
        self._holds += 1

    def release(self) -> None:
        """Give back one hold (nothing when none is held); the last brings back the stance that was
        set before the first hold."""
        if self._holds == 0:
            return
        self._holds -= 1
        if self._holds == 0 and self._stance is not None:
            stance, self._stance = self._stance, None
            stance.__exit__(None, None, None)  # back to the stance before the first hold


#: the one holder every diagnostics hook shares (the stance is global to the process).
EAGER_WHILE_RECORDING = EagerWhileRecording()


def watch_hooks_when_compiled(runner: 'Runner') -> None:
    """Where the stance cannot be set and the run is compiled (``compile=True``), turn on the
    compiler's guards on module hooks: without them, hooks registered after the first compiled
    iteration, as a recorder's are, would never run."""
    cfg = getattr(runner, 'cfg', None)
    if stance_supported() or not (cfg is not None and hasattr(cfg, 'get') and cfg.get('compile')):
        return
    import torch._dynamo
    if torch._dynamo.config.skip_nnmodule_hook_guards:
        torch._dynamo.config.skip_nnmodule_hook_guards = False
        print_log(
            'the diagnostics hooks register module hooks at their recorded iterations: '
            'torch._dynamo.config.skip_nnmodule_hook_guards set to False so that the '
            'compiled model runs them', logger='current', level=logging.INFO)
