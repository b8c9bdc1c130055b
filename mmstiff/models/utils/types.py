"""Type aliases of the arguments the backbones share (for annotations only)."""
from typing import List, Sequence, Union

#: a per-layer switch (:func:`~mmstiff.models.utils.select_layers`): None (no layer),
#: ``'all'`` or a sequence of layer indices (negative ones count from the end)
LayerSelection = Union[str, Sequence[int], None]

#: a backbone's ``fused``: ``'auto'``, True or False (:data:`mmstiff.models.steps.FUSED`)
Fused = Union[str, bool]

#: an MMEngine ``init_cfg``: one initialiser config, a list of them, or None
InitConfig = Union[dict, List[dict], None]
