from scripted import ScriptedGymEnv

_GAMES = {}


def register_game(game_file, request_infos, wrappers=()):
    env_id = f"tw-{len(_GAMES)}"
    _GAMES[env_id] = game_file
    return env_id


def make(env_id):
    return ScriptedGymEnv(_GAMES[env_id])
