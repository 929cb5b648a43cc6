"""Stand-in for TextWorld: ``EnvInfos`` and (in ``textworld.gym``) game registration."""


class EnvInfos:
    def __init__(self, **requested):
        self.requested = requested
