"""Where an analysis tool writes: its output folder, JSON files with non-finite values as
null, and, with ``--to-visualizer``, its figures sent to the backends of the config's
``visualizer`` (MMEngine's ``Visualizer.add_image`` at step 0, named after the PNG file;
docs/diagnostics.md)."""
import json
import os
import os.path as osp
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence, SupportsFloat

from .runtime import ConfigError

if TYPE_CHECKING:
    from mmengine.config import Config
    from mmengine.visualization import Visualizer


def out_dir_of(args: Any, tool: str) -> str:
    """``--out-dir``, or ``<checkpoint dir>/analysis/<tool>``; created."""
    out_dir = args.out_dir or osp.join(osp.dirname(osp.abspath(args.checkpoint)), 'analysis', tool)
    os.makedirs(out_dir, exist_ok=True)
    return out_dir


def dump_json(obj: Any, path: str) -> str:
    """Write ``obj`` to ``path`` as indented JSON and return ``path``. Non-finite floats are
    written as ``NaN`` / ``Infinity``; pass values through :func:`finite` to write null."""
    with open(path, 'w') as f:
        json.dump(obj, f, indent=2, allow_nan=True)
    return path


def finite(value: SupportsFloat) -> Optional[float]:
    """A float for JSON, None where not finite."""
    value = float(value)
    return value if value == value and abs(value) != float('inf') else None


def check_visualizer(args: Any, cfg: 'Config') -> Optional[dict]:
    """With ``--to-visualizer``, the config's ``visualizer`` (it must have backends; otherwise
    :class:`ConfigError` naming what is missing). Called before any work and again when
    sending."""
    vis_cfg = cfg.get('visualizer')
    if getattr(args, 'to_visualizer', False) and (not vis_cfg or not vis_cfg.get('vis_backends')):
        raise ConfigError(
            f'--to-visualizer: the config has no visualizer.vis_backends '
            f'(visualizer={vis_cfg!r}); expected e.g. '
            "visualizer=dict(type='Visualizer', vis_backends=[dict(type='LocalVisBackend')])")
    return vis_cfg


def send_figures(args: Any, cfg: 'Config', files: Sequence[str],
                 tool: str) -> Optional['Visualizer']:
    """With ``--to-visualizer``: every PNG of ``files`` to the backends of ``cfg.visualizer``
    (``add_image`` at step 0, named after the file), saved under ``<out dir>/vis_data``.
    Returns the visualizer (None without the flag)."""
    if not getattr(args, 'to_visualizer', False):
        return None
    import cv2
    from mmengine.registry import VISUALIZERS
    vis_cfg = check_visualizer(args, cfg).copy()
    vis_cfg['save_dir'] = out_dir_of(args, tool)
    vis_cfg['name'] = f'analysis_{tool}_{time.time_ns()}'  # a new instance, not a reused one
    visualizer = VISUALIZERS.build(vis_cfg)
    for path in files:
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        if image is None:
            raise ConfigError(f'--to-visualizer: cannot read the figure {path!r}')
        visualizer.add_image(
            osp.splitext(osp.basename(path))[0], cv2.cvtColor(image, cv2.COLOR_BGR2RGB), step=0)
    visualizer.close()
    print(f'sent {len(files)} figures to the visualizer backends '
          f'{[type(b).__name__ for b in visualizer._vis_backends.values()]}')
    return visualizer
