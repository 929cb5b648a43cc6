"""Cells of the single-turn families: RL algorithm types on the quickstart's arithmetic."""

from __future__ import annotations

from learning_cells import Cell

GRPO = Cell(
    name="algorithm: grpo",
    family="single-turn RL",
    overrides=lambda ws: [],
    steps=120,
    test_steps=40,
    margin=0.15,
)
