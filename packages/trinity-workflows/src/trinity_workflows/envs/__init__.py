"""Environment workflows: the model acts in an environment for an episode (``envs.base``)."""
