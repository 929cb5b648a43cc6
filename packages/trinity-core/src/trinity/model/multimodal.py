"""Images in prompts: reading them, and the model inputs a vision-language model takes with the tokens.

Images come as OpenAI-style content parts (``image``, ``image_url``, ``video``): a file path,
bytes, a ``data:`` URL, a parquet Image dict or a PIL image, decoded with PIL (nothing in the
file runs, nothing is fetched); an unreadable one is a ``MediaError`` naming it.
``VisionInputs`` prepares them for the Qwen2-VL family: pad tokens expanded per merged patch,
``pixel_values`` and ``image_grid_thw`` that travel with the experience so the trainer
recomputes logprobs over the same pixels. docs/engines.md has the details.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

IMAGE_PARTS = ("image", "image_url")
VIDEO_PARTS = ("video", "video_url")
MediaInputs = dict[str, "torch.Tensor"]
"""The tensors a VLM takes beside ``input_ids`` for one prompt (``pixel_values``, ``image_grid_thw``)."""


class MediaError(ValueError):
    """An image (or video) of a prompt that cannot be read or used; the message names it."""


def _part_kind(part: Any) -> str | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in IMAGE_PARTS or (kind is None and any(k in part for k in IMAGE_PARTS)):
        return "image"
    if kind in VIDEO_PARTS or (kind is None and any(k in part for k in VIDEO_PARTS)):
        return "video"
    return None


def media_parts(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``(kind, value)`` of every image or video part of ``messages``, in prompt order."""
    found = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            kind = _part_kind(part)
            if kind is not None:
                value = next((part[k] for k in (*IMAGE_PARTS, *VIDEO_PARTS) if k in part), None)
                found.append((kind, value.get("url") if isinstance(value, dict) and "url" in value else value))
    return found


def without_media(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each image or video part reduced to ``{"type": KIND}`` (plus its path
    when it is one): what an experience keeps of them (the pixels travel as tensors)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(_part_kind(p) for p in content):
            parts = []
            for part in content:
                kind = _part_kind(part)
                value = next((part[k] for k in (*IMAGE_PARTS, *VIDEO_PARTS) if k in part), None) if kind else None
                parts.append(
                    part if kind is None else {"type": kind, **({kind: value} if isinstance(value, str) else {})}
                )
            message = {**message, "content": parts}
        out.append(message)
    return out


def load_image(value: Any, where: str = "image") -> Image:
    """An RGB PIL image from ``value`` (see the module docstring); ``where`` names it in a
    ``MediaError`` (``taskset row 3, column image``)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    name = where
    try:
        if isinstance(value, dict):
            value = value.get("bytes") or value.get("path")
        if isinstance(value, str) and value.startswith("data:"):
            value = base64.b64decode(value.split(",", 1)[1])
        if isinstance(value, str | Path):
            name = f"{where}: file {value}"
            if "://" in str(value):
                raise MediaError(f"{name}: only local files, bytes and data: URLs are read (nothing is fetched)")
            with Image.open(value) as image:
                return image.convert("RGB")
        if isinstance(value, bytes | bytearray):
            with Image.open(io.BytesIO(value)) as image:
                return image.convert("RGB")
    except FileNotFoundError:
        raise MediaError(f"{name}: no such file") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        if isinstance(exc, MediaError):
            raise
        raise MediaError(f"{name}: not a readable image ({type(exc).__name__}: {exc})") from None
    raise MediaError(f"{where}: {type(value).__name__} is not an image (a path, bytes, a data: URL or a PIL image)")


class VisionInputs:
    """The model inputs of prompts with images, for a model of the Qwen2-VL family at ``path``."""

    def __init__(self, path: str, model_config: Any, trust_remote_code: bool = False) -> None:
        from transformers import AutoImageProcessor

        self.image_token_id = getattr(model_config, "image_token_id", None)
        if self.image_token_id is None:
            raise MediaError(
                f"the model at {path} ({type(model_config).__name__}) names no image_token_id: trinity feeds images "
                "to models of the Qwen2-VL family (Qwen2-VL, Qwen2.5-VL)"
            )
        self.processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
        self.merge = int(getattr(self.processor, "merge_size", 1)) ** 2
        names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
        self.special_ids = [i for i in (getattr(model_config, name, None) for name in names) if i is not None]
        """The vision tokens a response must not hold (the model would look for their pixels): never sampled."""

    def prepare(self, ids: list[int], parts: list[tuple[str, Any]]) -> tuple[list[int], MediaInputs]:
        """``ids`` (one image-pad token per image, as the chat template renders them) with each pad
        expanded to the image's tokens, and the image tensors."""
        if any(kind == "video" for kind, _ in parts):
            raise MediaError(
                "videos need transformers' video processor, which needs torchvision (not installed here): "
                "give the frames as images instead"
            )
        images = [load_image(value, f"image {i + 1} of the prompt") for i, (_, value) in enumerate(parts)]
        pads = [k for k, token in enumerate(ids) if token == self.image_token_id]
        if len(pads) != len(images):
            raise MediaError(
                f"the chat template wrote {len(pads)} image tokens for {len(images)} images: use a template that "
                "renders image content parts (the model's own)"
            )
        inputs = dict(self.processor(images=images, return_tensors="pt"))
        counts = (inputs["image_grid_thw"].prod(-1) // self.merge).tolist()
        expanded: list[int] = []
        last = 0
        for pad, count in zip(pads, counts, strict=True):
            expanded += ids[last:pad] + [self.image_token_id] * int(count)
            last = pad + 1
        return expanded + ids[last:], inputs


def model_media(model: Any, input_ids: torch.Tensor, media: MediaInputs) -> dict[str, torch.Tensor]:
    """The keyword arguments of ``model``'s forward (or ``generate``) for ``media`` with ``input_ids``:
    the tensors, and which tokens are image (1) and video (2) tokens (``mm_token_type_ids``, from
    which the model places the images' 3-D positions)."""
    config = model.config
    types = (input_ids == config.image_token_id).int()
    video = getattr(config, "video_token_id", None)
    if video is not None:
        types = types + 2 * (input_ids == video).int()
    return {**media, "mm_token_type_ids": types}


def collate_media(rows: list[MediaInputs | None]) -> MediaInputs:
    """The inputs of several rows as one forward pass takes them: each tensor concatenated along
    its first dimension, in row order (rows without images add nothing)."""
    import torch

    present = [row for row in rows if row]
    return {key: torch.cat([row[key] for row in present if key in row]) for key in (present[0] if present else {})}
