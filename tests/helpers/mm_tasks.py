"""Generated image tasks for the multimodal tests: a shape of one colour on a white ground, asked
"What colour is the <shape>?", answered by the colour's name (checkable by ``accuracy_reward``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

COLOURS = {"red": (220, 30, 30), "pink": (250, 130, 210), "green": (30, 170, 50), "blue": (40, 60, 220)}
"""Colour names and their RGB; ``red`` and ``pink`` are two tokens each in the tiny tokenizer (the
learning test's pair: answers of one length, so learning the format favours neither)."""
SHAPES = ("square", "circle", "triangle")
SIDE = 56


def draw(shape: str, colour: str, rng: random.Random):
    """One ``SIDE``-pixel image: ``shape`` in ``colour``, of a random size and place."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIDE, SIDE), "white")
    size = rng.randint(SIDE // 2, SIDE - 8)
    x, y = rng.randint(2, SIDE - size - 2), rng.randint(2, SIDE - size - 2)
    box, fill = (x, y, x + size, y + size), COLOURS[colour]
    pen = ImageDraw.Draw(image)
    if shape == "square":
        pen.rectangle(box, fill=fill)
    elif shape == "circle":
        pen.ellipse(box, fill=fill)
    else:
        pen.polygon([(x, y + size), (x + size, y + size), (x + size // 2, y)], fill=fill)
    return image


def shape_rows(
    folder: Path, count: int, seed: int = 0, blank: bool = False, colours: tuple[str, ...] = tuple(COLOURS)
) -> list[dict]:
    """``count`` rows ``{"image": PATH, "question", "answer"}`` with their PNGs in ``folder``;
    ``blank``: every image plain white (the control: the answer is not in the image)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        shape, colour = rng.choice(SHAPES), rng.choice(colours)
        image = Image.new("RGB", (SIDE, SIDE), "white") if blank else draw(shape, colour, rng)
        path = folder / f"{i:04d}.png"
        image.save(path)
        rows.append({"image": str(path), "question": f"What colour is the {shape}?", "answer": colour})
    return rows


def write_taskset(folder: Path, count: int, seed: int = 0, blank: bool = False) -> Path:
    """``shape_rows`` as a JSON-lines taskset ``folder/tasks.jsonl``."""
    rows = shape_rows(folder / "images", count, seed, blank)
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
