"""Stand-in for ALFWorld's TextWorld wrappers."""

import enum


class AlfredDemangler:
    pass


class AlfredExpertType(enum.Enum):
    HANDCODED = "handcoded"


class AlfredExpert:
    def __init__(self, expert_type):
        self.expert_type = expert_type
