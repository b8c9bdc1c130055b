"""Class-dependent drawn shapes: the learnable signal inside the tiny datasets.

Every tiny image is a noisy background with one or more filled convex polygons on it. A
class decides the polygon's *kind* (square, triangle, circle, ...) and its *colour*, so a
model sees real structure after a couple of iterations. All functions are pure: they take a
``numpy.random.Generator`` and return new arrays.

Coordinates follow the image convention: ``x`` is the column, ``y`` the row, and pixel
``(x, y)`` covers ``[x, x + 1) × [y, y + 1)``; a pixel belongs to a polygon when its centre
``(x + 0.5, y + 0.5)`` lies inside it.
"""
import colorsys
import math
from typing import List, Sequence, Tuple, Union

import numpy as np

#: Polygon kinds, all convex; class ``c`` draws ``SHAPE_KINDS[c % len(SHAPE_KINDS)]``.
SHAPE_KINDS = ('square', 'triangle', 'circle', 'diamond', 'hexagon')

#: An image size ``(W, H)`` in pixels.
Size = Tuple[int, int]

#: Smallest image side a shape is drawn on.
MIN_SIDE = 8

_VERTICES = {'square': 4, 'triangle': 3, 'circle': 24, 'diamond': 4, 'hexagon': 6}
_ROTATION = {
    'square': math.pi / 4,
    'triangle': -math.pi / 2,
    'circle': 0.0,
    'diamond': 0.0,
    'hexagon': 0.0
}


def class_kind(label: int) -> str:
    """The polygon kind class ``label`` draws."""
    return SHAPE_KINDS[int(label) % len(SHAPE_KINDS)]


def class_colour(label: int, num_classes: int) -> Tuple[int, int, int]:
    """A saturated RGB colour (tuple of three ints in 0..255) for class ``label``.

    Hues are spread evenly over the classes, so neighbouring labels differ in hue and (by
    :func:`class_kind`) in shape.
    """
    if not 0 <= label < num_classes:
        raise ValueError(f'label={label} is out of range; expected 0 <= label < {num_classes}')
    r, g, b = colorsys.hsv_to_rgb(label / num_classes, 0.85, 0.95)
    return int(round(r * 255)), int(round(g * 255)), int(round(b * 255))


def class_grey(label: int, num_classes: int) -> int:
    """A grey level (int in 96..255) for class ``label`` of a single-channel dataset.

    Classes sharing a kind (``label % len(SHAPE_KINDS)``) get different grey levels.
    """
    if not 0 <= label < num_classes:
        raise ValueError(f'label={label} is out of range; expected 0 <= label < {num_classes}')
    levels = math.ceil(num_classes / len(SHAPE_KINDS))
    if levels == 1:
        return 255
    step = label // len(SHAPE_KINDS)
    return int(round(255 - 159 * step / (levels - 1)))


def polygon(kind: str, centre: Tuple[float, float], radius: float) -> np.ndarray:
    """Vertices (N, 2), in order, of the regular ``kind`` polygon inscribed in the circle of
    ``radius`` around ``centre=(x, y)``."""
    if kind not in _VERTICES:
        raise ValueError(f'kind={kind!r} is not a known shape; expected one of {SHAPE_KINDS}')
    n = _VERTICES[kind]
    angles = _ROTATION[kind] + 2 * math.pi * np.arange(n) / n
    cx, cy = centre
    return np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], axis=1)


def polygon_mask(vertices: Union[np.ndarray, Sequence[Sequence[float]]], size: Size) -> np.ndarray:
    """Boolean mask (H, W) of the pixels whose centres lie inside the convex polygon.

    Args:
        vertices (array-like): (N, 2) vertices ``(x, y)`` of a convex polygon, in order.
        size (tuple): ``(W, H)`` of the image.
    """
    w, h = size
    v = np.asarray(vertices, dtype=np.float64)
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    signs = []
    for (x0, y0), (x1, y1) in zip(v, np.roll(v, -1, axis=0)):
        signs.append((x1 - x0) * (ys - y0) - (y1 - y0) * (xs - x0))
    signs = np.stack(signs)
    return np.all(signs >= 0, axis=0) | np.all(signs <= 0, axis=0)


def mask_bbox(mask: np.ndarray) -> List[int]:
    """Tight box ``[x, y, w, h]`` (ints, COCO convention) of the True pixels of ``mask``."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        raise ValueError('mask is empty; a bounding box needs at least one pixel')
    return [int(cols[0]), int(rows[0]), int(cols[-1] - cols[0] + 1), int(rows[-1] - rows[0] + 1)]


def noise_background(size: Size, rng: np.random.Generator, channels: int = 3, low: int = 0,
                     high: int = 64) -> np.ndarray:
    """A dark noisy background (H, W, C) uint8 with values in ``[low, high)``."""
    w, h = size
    base = rng.integers(low, high, size=(1, 1, channels))
    noise = rng.integers(-8, 9, size=(h, w, channels))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def paint(image: np.ndarray, mask: np.ndarray, colour: Sequence[int]) -> np.ndarray:
    """A copy of ``image`` (H, W, C) with ``colour`` (C values) where ``mask`` is True."""
    out = image.copy()
    out[mask] = np.asarray(colour, dtype=np.uint8)
    return out


def check_size(size: Sequence[int], minimum: int = MIN_SIDE, name: str = 'size') -> Size:
    """Validate an image size ``(W, H)``; return it as a tuple of two ints."""
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(v, (int, np.integer)) and v >= minimum for v in size)):
        raise ValueError(f'{name}={size!r} is invalid; expected (W, H), two ints >= {minimum}')
    return int(size[0]), int(size[1])


def random_shape(kind: str, size: Size, rng: np.random.Generator, min_frac: float = 0.25,
                 max_frac: float = 0.45) -> np.ndarray:
    """Vertices of a ``kind`` polygon of random radius and position fully inside ``size``."""
    w, h = check_size(size)
    short = min(w, h)
    radius = rng.uniform(min_frac, max_frac) * short
    cx = rng.uniform(radius + 1, w - radius - 1)
    cy = rng.uniform(radius + 1, h - radius - 1)
    return polygon(kind, (cx, cy), radius)


def draw_class_image(label: int, num_classes: int, size: Size, rng: np.random.Generator,
                     channels: int = 3) -> np.ndarray:
    """An image (H, W, C) uint8 of class ``label``: its shape, in its colour, on noise.

    Args:
        label (int): class index, ``0 <= label < num_classes``.
        num_classes (int): number of classes of the dataset.
        size (tuple): ``(W, H)``.
        rng (numpy.random.Generator): source of the position, size and noise.
        channels (int): 3 (RGB, :func:`class_colour`) or 1 (grey, :func:`class_grey`).
    """
    if channels == 3:
        colour = class_colour(label, num_classes)
    elif channels == 1:
        colour = (class_grey(label, num_classes), )
    else:
        raise ValueError(f'channels={channels} is not supported; expected 1 or 3')
    vertices = random_shape(class_kind(label), size, rng)
    background = noise_background(size, rng, channels=channels)
    return paint(background, polygon_mask(vertices, size), colour)
