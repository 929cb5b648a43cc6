"""The catalogue's rewards (being written: names registered in plugin.py resolve here)."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    class NotImplementedYet:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(f"trinity-workflows registers '{name}' but does not implement it yet")

    NotImplementedYet.__name__ = name
    return NotImplementedYet
