"""Values shared by the monitor tests: one experiment, a small config, a table of rollouts."""

PROJECT, NAME = "proj", "exp"
CONFIG = {"project": PROJECT, "name": NAME, "algorithm": {"algorithm_type": "grpo", "repeat_times": 4}, "tags": [1, 2]}
ROWS = [{"prompt": "1+1?", "response": "2", "reward": 1.0}, {"prompt": "2+2?", "response": "5", "reward": 0.0}]
