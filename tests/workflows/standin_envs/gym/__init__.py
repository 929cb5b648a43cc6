"""Stand-in for the old ``gym`` registry WebShop registers with."""

registry = {}


def make(env_id, **kwargs):
    return registry[env_id](**kwargs)
